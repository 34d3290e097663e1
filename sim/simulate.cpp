#include "sim/simulate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <deque>
#include <memory>
#include <fstream>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

#include <dlfcn.h>

namespace dpbench {

void SimPlatform::check(int world_size) const {
  if (!platform_file.empty()) {
    if (!std::ifstream(platform_file).good()) {
      throw InputError(fmt::format("platform file {}: cannot be read", platform_file));
    }
    if (!engine_efficiency.empty() || !engine_overhead_s.empty() || !engine_overhead_per_byte_s.empty() ||
        send_buffer_bytes > 0) {
      throw InputError(fmt::format("platform file {}: takes no engine calibration or send buffer", platform_file));
    }
    return;
  }
  if (ranks_per_node < 1) throw InputError(fmt::format("platform: {} ranks per node", ranks_per_node));
  const long capacity = static_cast<long>(nodes.size()) * ranks_per_node;
  if (capacity < world_size) {
    throw InputError(fmt::format("platform: {} nodes x {} ranks hold {} ranks, fewer than the {} of the schedule",
                                 nodes.size(), ranks_per_node, capacity, world_size));
  }
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (!(nodes[i].up_bytes_per_s > 0) || !(nodes[i].down_bytes_per_s > 0) || nodes[i].latency_s < 0) {
      throw InputError(fmt::format("platform: node {}: link rates must be positive and latency >= 0", i));
    }
  }
  if (ranks_per_node > 1 && !(intra_bytes_per_s > 0)) {
    throw InputError("platform: several ranks per node need a positive intra-node rate");
  }
  if (!(send_buffer_bytes >= 0))
    throw InputError(fmt::format("platform: send buffer {} bytes is negative", send_buffer_bytes));
  for (double e : engine_efficiency) {
    if (!(e >= 0 && e <= 1)) throw InputError(fmt::format("platform: engine efficiency {} is not in [0, 1]", e));
  }
  for (double o : engine_overhead_s) {
    if (!(o >= 0 && o < 3600)) throw InputError(fmt::format("platform: engine overhead {} s is not in [0, 3600)", o));
  }
  for (double o : engine_overhead_per_byte_s) {
    if (!(o >= 0 && o < 1))
      throw InputError(fmt::format("platform: engine overhead {} s per byte is not in [0, 1)", o));
  }
  if (engine_overhead_s.size() > static_cast<std::size_t>(kCollectiveKinds) ||
      engine_overhead_per_byte_s.size() > static_cast<std::size_t>(kCollectiveKinds)) {
    throw InputError(fmt::format("platform: {} engine overheads for {} collective kinds", engine_overhead_s.size(),
                                 kCollectiveKinds));
  }
  if (engine_efficiency.size() > static_cast<std::size_t>(kCollectiveKinds)) {
    throw InputError(fmt::format("platform: {} engine efficiencies for {} collective kinds", engine_efficiency.size(),
                                 kCollectiveKinds));
  }
  if (nodes_per_leaf > 0 && !(leaf_up_bytes_per_s > 0)) {
    throw InputError("platform: a two-level tree needs a positive leaf uplink rate");
  }
}

nlohmann::json SimPlatform::to_json() const {
  nlohmann::json n = nlohmann::json::array();
  for (const auto& node : nodes) {
    n.push_back({{"up_bytes_per_s", node.up_bytes_per_s},
                 {"down_bytes_per_s", node.down_bytes_per_s},
                 {"latency_s", node.latency_s}});
  }
  if (!platform_file.empty()) return {{"platform_file", platform_file}};
  nlohmann::json j = {{"nodes", n},
                      {"ranks_per_node", ranks_per_node},
                      {"intra_bytes_per_s", intra_bytes_per_s},
                      {"intra_latency_s", intra_latency_s}};
  if (send_buffer_bytes > 0) j["send_buffer_bytes"] = send_buffer_bytes;
  for (std::size_t k = 0; k < engine_efficiency.size(); ++k) {
    if (engine_efficiency[k] > 0) {
      j["engine_efficiency"][collective_name(static_cast<CollectiveKind>(k))] = engine_efficiency[k];
    }
  }
  for (std::size_t k = 0; k < engine_overhead_s.size(); ++k) {
    if (engine_overhead_s[k] > 0) {
      j["engine_overhead_s"][collective_name(static_cast<CollectiveKind>(k))] = engine_overhead_s[k];
    }
  }
  for (std::size_t k = 0; k < engine_overhead_per_byte_s.size(); ++k) {
    if (engine_overhead_per_byte_s[k] > 0) {
      j["engine_overhead_per_byte_s"][collective_name(static_cast<CollectiveKind>(k))] = engine_overhead_per_byte_s[k];
    }
  }
  if (nodes_per_leaf > 0) {
    j["nodes_per_leaf"] = nodes_per_leaf;
    j["leaf_up_bytes_per_s"] = leaf_up_bytes_per_s;
    j["leaf_latency_s"] = leaf_latency_s;
  }
  return j;
}

