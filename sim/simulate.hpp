// Plays a step schedule (core/schedule.hpp) on a SimGrid platform: every rank is a host, every
// stream of a rank an S4U actor that sleeps for its compute, sends with Mailbox::put_async and
// receives with get_async; SimGrid's flow model shares each link between the transfers crossing
// it (max-min fairness). dpbench writes no network model of its own: the engine runs with
// network/model:CM02, network/crosstraffic:0 and network/TCP-gamma:1e30, so that a lone transfer
// costs exactly its route's latency + bytes / bandwidth, and every correction (an engine slower
// than the link) is dpbench's own and recorded. The SimGrid side is a plugin
// (sim/simgrid/player.cpp, libdpbench_simgrid.so) loaded in a child process, because libsimgrid
// also defines the MPI API. Built only where SimGrid was found (DPBENCH_HAVE_SIMGRID); elsewhere
// simulate() says that simulation is unavailable.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schedule.hpp"

namespace dpbench {

// One node's network interface: its link to the switch (or to its leaf switch), per direction.
struct SimNode {
  double up_bytes_per_s = 0;    // egress: from the node towards the switch
  double down_bytes_per_s = 0;  // ingress
  double latency_s = 0;         // one way, node to switch
};

// Where the ranks run and what joins them: nodes of ranks_per_node ranks (rank r on node
// r / ranks_per_node), the ranks of one node joined by an intra-node link each (the node's
// shared memory or NVLink), the nodes by their links to one switch, or, with nodes_per_leaf > 0,
// to leaf switches whose uplinks (leaf_up_bytes_per_s each way) meet at a spine: a two-level
// tree, oversubscribed when an uplink carries less than its nodes' links together.
struct SimPlatform {
  std::vector<SimNode> nodes;
  int ranks_per_node = 1;
  double intra_bytes_per_s = 0;  // each rank's link to its node (both directions)
  double intra_latency_s = 0;
  int nodes_per_leaf = 0;  // 0: one switch
  double leaf_up_bytes_per_s = 0;
  double leaf_latency_s = 0;
  // The engine's calibration (train/engine_probe.hpp), for messages between nodes: a message of
  // collective k moves at most engine_efficiency[k] x the lower of its two nodes' link rates
  // (indexed by CollectiveKind; empty or 0: no cap, the link's rate).
  std::vector<double> engine_efficiency;
  // The engine's and the host's cost per message, for messages between nodes: a message of
  // collective k leaves its sender engine_overhead_s[k] seconds after the send starts, the
  // sender's stream busy meanwhile (SMPI's per-message send overhead, one constant; indexed by
  // CollectiveKind; empty or 0: none). Calibrated for p2p, whose small pairwise exchanges cost
  // their host more than their bytes.
  std::vector<double> engine_overhead_s;
  // Beside it, the cost per byte of such a message (SMPI's os/or slope): it leaves
  // engine_overhead_s[k] + engine_overhead_per_byte_s[k] x its bytes after the send starts (empty
  // or 0: none). Calibrated for a sparse run's per-message collectives, probed at two sizes.
  std::vector<double> engine_overhead_per_byte_s;
  // TCP's send buffer: of a message between nodes, the sender waits only until all but its last
  // send_buffer_bytes have left (the kernel sends those on its own); 0: until the receiver has all.
  double send_buffer_bytes = 0;
  // A SimGrid platform file (XML, SimGrid's DTD 4.1) instead of the fields above: rank r runs on
  // its r-th host in natural name order (node-2 before node-10); the engine runs uncapped and
  // sends wait for their receivers (no engine_efficiency, no send buffer). "": build from fields.
  std::string platform_file;

