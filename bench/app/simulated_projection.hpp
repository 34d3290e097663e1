// `dpbench project --simulate`: each curve's point as its strategy's step schedule played by
// SimGrid (sim/simulate.hpp) on a described topology, beside the alpha-beta value. The topology:
// nodes of --ranks-per-node ranks joined inside by --intra-link, each node's NIC at --node-link
// to one switch or, with --nodes-per-leaf M, to leaf switches whose uplinks carry
// M x node-link / --oversubscription each way; --node-link-of I=RATE overrides node I's NIC (a
// straggler, a fat server link). Compute per rank comes from the projection's calibration: the
// per-sample time (one third forward, two thirds backward, the usual FLOP split) and the
// optimizer (sharded_ps: each server its 1/p of it).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "sim/simulate.hpp"
#include "train/alpha_beta_model.hpp"
#include "train/strategy.hpp"

namespace dpbench {

struct TopologyOptions {
  bool simulate = false;
  int ranks_per_node = 1;
  std::string node_link;                  // "" -> the projection's link bandwidth
  std::string intra_link = "2960gbit";    // NVLink 4: 370 GB/s ring busbw (the nvlink4 preset)
  int nodes_per_leaf = 0;                 // 0: every node on one switch
  double oversubscription = 1.0;          // leaf uplink = nodes_per_leaf x node link / this
  std::vector<std::string> node_link_of;  // "I=RATE"
};

void add_topology_options(CLI::App& app, TopologyOptions& options);

// The platform of `world_size` ranks. Throws InputError naming the option at fault.
SimPlatform topology_platform(const TopologyOptions& o, const LinkModel& link, int world_size);

// The simulated step of `strategy` (with config's transport) at world size p, every rank
// computing per_rank_batch samples, over `platform`; engine "gloo" when the link's collectives
// are gloo's, else the ring engine ("local"). Returns {"simulated_step_s", "wall_s", "messages"}
// or {"unavailable": why}.
nlohmann::json simulate_point(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                              const LinkModel& link, const SimPlatform& platform, int p, double per_rank_batch);

}  // namespace dpbench
