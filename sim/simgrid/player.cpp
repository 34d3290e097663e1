// The SimGrid side of sim/simulate.hpp, built as a plugin (libdpbench_simgrid.so) that
// simulate() loads in its child process: libsimgrid also defines the MPI API (SMPI), so linking it
// into dpbench would hand Open MPI's MPI_Init to SimGrid. Loaded with RTLD_LOCAL in a child, its
// symbols never meet the parent's. Uses only header-defined parts of dpbench (the schedule's
// accessors, the platform's fields, the error types).
#include <algorithm>
#include <cctype>
#include <deque>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <simgrid/s4u.hpp>
#include <simgrid/version.h>
#include <xbt/log.h>

#include "core/error.hpp"
#include "sim/simulate.hpp"

namespace dpbench {

namespace {

namespace sg4 = simgrid::s4u;

// TCP-gamma (the window) so large that it bounds no flow: 0 would do that too, but CM02 then also
// drops a comm's own rate bound (Comm::set_rate, the engine calibration) on any route with latency.
const char* const kModelOptions[] = {"network/model:CM02", "network/crosstraffic:0", "network/TCP-gamma:1e30"};
// Speed only: raw context switches and small actor stacks (a stream's actor needs little), which
// took the 1,024-rank projection from 61.5 s to 56.1 s on 2 cores.
const char* const kContextOptions[] = {"contexts/factory:raw", "contexts/stack-size:128"};

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
  parent->add_route(child->get_netpoint(), nullptr, gw, nullptr,
                    {sg4::LinkInRoute(link, sg4::LinkInRoute::Direction::UP)}, true);
}

// A leaf switch's gateway: a router in a zone of its own inside the leaf, at the depth of the
// ranks' node zones. (SimGrid 3.32 resolves a route from a host two zones down to a router of
// the leaf itself in the leaf's table under the host's own index, not its node zone's: every rank
// of a leaf then left it through the NIC of whichever node had that index, without its intra-node
// link. Simulation.TwoLeavesRouteEachNodeThroughItsOwnNic pins the routes.)
simgrid::kernel::routing::NetPoint* leaf_gateway(sg4::NetZone* leaf, int index) {
  auto* zone = sg4::create_star_zone(fmt::format("leaf-{}-uplink", index));
  zone->set_parent(leaf);
  auto* gw = zone->create_router(fmt::format("leaf-{}-gw", index));
  zone->add_route(gw, nullptr, nullptr, nullptr, {}, true);
  zone->seal();
  leaf->add_route(zone->get_netpoint(), nullptr, gw, nullptr, {}, true);
  return gw;
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
      leaf_gw = leaf_gateway(leaf, n / pf.nodes_per_leaf);
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

// a < b in natural order: runs of digits compare as numbers (node-2 before node-10).
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      const std::string x = a.substr(i, ei - i), y = b.substr(j, ej - j);
      const std::size_t zx = x.find_first_not_of('0'), zy = y.find_first_not_of('0');
      const std::string nx = zx == std::string::npos ? "" : x.substr(zx),
                        ny = zy == std::string::npos ? "" : y.substr(zy);
      if (nx.size() != ny.size()) return nx.size() < ny.size();
      if (nx != ny) return nx < ny;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// The hosts ranks 0..p-1 run on: built from the platform's fields, or the first p hosts of its
// platform file in natural name order. Throws Error when the file has fewer than p hosts.
std::vector<sg4::Host*> rank_hosts(sg4::Engine& engine, const SimPlatform& pf, int p) {
  std::vector<sg4::Host*> hosts;
  if (pf.platform_file.empty()) {
    build_platform(pf, p);
    for (int r = 0; r < p; ++r) hosts.push_back(engine.host_by_name(fmt::format("rank-{}", r)));
    return hosts;
  }
  engine.load_platform(pf.platform_file);
  hosts = engine.get_all_hosts();
  std::sort(hosts.begin(), hosts.end(),
            [](const sg4::Host* a, const sg4::Host* b) { return natural_less(a->get_name(), b->get_name()); });
  if (static_cast<int>(hosts.size()) < p) {
    throw Error(fmt::format("platform file {}: {} hosts, fewer than the {} ranks", pf.platform_file, hosts.size(), p));
  }
  hosts.resize(static_cast<std::size_t>(p));
  return hosts;
}

// One stream of one rank, `steps` times over; stream 0 notes when each step ends.
class StreamActor {
 public:
  StreamActor(const std::vector<ScheduleOp>& ops, const SimPlatform& pf, int rank, int stream, int steps,
              std::vector<sg4::SemaphorePtr>& events, std::vector<double>* step_ends, long* messages)
      : ops_(ops),
        pf_(pf),
        rank_(rank),
        stream_(stream),
        steps_(steps),
        events_(events),
        step_ends_(step_ends),
        messages_(messages) {}

  void operator()() {
    for (int step = 0; step < steps_; ++step) {
      for (const ScheduleOp& op : ops_) play(op);
      wait(sends_);
      wait(recvs_);
      wait(heads_);
      if (step_ends_ != nullptr) step_ends_->push_back(sg4::Engine::get_clock());
    }
  }

 private:
  // The mailbox of (this stream, from, to), looked up by name once per peer (a table indexed by
  // the peer's rank: a hash map's lookup per message was 3 % of a 1,024-rank simulation).
  sg4::Mailbox* mailbox(int from, int to) {
    const bool out = from == rank_;
    std::vector<sg4::Mailbox*>& boxes = boxes_[out ? 0 : 1];
    const auto peer = static_cast<std::size_t>(out ? to : from);
    if (boxes.size() <= peer) boxes.resize(peer + 1, nullptr);
    sg4::Mailbox*& box = boxes[peer];
    if (box == nullptr) box = sg4::Mailbox::by_name(fmt::format("{}:{}>{}", stream_, from, to));
    return box;
  }
  // Blocks until every comm of `comms` has completed; a message's tail (the last
  // send_buffer_bytes, see send()) starts the moment its head completes, even while the stream
  // waits for something else.
  void wait(std::vector<sg4::CommPtr>& comms) {
    if (&comms == &heads_ || heads_.empty()) {
      if (&comms == &heads_) {
        while (!heads_.empty()) release_tail(sg4::Comm::wait_any(heads_));
      } else if (!comms.empty()) {
        sg4::Comm::wait_all(comms);
      }
      comms.clear();
      return;
    }
    std::vector<sg4::CommPtr> both;
    while (!comms.empty()) {
      both = comms;
      both.insert(both.end(), heads_.begin(), heads_.end());
      const auto i = static_cast<std::size_t>(sg4::Comm::wait_any(both));
      if (i < comms.size()) {
        comms.erase(comms.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        release_tail(static_cast<ssize_t>(i - comms.size()));
      }
    }
  }
  // The head heads_[i] has left: its tail goes on its own (detached), the sender no longer waits.
  void release_tail(ssize_t i) {
    const auto at = static_cast<std::size_t>(i);
    auto comm = mailbox(rank_, tails_[at].first)->put_init(&token_, static_cast<uint64_t>(tails_[at].second));
    cap(*comm, rank_, tails_[at].first, tail_kinds_[at]);
    comm->detach();
    heads_.erase(heads_.begin() + i);
    tails_.erase(tails_.begin() + i);
    tail_kinds_.erase(tail_kinds_.begin() + i);
  }
  // The bytes of a message between nodes that the sender's kernel holds, so that the sender goes
  // on before they have left (0: a send completes when the receiver has everything).
  double buffered(int from_rank, int to_rank, double bytes) const {
    if (!(pf_.send_buffer_bytes > 0) || from_rank / pf_.ranks_per_node == to_rank / pf_.ranks_per_node) return 0.0;
    return std::min(bytes, pf_.send_buffer_bytes);
  }
  void play(const ScheduleOp& op) {
    switch (op.kind) {
      case ScheduleOpKind::compute:
        if (op.seconds() > 0) sg4::this_actor::sleep_for(op.seconds());
        break;
      case ScheduleOpKind::send:
        send(op);
        ++*messages_;
        break;
      case ScheduleOpKind::recv: {
        // A message the sender splits (send()) arrives as its head, then its tail.
        const double tail = buffered(op.peer(), rank_, op.bytes());
        const int parts = tail > 0 && tail < op.bytes() ? 2 : 1;
        for (int i = 0; i < parts; ++i) {
          sinks_.emplace_back(nullptr);
          auto comm = mailbox(op.peer(), rank_)->get_init()->set_dst_data(reinterpret_cast<void**>(&sinks_.back()));
          cap(*comm, op.peer(), rank_, op.collective);
          comm->start();
          recvs_.push_back(comm);
        }
        break;
      }
      case ScheduleOpKind::wait_recvs:
        wait(recvs_);
        sinks_.clear();
        break;
      case ScheduleOpKind::wait_all:
        wait(recvs_);
        wait(sends_);
        wait(heads_);
        sinks_.clear();
        break;
      case ScheduleOpKind::record: events_.at(static_cast<std::size_t>(op.event()))->release(); break;
      case ScheduleOpKind::wait_event: events_.at(static_cast<std::size_t>(op.event()))->acquire(); break;
    }
  }

  // A message of collective `kind` to another node moves at most the engine's share of its links
  // for that collective. (Set on both ends: the transfer takes the rate of whichever end SimGrid
  // keeps.)
  void cap(sg4::Comm& comm, int from_rank, int to_rank, CollectiveKind kind) const {
    const int from = from_rank / pf_.ranks_per_node, to = to_rank / pf_.ranks_per_node;
    const auto k = static_cast<std::size_t>(kind);
    if (from == to || k >= pf_.engine_efficiency.size() || !(pf_.engine_efficiency[k] > 0)) return;
    const double link = std::min(pf_.nodes[static_cast<std::size_t>(from)].up_bytes_per_s,
                                 pf_.nodes[static_cast<std::size_t>(to)].down_bytes_per_s);
    comm.set_rate(pf_.engine_efficiency[k] * link);
  }
  // The engine's per-message cost of a message of this stream to another node (0 within a node).
  double overhead(const ScheduleOp& op) const {
    if (rank_ / pf_.ranks_per_node == op.peer() / pf_.ranks_per_node) return 0.0;
    return message_overhead(pf_, op);
  }
  // A message between nodes leaves as its head (all but its last send_buffer_bytes), which the
  // sender waits for, then its tail, which the sender's kernel sends on its own while the sender
  // goes on (TCP's send buffer); a message no larger than the buffer leaves at once, detached.
  void send(const ScheduleOp& op) {
    if (const double o = overhead(op); o > 0) sg4::this_actor::sleep_for(o);
    const double tail = buffered(rank_, op.peer(), op.bytes());
    if (tail >= op.bytes() && tail > 0) {
      auto comm = mailbox(rank_, op.peer())->put_init(&token_, static_cast<uint64_t>(op.bytes()));
      cap(*comm, rank_, op.peer(), op.collective);
      comm->detach();
      return;
    }
    auto comm = mailbox(rank_, op.peer())->put_init(&token_, static_cast<uint64_t>(op.bytes() - tail));
    cap(*comm, rank_, op.peer(), op.collective);
    comm->start();
    if (tail > 0) {
      heads_.push_back(comm);
      tails_.emplace_back(op.peer(), tail);
      tail_kinds_.push_back(op.collective);
    } else {
      sends_.push_back(comm);
    }
  }

  const std::vector<ScheduleOp>& ops_;
  const SimPlatform& pf_;
  int rank_, stream_, steps_;
  std::vector<sg4::SemaphorePtr>& events_;
  std::vector<double>* step_ends_;
  long* messages_;
  int token_ = 0;
  std::vector<sg4::CommPtr> sends_, recvs_;
  std::vector<sg4::CommPtr> heads_;            // heads of split messages, not yet left
  std::vector<std::pair<int, double>> tails_;  // [heads_]: peer, bytes
  std::vector<CollectiveKind> tail_kinds_;     // [heads_]
  std::vector<sg4::Mailbox*> boxes_[2];        // [0]: to a peer, [1]: from it; by the peer's rank
  std::deque<int*> sinks_;
};

// Builds, plays, and returns the result as JSON.
nlohmann::json run_simulation(const StepSchedule& schedule, const SimPlatform& pf, int steps) {
  int argc = 1;
  char name[] = "dpbench-sim";
  char* argv[] = {name, nullptr};
  sg4::Engine engine(&argc, argv);
  xbt_log_control_set("root.thresh:critical");
  for (const char* option : kModelOptions) sg4::Engine::set_config(option);
  for (const char* option : kContextOptions) sg4::Engine::set_config(option);
  const int p = static_cast<int>(schedule.ranks().size());  // the ranks kept, when folded
  const std::vector<sg4::Host*> hosts = rank_hosts(engine, pf, p);
  std::vector<std::vector<double>> ends(static_cast<std::size_t>(p));
  std::vector<std::vector<sg4::SemaphorePtr>> events(static_cast<std::size_t>(p));
  long messages = 0;
  for (int r = 0; r < p; ++r) {
    const RankProgram& prog = schedule.ranks()[static_cast<std::size_t>(r)];
    for (int e = 0; e < prog.events; ++e) events[static_cast<std::size_t>(r)].push_back(sg4::Semaphore::create(0));
    sg4::Host* host = hosts[static_cast<std::size_t>(r)];
    for (std::size_t s = 0; s < std::max<std::size_t>(prog.streams.size(), 1); ++s) {
      static const std::vector<ScheduleOp> kEmpty;
      const auto& ops = s < prog.streams.size() ? prog.streams[s] : kEmpty;
      sg4::Actor::create(fmt::format("rank-{}-stream-{}", r, s), host,
                         StreamActor(ops, pf, r, static_cast<int>(s), steps, events[static_cast<std::size_t>(r)],
                                     s == 0 ? &ends[static_cast<std::size_t>(r)] : nullptr, &messages));
    }
  }
  engine.run();
  nlohmann::json out = {{"simulated_s", sg4::Engine::get_clock()},
                        {"messages", messages},
                        {"options", std::vector<std::string>(std::begin(kModelOptions), std::end(kModelOptions))}};
  nlohmann::json rank_steps = nlohmann::json::array();
  for (int r = 0; r < p; ++r) {
    const auto& e = ends[static_cast<std::size_t>(r)];
    if (static_cast<int>(e.size()) != steps) {
      throw Error(
          fmt::format("simulation: rank {} finished {} of {} steps (the schedule deadlocks)", r, e.size(), steps));
    }
    rank_steps.push_back(steps == 1 ? e.back() : (e.back() - e.front()) / (steps - 1));
  }
  out["rank_step_s"] = rank_steps;
  return out;
}

}  // namespace
}  // namespace dpbench

// The plugin's entry point (sim/simulate.cpp looks it up by this name): plays `steps` repetitions
// of *schedule on *platform and writes the result (or {"error": ...}) as JSON into *out.
// Returns 0 on success.
extern "C" int dpbench_simgrid_run(const dpbench::StepSchedule* schedule, const dpbench::SimPlatform* platform,
                                   int steps, std::string* out) {
  try {
    nlohmann::json result = dpbench::run_simulation(*schedule, *platform, steps);
    result["engine"] = fmt::format("SimGrid {}.{}", SIMGRID_VERSION_MAJOR, SIMGRID_VERSION_MINOR);
    *out = result.dump();
    return 0;
  } catch (const std::exception& e) {
    *out = nlohmann::json{{"error", e.what()}}.dump();
    return 1;
  }
}