  // Throws InputError when the platform cannot hold `world_size` ranks or a rate is not positive
  // (with a platform file: when it cannot be read; its host count is checked when it is loaded).
  void check(int world_size) const;
  nlohmann::json to_json() const;
};

// TCP's send buffer on the emulated cluster's links (cluster/link.cpp), as SimPlatform's
// send_buffer_bytes: Linux grows it to about twice the bytes in flight, which tbf's 50 ms queue
// makes 50 ms of the link, so 0.1 s of the slowest node's upload rate, at most tcp_wmem's 4 MiB.
// 0 for a platform without nodes.
inline double emulated_tcp_send_buffer_bytes(const SimPlatform& pf) {
  constexpr double kMaxSendBufferBytes = 4 * 1024 * 1024;  // Linux's tcp_wmem maximum
  constexpr double kSendBufferSeconds = 0.1;
  if (pf.nodes.empty()) return 0.0;
  const auto slowest = std::min_element(pf.nodes.begin(), pf.nodes.end(), [](const SimNode& a, const SimNode& b) {
    return a.up_bytes_per_s < b.up_bytes_per_s;
  });
  return std::min(kMaxSendBufferBytes, kSendBufferSeconds * slowest->up_bytes_per_s);
}

struct SimulationResult {
  double step_s = 0;                // rank 0's step time in the steady state, seconds
  std::vector<double> rank_step_s;  // every rank's, the same way
  double simulated_s = 0;           // simulated clock at the end
  double wall_s = 0;                // host seconds the simulation took
  long messages = 0;                // messages played
  nlohmann::json config;            // the engine's model options
};

// True when this build has SimGrid and its plugin is in place.
bool simulation_available();

// A folded schedule (core/schedule.hpp) is played on a platform of its kept ranks only.
// Plays `steps` >= 1 consecutive repetitions of `schedule` on `platform` and returns the steady
// step time: (end of the last step - end of the first) / (steps - 1), per rank; with one step,
// its end (every rank starting together at 0, which a schedule without overlap across steps
// gives anyway). Runs SimGrid in
// a child process (SimGrid's engine is one per process), so it may be called any number of times.
// Throws Error when simulation is unavailable, the schedule's messages do not match, or the
// simulation fails (deadlock included); InputError on a bad platform.
SimulationResult simulate(const StepSchedule& schedule, const SimPlatform& platform, int steps = 3);

// The engine's calibration for one collective (train/engine_probe.hpp): the share e in
// [0.01, 1] of the link at which the messages of `kind` in `schedule` must move between nodes for
// the schedule's simulated time, to the last rank's end, to equal `measured_s` (the platform's
// efficiencies for other kinds as they are). e = 1 when the link's rate alone already takes measured_s or longer (the engine is
// not the bottleneck). Found by false position between 1 and 0.01 on 1 / e (t(e) never grows
// with e), to 0.5 % of measured_s, at most 18 simulations. Throws what simulate() throws.
struct EfficiencyFit {
  double efficiency = 1;
  double overhead_s = 0;  // fit_engine_overhead's answer
  double at_link_s = 0;   // simulated at the link's rate
  double fitted_s = 0;    // simulated at `efficiency`
  int simulations = 0;
};
EfficiencyFit fit_engine_efficiency(const StepSchedule& schedule, const SimPlatform& platform, CollectiveKind kind,
                                    double measured_s);
// The engine's per-message overhead for `kind` instead (engine_overhead_s, the link's rate kept):
// o >= 0 such that the schedule's simulated time to the last rank's end equals `measured_s`; 0
// when the link alone takes measured_s or longer. t(o) grows with o: secant steps from o = 0, to
// 0.5 % of measured_s, at most 12 simulations. Throws what simulate() throws.
EfficiencyFit fit_engine_overhead(const StepSchedule& schedule, const SimPlatform& platform, CollectiveKind kind,
                                  double measured_s);

// The engine's cost of a send `op` between nodes on `pf`: engine_overhead_s of its collective plus
// engine_overhead_per_byte_s times its bytes (0 where neither is set).
inline double message_overhead(const SimPlatform& pf, const ScheduleOp& op) {
  const auto k = static_cast<std::size_t>(op.collective);
  const double fixed = k < pf.engine_overhead_s.size() ? pf.engine_overhead_s[k] : 0.0;
  const double per_byte = k < pf.engine_overhead_per_byte_s.size() ? pf.engine_overhead_per_byte_s[k] : 0.0;
  return fixed + per_byte * op.bytes();
}
// The same for the cost per byte of `kind`'s messages (engine_overhead_per_byte_s, in overhead_s:
// seconds per byte), the constant overhead set so that a message of `kept_bytes` keeps costing
// `kept_s` (at least 0): SMPI's os/or, a line through a smaller probe's fit.
EfficiencyFit fit_engine_overhead_per_byte(const StepSchedule& schedule, const SimPlatform& platform,
                                           CollectiveKind kind, double measured_s, double kept_s, double kept_bytes);

}  // namespace dpbench
