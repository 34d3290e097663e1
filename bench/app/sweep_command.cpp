#include "bench/app/sweep_command.hpp"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "analysis/host_profile.hpp"
#include "record/result_file.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"
#include "launch/resolve.hpp"

namespace dpbench {

namespace {
std::string clock_text(double seconds) {
  const auto s = static_cast<long>(seconds + 0.5);
  return fmt::format("{}:{:02d}", s / 60, s % 60);
}

// "ps/p2p mlp ranks=2 batch=256 workers=0 rep=1": the transport only for strategies that take one,
// a hook other than allreduce's own ("allreduce/fp16 ..."), a staleness bound above 0
// ("sharded_ps/collective/staleness=2 ...").
std::string point_label(const TrainConfig& config, int rep) {
  const bool takes_transport = !find_strategy(config.mode).transports.empty();
  return fmt::format("{}{}{}{} {} ranks={} batch={} workers={} rep={}", config.mode,
                     takes_transport ? "/" + std::string(name(config.transport)) : "",
                     config.allreduce.comm_hook != CommHook{} ? "/" + hook_name(config.allreduce.comm_hook) : "",
                     config.sharded_ps.staleness > 0 ? fmt::format("/staleness={}", config.sharded_ps.staleness) : "",
                     config.model.workload, config.world_size, config.global_batch, config.loader.num_workers, rep);
}
// What every group of the grid runs per repetition: every --transports value for a strategy
// that takes a transport, the base config's for the others (which ignore it). With --comm-hooks
// and --stalenesses, a mode once per hook and bound it can run: a hook or bound another strategy
// owns (option_owner) is that strategy's alone, and a bound above 0 runs under allreduce's own
// hook only.
struct SweepVariant {
  Mode mode;
  Transport transport;
  CommHook hook;
  int staleness;
};
std::vector<SweepVariant> sweep_variants(const SweepOptions& o) {
  const std::vector<CommHook> hooks = o.comm_hooks.empty() ? std::vector{o.base.allreduce.comm_hook} : o.comm_hooks;
  const std::vector<int> bounds = o.stalenesses.empty() ? std::vector{o.base.sharded_ps.staleness} : o.stalenesses;
  std::vector<SweepVariant> variants;
  for (const auto& mode : o.modes) {
    for (const CommHook& hook : hooks) {
      for (const int bound : bounds) {
        if (bound > 0 && hook != CommHook{}) continue;
        TrainConfig probe;  // the hook and the bound alone
        probe.allreduce.comm_hook = hook;
        probe.sharded_ps.staleness = bound;
        if (const auto owner = option_owner(probe); owner && owner->strategy->mode != mode) continue;
        if (find_strategy(mode).transports.empty()) {
          variants.push_back({mode, o.base.transport, hook, bound});
          continue;
        }
        for (const auto& t : o.transports) variants.push_back({mode, t, hook, bound});
      }
    }
  }
  return variants;
}
}  // namespace

std::vector<std::string> hook_names(const std::vector<CommHook>& hooks) {
  std::vector<std::string> names;
  for (const CommHook& h : hooks) names.push_back(hook_name(h));
  return names;
}

std::vector<SweepPoint> sweep_points(const SweepOptions& o) {
  // The grid's groups: every combination of the non-mode axes, first axis outermost.
  std::vector<TrainConfig> groups = {o.base};
  auto expand = [&groups](const auto& values, auto set) {
    std::vector<TrainConfig> next;
    for (const auto& g : groups) {
      for (const auto& v : values) {
        TrainConfig config = g;
        set(config, v);
        next.push_back(std::move(config));
      }
    }
    groups = std::move(next);
  };
  expand(o.workloads, [&o](TrainConfig& config, const std::string& v) {
    config.model.workload = v;
    if (v == "cnn" && o.cnn_default_hidden) config.model.hidden = {128};
    if (v == "cnn" && o.cnn_default_lr && config.optimizer.name == "sgd") config.optimizer.lr = 0.05f;
  });
  expand(o.comms, [](TrainConfig& config, Backend v) { config.comm = v; });
  expand(o.ranks, [](TrainConfig& config, int v) { config.world_size = v; });
  expand(o.batch_sizes, [](TrainConfig& config, std::size_t v) { config.global_batch = v; });
  expand(o.num_workers, [](TrainConfig& config, int v) { config.loader.num_workers = v; });

  const std::vector<SweepVariant> variants = sweep_variants(o);
  std::vector<SweepPoint> points;
  for (const auto& g : groups) {
    for (int rep = 0; rep < o.repetitions; ++rep) {
      for (const SweepVariant& v : variants) {
        TrainConfig config = g;
        config.mode = v.mode;
        config.transport = v.transport;
        config.allreduce.comm_hook = v.hook;
        config.sharded_ps.staleness = v.staleness;
        points.push_back({std::move(config), rep});
      }
    }
  }
  return points;
}

namespace {

// The sweep's whole-grid checks (lists, modes, common options, launchers); the device it runs
// on. Throws InputError naming the option.
DeviceChoice check_sweep(const SweepOptions& o) {
  if (o.repetitions < 1) throw InputError(fmt::format("--repetitions {}: must be at least 1", o.repetitions));
  if (o.workloads.empty() || o.comms.empty() || o.modes.empty() || o.transports.empty()) {
    throw InputError("sweep: every grid list needs at least one value");
  }
  if (o.ranks.empty() || o.batch_sizes.empty() || o.num_workers.empty()) {
    throw InputError("sweep: --ranks, --batch-sizes and --num-workers need at least one value");
  }
  const DeviceChoice device = choose_device(o.device, std::any_of(o.comms.begin(), o.comms.end(), [](Backend b) {
                                              return b == Backend::mpi || b == Backend::gloo;
                                            }));
  for (const auto& w : o.workloads) {
    TrainConfig config = o.base;
    config.model.workload = w;
    check_common_options(config, o.timeout_s);
  }
  for (const auto& comm : o.comms) {
    if (comm == Backend::mpi) {
      if (o.ranks.size() != 1) {
        throw InputError("--comms mpi: the launcher fixes the world size; give one --ranks value (mpirun -np)");
      }
      resolve_launch(comm, o.ranks.front(), device.device);
    } else if (resolve_launch(comm, 0, device.device).multi_process) {
      throw InputError(fmt::format("--comms {}: a sweep runs nccl ranks as threads of one process; for one "
                                   "rank per process (mpirun, WORLD_SIZE) use dpbench run",
                                   comm));
    }
  }
  return device;
}

// One point's result entry: its run, or (InputError for a combination that cannot run, or a
// runtime failure) a "failed" entry with the error, counted in `failed`.
nlohmann::json run_point(TrainConfig config, const LoadedData& data, const DeviceChoice& device, bool quiet,
                         std::size_t index, std::size_t total, std::size_t& failed) {
  nlohmann::json entry;
  try {
    check_point(config, *data.train);
    entry = run_to_json(execute_point(config, data, device));
    entry["status"] = "ok";
  } catch (const std::exception& e) {
    // InputError (this point's combination cannot run) and runtime failures alike.
    ++failed;
    entry = {{"status", "failed"},
             {"mode", config.mode},
             {"strategy", strategy_to_json(config)},
             {"world_size", config.world_size},
             {"global_batch", config.global_batch},
             {"config", config_to_json(config)},
             {"error", e.what()}};
    if (!quiet) fmt::print(stderr, "sweep [{}/{}] failed: {}\n", index + 1, total, e.what());
  }
  return entry;
}

}  // namespace

namespace {

// The sweep's config: the base configuration less what the grid varies, the grid's axes under
// "sweep", and the data.
nlohmann::json sweep_config_json(const SweepOptions& o, const TrainConfig& base, const LoadedData& data) {
  nlohmann::json config = config_to_json(base);
  for (const char* varied : {"mode", "transport", "world_size", "global_batch", "num_workers", "workload", "comm"}) {
    config.erase(varied);
  }
  config["sweep"] = {{"workloads", o.workloads},
                     {"comms", o.comms},
                     {"modes", o.modes},
                     {"transports", o.transports},
                     {"ranks", o.ranks},
                     {"batch_sizes", o.batch_sizes},
                     {"num_workers", o.num_workers},
                     {"repetitions", o.repetitions}};
  if (!o.comm_hooks.empty()) {
    config.erase("comm_hook");
    config["sweep"]["comm_hooks"] = hook_names(o.comm_hooks);
  }
  if (!o.stalenesses.empty()) {
    config.erase("staleness");
    config["sweep"]["stalenesses"] = o.stalenesses;
  }
  config.update(data.config);
  return config;
}

}  // namespace

int sweep_command(const SweepOptions& o) {
  // Whole-sweep input errors stop before anything runs; a point that cannot run is recorded.
  const DeviceChoice device = check_sweep(o);
  const bool output = is_output_process();
  const std::string out = o.out.empty() ? default_out_path("sweep") : o.out;
  if (output) check_result_path(out);  // before any training: a bad --out wastes no sweep
  const std::optional<HostProfile> profile = o.host_profile.empty()
                                                 ? std::nullopt
                                                 : std::optional<HostProfile>(read_host_profile(o.host_profile));
  const LoadedData data = load_data(o.data, o.base.seed);

  TrainConfig base = o.base;
  base.device = device.device;
  base.loader.pin_memory = o.data.pin_memory >= 0 ? o.data.pin_memory == 1 : device.device == DeviceKind::cuda;
  base.timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000.0));
  SweepOptions resolved = o;
  resolved.base = base;
  const std::vector<SweepPoint> points = sweep_points(resolved);
  const std::size_t total = points.size();
  const bool quiet = o.quiet || !output;
  if (!device.note.empty() && !quiet) fmt::print(stderr, "{}\n", device.note);

  nlohmann::json runs = nlohmann::json::array();
  std::size_t index = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const SweepPoint& point : points) {
    const int rep = point.repetition;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!quiet) {
      const std::string remaining = index == 0 ? std::string("?")
                                               : clock_text(elapsed / static_cast<double>(index) *
                                                            static_cast<double>(total - index));
      fmt::print(stderr, "sweep [{}/{}] {} | elapsed {}, ~{} left\n", index + 1, total, point_label(point.config, rep),
                 clock_text(elapsed), remaining);
    }
    nlohmann::json entry = run_point(point.config, data, device, quiet, index, total, failed);
    entry["repetition"] = rep;
    runs.push_back(std::move(entry));
    ++index;
  }

  nlohmann::json config = sweep_config_json(o, base, data);
  if (!output) return 0;
  nlohmann::json document = make_document(std::move(config), std::move(runs));
  if (profile) document["env"]["host_profile"] = host_profile_env_record(*profile);
  write_json_atomic(out, document);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("sweep: {} points ({} failed) in {}; results written to {}\n", total, failed, clock_text(elapsed), out);
  return 0;
}

}  // namespace dpbench
