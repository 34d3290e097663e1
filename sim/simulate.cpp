#include "sim/simulate.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

#if DPBENCH_HAVE_SIMGRID
#include <simgrid/s4u.hpp>
#include <simgrid/version.h>
#include <xbt/log.h>
#endif

namespace dpbench {

void SimPlatform::check(int world_size) const {
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
  nlohmann::json j = {{"nodes", n},
                      {"ranks_per_node", ranks_per_node},
                      {"intra_bytes_per_s", intra_bytes_per_s},
                      {"intra_latency_s", intra_latency_s}};
  if (nodes_per_leaf > 0) {
    j["nodes_per_leaf"] = nodes_per_leaf;
    j["leaf_up_bytes_per_s"] = leaf_up_bytes_per_s;
    j["leaf_latency_s"] = leaf_latency_s;
  }
  return j;
}

#if DPBENCH_HAVE_SIMGRID

namespace {

namespace sg4 = simgrid::s4u;

const char* const kModelOptions[] = {"network/model:CM02", "network/crosstraffic:0", "network/TCP-gamma:0"};

// A star zone of one node: its ranks' hosts, each on its own intra-node link to the node's
// router, which is the zone's gateway.
std::pair<sg4::NetZone*, simgrid::kernel::routing::NetPoint*> build_node(const SimPlatform& pf, sg4::NetZone* parent,
                                                                         int node, int first_rank, int ranks) {
  auto* zone = sg4::create_star_zone(fmt::format("node-{}", node));
  zone->set_parent(parent);
  auto* gw = zone->create_router(fmt::format("node-{}-gw", node));
  zone->add_route(gw, nullptr, nullptr, nullptr, {}, true);
  for (int i = 0; i < ranks; ++i) {
    const int rank = first_rank + i;
    auto* host = zone->create_host(fmt::format("rank-{}", rank), 1e9);
    if (pf.ranks_per_node > 1) {
      auto* lo = zone->create_split_duplex_link(fmt::format("rank-{}-intra", rank), pf.intra_bytes_per_s);
      lo->set_latency(pf.intra_latency_s);
      zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                      {sg4::LinkInRoute(lo, sg4::LinkInRoute::Direction::UP)}, true);
    } else {
      zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {}, true);
    }
  }
  zone->seal();
  return {zone, gw};
}

// The node's link in `parent`'s star: up = egress, down = ingress.
void attach(sg4::NetZone* parent, sg4::NetZone* child, simgrid::kernel::routing::NetPoint* gw, const std::string& name,
            double up, double down, double latency) {
  auto* link = parent->create_split_duplex_link(name, up);
  link->get_link_up()->set_bandwidth(up);
  link->get_link_down()->set_bandwidth(down);
  link->set_latency(latency);
  parent->add_route(child->get_netpoint(), nullptr, gw, nullptr, {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)},
                    true);
}

void build_platform(const SimPlatform& pf, int world_size) {
  auto* root = sg4::create_star_zone("switch");
  const int nodes = (world_size + pf.ranks_per_node - 1) / pf.ranks_per_node;
  sg4::NetZone* leaf = root;
  simgrid::kernel::routing::NetPoint* leaf_gw = nullptr;
  for (int n = 0; n < nodes; ++n) {
    if (pf.nodes_per_leaf > 0 && n % pf.nodes_per_leaf == 0) {
      if (leaf != root) {
        leaf->seal();
        attach(root, leaf, leaf_gw, fmt::format("leaf-{}-up", n / pf.nodes_per_leaf - 1), pf.leaf_up_bytes_per_s,
               pf.leaf_up_bytes_per_s, pf.leaf_latency_s);
      }
      leaf = sg4::create_star_zone(fmt::format("leaf-{}", n / pf.nodes_per_leaf));
      leaf->set_parent(root);
      leaf_gw = leaf->create_router(fmt::format("leaf-{}-gw", n / pf.nodes_per_leaf));
      leaf->add_route(leaf_gw, nullptr, nullptr, nullptr, {}, true);
    }
    const int first = n * pf.ranks_per_node;
    const int count = std::min(pf.ranks_per_node, world_size - first);
    auto [zone, gw] = build_node(pf, leaf, n, first, count);
    const SimNode& nic = pf.nodes[static_cast<std::size_t>(n)];
    attach(leaf, zone, gw, fmt::format("node-{}-nic", n), nic.up_bytes_per_s, nic.down_bytes_per_s, nic.latency_s);
  }
  if (leaf != root) {
    leaf->seal();
    attach(root, leaf, leaf_gw, fmt::format("leaf-{}-up", (nodes - 1) / pf.nodes_per_leaf), pf.leaf_up_bytes_per_s,
           pf.leaf_up_bytes_per_s, pf.leaf_latency_s);
  }
  root->seal();
}

// One stream of one rank, `steps` times over; stream 0 notes when each step ends.
class StreamActor {
 public:
  StreamActor(const std::vector<ScheduleOp>& ops, int rank, int stream, int steps,
              std::vector<sg4::SemaphorePtr>& events, std::vector<double>* step_ends, long* messages)
      : ops_(ops), rank_(rank), stream_(stream), steps_(steps), events_(events), step_ends_(step_ends),
        messages_(messages) {}

  void operator()() {
    for (int step = 0; step < steps_; ++step) {
      for (const ScheduleOp& op : ops_) play(op);
      wait(sends_);
      wait(recvs_);
      if (step_ends_ != nullptr) step_ends_->push_back(sg4::Engine::get_clock());
    }
  }