#if DPBENCH_HAVE_SIMGRID

namespace {

// Reads everything from fd until EOF.
std::string read_all(int fd) {
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t got = ::read(fd, buf, sizeof buf);
    if (got > 0) {
      out.append(buf, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      return out;
    }
  }
}

using RunFn = int (*)(const StepSchedule*, const SimPlatform*, int, std::string*);

// The forked child of simulate(): loads the SimGrid plugin, plays the schedule, writes the
// plugin's JSON (or {"error": ...}) to fd and exits with the plugin's code. Never returns.
[[noreturn]] void simulate_in_child(const StepSchedule& schedule, const SimPlatform& platform, int steps, int fd) {
  std::string text;
  int code = 1;
  // RTLD_LOCAL: libsimgrid's MPI symbols stay out of this process's global scope.
  void* plugin = ::dlopen(DPBENCH_SIMGRID_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  const auto run = plugin != nullptr ? reinterpret_cast<RunFn>(::dlsym(plugin, "dpbench_simgrid_run")) : nullptr;
  if (run == nullptr) {
    const char* why = ::dlerror();
    text = nlohmann::json{{"error",
                           fmt::format("{}: {}", DPBENCH_SIMGRID_PLUGIN, why != nullptr ? why : "no entry point")}}
               .dump();
  } else {
    code = run(&schedule, &platform, steps, &text);
  }
  std::size_t off = 0;
  while (off < text.size()) {
    const ssize_t put = ::write(fd, text.data() + off, text.size() - off);
    if (put <= 0) break;
    off += static_cast<std::size_t>(put);
  }
  ::_exit(code);
}

}  // namespace

bool simulation_available() { return ::access(DPBENCH_SIMGRID_PLUGIN, R_OK) == 0; }

SimulationResult simulate(const StepSchedule& schedule, const SimPlatform& platform, int steps) {
  if (steps < 1) throw Error(fmt::format("simulation: {} steps; at least 1", steps));
  if (!simulation_available()) {
    throw Error(fmt::format("simulation unavailable: the SimGrid plugin {} is missing (rebuild dpbench)",
                            DPBENCH_SIMGRID_PLUGIN));
  }
  platform.check(static_cast<int>(schedule.ranks().size()));  // a folded schedule's ranks
  schedule.check_matched();
  const auto t0 = std::chrono::steady_clock::now();
  int fds[2];
  if (::pipe(fds) != 0) throw Error(fmt::format("simulation: pipe: {}", std::strerror(errno)));
  // The child inherits stdio's buffers, and SimGrid flushes stdout: text this process had not yet
  // written (a summary table on a redirected stdout) would be written once per simulation.
  std::cout.flush();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("simulation: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    simulate_in_child(schedule, platform, steps, fds[1]);
  }
  ::close(fds[1]);
  const std::string text = read_all(fds[0]);
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  nlohmann::json out = nlohmann::json::parse(text, nullptr, false);
  if (out.is_discarded() || out.contains("error") || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string why = out.is_object() && out.contains("error") ? out["error"].get<std::string>()
                            : WIFSIGNALED(status) ? fmt::format("killed by signal {}", WTERMSIG(status))
                                                  : "no result";
    throw Error(fmt::format("simulation failed: {}", why));
  }
  SimulationResult r;
  r.rank_step_s = out.at("rank_step_s").get<std::vector<double>>();
  r.step_s = r.rank_step_s.front();
  r.simulated_s = out.at("simulated_s").get<double>();
  r.messages = out.at("messages").get<long>();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.config = {
      {"engine", out.value("engine", std::string("SimGrid"))}, {"options", out.at("options")}, {"steps", steps}};
  return r;
}

#else

bool simulation_available() { return false; }

SimulationResult simulate(const StepSchedule&, const SimPlatform&, int) {
  throw Error("simulation unavailable: this dpbench was built without SimGrid (install libsimgrid-dev, "
              "e.g. bash scripts/setup.sh, and rebuild)");
}

#endif

namespace {
// The schedule's simulated time to its last rank's end (one step) on `platform` with one entry of
// a per-kind calibration (`field`: engine_efficiency) set to `value`.
double end_with(const StepSchedule& schedule, SimPlatform pf, std::vector<double> SimPlatform::*field,
                CollectiveKind kind, double value) {
  (pf.*field).resize(kCollectiveKinds, 0.0);
  (pf.*field)[static_cast<std::size_t>(kind)] = value;
  const SimulationResult r = simulate(schedule, pf, 1);
  return *std::max_element(r.rank_step_s.begin(), r.rank_step_s.end());
}
}  // namespace

EfficiencyFit fit_engine_efficiency(const StepSchedule& schedule, const SimPlatform& platform, CollectiveKind kind,
                                    double measured_s) {
  EfficiencyFit fit;
  auto time_at = [&](double e) {
    ++fit.simulations;
    return end_with(schedule, platform, &SimPlatform::engine_efficiency, kind, e);
  };
  constexpr double kLowest = 0.01;
  fit.at_link_s = fit.fitted_s = time_at(1.0);
  if (!(measured_s > fit.at_link_s)) return fit;
  // t(e) does not grow with e, and is flat where the cap does not bind (a flow's fair share of its
  // links already below it): false position on x = 1 / e, bracketed, with the Illinois
  // modification, to 0.5 % of the measured time.
  double x_lo = 1.0, t_lo = fit.at_link_s;  // t below the measured time
  double x_hi = 1.0 / kLowest, t_hi = time_at(kLowest);
  fit.efficiency = kLowest;
  fit.fitted_s = t_hi;
  if (t_hi <= measured_s) return fit;  // slower than a hundredth of the link: the cap's floor
  int kept = 0;                        // which end stayed the last time (Illinois: halve its weight after two in a row)
  for (int i = 0; i < 16; ++i) {
    double x = x_lo + (measured_s - t_lo) * (x_hi - x_lo) / (t_hi - t_lo);
    if (!(x > x_lo && x < x_hi)) x = 0.5 * (x_lo + x_hi);
    const double t = time_at(1.0 / x);
    if (std::abs(t - measured_s) < std::abs(fit.fitted_s - measured_s)) {
      fit.efficiency = 1.0 / x;
      fit.fitted_s = t;
    }
    if (std::abs(t - measured_s) <= 0.005 * measured_s) break;
    if (t > measured_s) {
      x_hi = x;
      t_hi = t;
      if (kept == -1) t_lo = measured_s - 0.5 * (measured_s - t_lo);
      kept = -1;
    } else {
      x_lo = x;
      t_lo = t;
      if (kept == 1) t_hi = measured_s + 0.5 * (t_hi - measured_s);
      kept = 1;
    }
  }
  return fit;
}

namespace {
// o >= 0 such that the schedule ends at measured_s on the platform `set` makes of it; secant steps
// from o = 0, the first at `first_guess` x the gap.
EfficiencyFit fit_overhead(const StepSchedule& schedule, const SimPlatform& platform, double measured_s,
                           const std::function<void(SimPlatform&, double)>& set, double first_guess) {
  EfficiencyFit fit;
  auto time_at = [&](double o) {
    ++fit.simulations;
    SimPlatform pf = platform;
    set(pf, o);
    const SimulationResult r = simulate(schedule, pf, 1);
    return *std::max_element(r.rank_step_s.begin(), r.rank_step_s.end());
  };
  fit.at_link_s = fit.fitted_s = time_at(0.0);
  if (!(measured_s > fit.at_link_s)) return fit;
  double o_lo = 0.0, t_lo = fit.at_link_s, o = first_guess * (measured_s - fit.at_link_s);
  for (int i = 0; i < 11; ++i) {
    const double t = time_at(o);
    if (std::abs(t - measured_s) < std::abs(fit.fitted_s - measured_s)) {
      fit.overhead_s = o;
      fit.fitted_s = t;
    }
    if (std::abs(t - measured_s) <= 0.005 * measured_s || !(t > t_lo)) break;
    const double next = o_lo + (measured_s - t_lo) * (o - o_lo) / (t - t_lo);
    o_lo = o;
    t_lo = t;
    o = std::max(0.0, next);
  }
  return fit;
}
}  // namespace

EfficiencyFit fit_engine_overhead(const StepSchedule& schedule, const SimPlatform& platform, CollectiveKind kind,
                                  double measured_s) {
  const auto k = static_cast<std::size_t>(kind);
  const auto set = [k](SimPlatform& pf, double o) {
    pf.engine_overhead_s.resize(kCollectiveKinds, 0.0);
    pf.engine_overhead_s[k] = o;
  };
  return fit_overhead(schedule, platform, measured_s, set, 1.0);  // first: the gap, one message's worth
}

EfficiencyFit fit_engine_overhead_per_byte(const StepSchedule& schedule, const SimPlatform& platform,
                                           CollectiveKind kind, double measured_s, double kept_s, double kept_bytes) {
  const auto k = static_cast<std::size_t>(kind);
  const auto set = [k, kept_s, kept_bytes](SimPlatform& pf, double o) {
    pf.engine_overhead_s.resize(kCollectiveKinds, 0.0);
    pf.engine_overhead_per_byte_s.resize(kCollectiveKinds, 0.0);
    pf.engine_overhead_per_byte_s[k] = o;
    pf.engine_overhead_s[k] = std::max(0.0, kept_s - o * kept_bytes);
  };
  return fit_overhead(schedule, platform, measured_s, set, 1e-6);  // first: the gap over a megabyte
}

}  // namespace dpbench
