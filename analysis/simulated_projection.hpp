// `dpbench project --simulate`: each curve's point as its strategy's step schedule played by
// SimGrid (sim/simulate.hpp) on a described topology, beside the alpha-beta value. The topology:
// nodes of --ranks-per-node ranks joined inside by --intra-link, each node's NIC at --node-link
// to one switch or, with --nodes-per-leaf M, to leaf switches whose uplinks carry
// M x node-link / --oversubscription each way; --node-link-of I=RATE overrides node I's NIC (a
// straggler, a fat server link). Compute per rank comes from the projection's calibration: the
// per-sample time (one third forward, two thirds backward, the usual FLOP split) and the
// optimizer (sharded_ps: each server its 1/p of it).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/simulate.hpp"
#include "sim/topology.hpp"
#include "train/alpha_beta_model.hpp"
#include "train/strategy.hpp"

namespace dpbench {

// The straggler of --what-if: the last node's NIC at this share of its rate.
inline constexpr double kWhatIfStragglerShare = 0.5;
// A NIC whose bytes need this share of the simulated step or more is saturated (the findings'
// threshold).
inline constexpr double kNicSaturated = 0.9;

// What one projected point may play message by message: a whole schedule of more messages is not
// built (each costs about 50 bytes held and ~70 ns on the critical path), and a schedule whose
// links are shared goes to SimGrid only up to kMaxSimGridMessages (about 5 us each there on a
// 2-core machine). A point beyond either is "unavailable", with the count.
inline constexpr double kMaxPlayedMessages = 80e6;
inline constexpr double kMaxSimGridMessages = 8e6;
// NCCL's tree all-reduce (--nccl-algo tree) is played message by message on SimGrid, every rank's
// four pipelines at once over shared NICs, whose time grows about as p^2 (GPT-2 on dgx-h100 nodes,
// 2 cores: 3.5 s at 512 ranks, 9.5 s at 1,024, 36.8 s at 2,048): no point beyond this many ranks.
inline constexpr int kMaxTreeRanks = 2048;

// The simulated steps of a projection's whole (unfolded) points, by (mode, transport, world size,
// per-rank batch), or why a point could not be played: extrapolating a larger point in nodes
// (sim/extrapolate.hpp) reuses the smaller points already simulated, and does not try again what
// was beyond the budgets. One per projection (its model, link and platform fixed); safe to share
// between threads.
class SimulationMemo {
 public:
  using Key = std::tuple<int, int, int, double>;
  // The step in seconds, or the reason it is unavailable; nullopt when not yet simulated.
  std::optional<std::variant<double, std::string>> find(const Key& key) const;
  void put(const Key& key, std::variant<double, std::string> step);

 private:
  mutable std::mutex mutex_;
  std::map<Key, std::variant<double, std::string>> steps_;
};

// The simulated step of `strategy` (with config's transport) at world size p, every rank
// computing per_rank_batch samples, over `platform`; engine "gloo" when the link's collectives
// are gloo's, else the ring engine ("local"). Returns {"simulated_step_s", "wall_s", "messages",
// "engine", "node0_nic_time_fraction"} (node 0's NIC: the time its link needs for the step's
// bytes out, then in, over the simulated step; node 0 holds ps's root) or {"unavailable": why}.
// How: folded onto two nodes' ranks where the schedule is rotation-symmetric; else, on 32 nodes
// or more alike on one switch, extrapolated in nodes where the step grows affinely (with
// "extrapolated_from_ranks"); else whole. Each played by sim/critical_path.hpp where no link
// carries two transfers at once, else by SimGrid ("engine" says which), within the budgets above.
// `memo` (may be null)
// lends and keeps whole points' figures.
// With `what_if`, also "non_blocking_step_s" (the tree's uplinks at their nodes' full rate, when
// oversubscribed) and "straggler_step_s" (the last node's NIC at kWhatIfStragglerShare, with 2
// nodes or more).
nlohmann::json simulate_point(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                              const LinkModel& link, const SimPlatform& platform, int p, double per_rank_batch,
                              bool what_if = false, SimulationMemo* memo = nullptr);

// What the simulated points say, as sentences with their figures: where ps's root NIC
// saturates (its bytes need >= kNicSaturated of the step), and with --what-if where the oversubscribed
// tree orders the modes differently from a non-blocking one and what one straggler costs each
// mode at the largest world size. `points` and `curves` as `dpbench project` writes them.
nlohmann::json simulation_findings(const nlohmann::json& points, const nlohmann::json& curves,
                                   const TopologyOptions& o);

}  // namespace dpbench