 private:
  sg4::Mailbox* mailbox(int from, int to) const { return sg4::Mailbox::by_name(fmt::format("{}:{}>{}", stream_, from, to)); }
  static void wait(std::vector<sg4::CommPtr>& comms) {
    if (!comms.empty()) sg4::Comm::wait_all(comms);
    comms.clear();
  }
  void play(const ScheduleOp& op) {
    switch (op.kind) {
      case ScheduleOpKind::compute:
        if (op.seconds > 0) sg4::this_actor::sleep_for(op.seconds);
        break;
      case ScheduleOpKind::send:
        sends_.push_back(mailbox(rank_, op.peer)->put_async(&token_, static_cast<uint64_t>(op.bytes)));
        ++*messages_;
        break;
      case ScheduleOpKind::recv:
        sinks_.emplace_back(nullptr);
        recvs_.push_back(mailbox(op.peer, rank_)->get_async<int>(&sinks_.back()));
        break;
      case ScheduleOpKind::wait_recvs:
        wait(recvs_);
        sinks_.clear();
        break;
      case ScheduleOpKind::wait_all:
        wait(recvs_);
        wait(sends_);
        sinks_.clear();
        break;
      case ScheduleOpKind::record:
        events_.at(static_cast<std::size_t>(op.event))->release();
        break;
      case ScheduleOpKind::wait_event:
        events_.at(static_cast<std::size_t>(op.event))->acquire();
        break;
    }
  }

  const std::vector<ScheduleOp>& ops_;
  int rank_, stream_, steps_;
  std::vector<sg4::SemaphorePtr>& events_;
  std::vector<double>* step_ends_;
  long* messages_;
  int token_ = 0;
  std::vector<sg4::CommPtr> sends_, recvs_;
  std::deque<int*> sinks_;
};

// In the child: build, play, and return the result as JSON.
nlohmann::json run_simulation(const StepSchedule& schedule, const SimPlatform& pf, int steps) {
  int argc = 1;
  char name[] = "dpbench-sim";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  xbt_log_control_set("root.thresh:critical");
  for (const char* option : kModelOptions) sg4::Engine::set_config(option);
  const int p = schedule.world_size();
  build_platform(pf, p);
  std::vector<std::vector<double>> ends(static_cast<std::size_t>(p));
  std::vector<std::vector<sg4::SemaphorePtr>> events(static_cast<std::size_t>(p));
  long messages = 0;
  for (int r = 0; r < p; ++r) {
    const RankProgram& prog = schedule.ranks()[static_cast<std::size_t>(r)];
    for (int e = 0; e < prog.events; ++e) events[static_cast<std::size_t>(r)].push_back(sg4::Semaphore::create(0));
    sg4::Host* host = engine.host_by_name(fmt::format("rank-{}", r));
    for (std::size_t s = 0; s < std::max<std::size_t>(prog.streams.size(), 1); ++s) {
      static const std::vector<ScheduleOp> kEmpty;
      const auto& ops = s < prog.streams.size() ? prog.streams[s] : kEmpty;
      sg4::Actor::create(fmt::format("rank-{}-stream-{}", r, s), host,
                         StreamActor(ops, r, static_cast<int>(s), steps, events[static_cast<std::size_t>(r)],
                                     s == 0 ? &ends[static_cast<std::size_t>(r)] : nullptr, &messages));
    }
  }
  engine.run();
  nlohmann::json out = {{"simulated_s", sg4::Engine::get_clock()}, {"messages", messages}};
  nlohmann::json rank_steps = nlohmann::json::array();
  for (int r = 0; r < p; ++r) {
    const auto& e = ends[static_cast<std::size_t>(r)];
    if (static_cast<int>(e.size()) != steps) {
      throw Error(fmt::format("simulation: rank {} finished {} of {} steps (the schedule deadlocks)", r, e.size(), steps));
    }
    rank_steps.push_back(steps == 1 ? e.back() : (e.back() - e.front()) / (steps - 1));
  }
  out["rank_step_s"] = rank_steps;
  return out;
}

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

}  // namespace

bool simulation_available() { return true; }

SimulationResult simulate(const StepSchedule& schedule, const SimPlatform& platform, int steps) {
  if (steps < 1) throw Error(fmt::format("simulation: {} steps; at least 1", steps));
  platform.check(schedule.world_size());
  schedule.check_matched();
  const auto t0 = std::chrono::steady_clock::now();
  int fds[2];
  if (::pipe(fds) != 0) throw Error(fmt::format("simulation: pipe: {}", std::strerror(errno)));
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("simulation: fork: {}", std::strerror(errno)));
  if (pid == 0) {
    ::close(fds[0]);
    std::string text;
    int code = 0;
    try {
      text = run_simulation(schedule, platform, steps).dump();
    } catch (const std::exception& e) {
      text = nlohmann::json{{"error", e.what()}}.dump();
      code = 1;
    }
    std::size_t off = 0;
    while (off < text.size()) {
      const ssize_t put = ::write(fds[1], text.data() + off, text.size() - off);
      if (put <= 0) break;
      off += static_cast<std::size_t>(put);
    }
    ::_exit(code);
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
  r.config = {{"engine", fmt::format("SimGrid {}.{}", SIMGRID_VERSION_MAJOR, SIMGRID_VERSION_MINOR)},
              {"options", std::vector<std::string>(std::begin(kModelOptions), std::end(kModelOptions))},
              {"steps", steps}};
  return r;
}

#else

bool simulation_available() { return false; }

SimulationResult simulate(const StepSchedule&, const SimPlatform&, int) {
  throw Error("simulation unavailable: this dpbench was built without SimGrid (install libsimgrid-dev, "
              "e.g. bash scripts/setup.sh, and rebuild)");
}

#endif

}  // namespace dpbench
