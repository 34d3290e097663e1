// A simulated cluster described as a datasheet does (sim/simulate.hpp's SimPlatform from options):
// nodes of --ranks-per-node ranks joined inside by --intra-link, each node's NIC at --node-link
// to one switch or, with --nodes-per-leaf M, to leaf switches whose uplinks carry
// M x node-link / --oversubscription each way; --node-link-of I=RATE overrides node I's NIC (a
// straggler, a fat server link); --topology names a datasheet node; --platform a SimGrid XML file
// instead. The platform sits beside the code that plays it, as in SimGrid's examples.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/simulate.hpp"

namespace dpbench {

// `dpbench project --simulate`'s topology options.
struct TopologyOptions {
  bool simulate = false;
  int ranks_per_node = 1;
  std::string node_link;                  // "" -> the projection's link bandwidth
  std::string intra_link = "2960gbit";    // NVLink 4: 370 GB/s ring busbw (the nvlink4 preset)
  bool intra_link_given = false;          // --intra-link was on the command line
  int nodes_per_leaf = 0;                 // 0: every node on one switch
  double oversubscription = 1.0;          // leaf uplink = nodes_per_leaf x node link / this
  std::vector<std::string> node_link_of;  // "I=RATE"
  std::string preset;                     // --topology: a datasheet node (topology_presets())
  bool what_if = false;                   // --what-if: non-blocking and straggler variants
  std::string platform_file;              // --platform: a SimGrid XML platform instead of the above
  std::string nccl_algo = "ring";         // --nccl-algo: DDP's all-reduce as NCCL's ring or tree
};

// A node as its datasheet describes it: ranks (GPUs) per node, each GPU's link inside the node and
// the node's NICs together, as rates in tc's units.
struct TopologyPreset {
  std::string name;
  int ranks_per_node;
  std::string intra_link;
  std::string node_link;
  std::string source;
};
const std::vector<TopologyPreset>& topology_presets();
// The datasheet a preset stands for; null for "" or an unknown name.
nlohmann::json topology_preset_source(const std::string& name);

// Applies --topology's preset to the options the user left unset (ranks per node, --intra-link,
// --node-link). Throws InputError naming an unknown preset, --topology or --what-if without
// --simulate, and --platform beside --topology, --what-if or any option that describes a
// topology (`described_set`).
void apply_topology_preset(TopologyOptions& o, bool ranks_per_node_set, bool intra_link_set, bool node_link_set,
                           bool described_set = false);

// --node-link-of's node indices against the nodes of the largest projection (max_ranks ranks,
// o.ranks_per_node per node), as the emulated cluster's --link-of checks its own: InputError
// naming the first index outside them.
void check_node_link_of(const TopologyOptions& o, int max_ranks);

// The platform of `world_size` ranks: each node's NIC at --node-link, else `nic_bytes_per_s` (the
// projection's link), each way; the NICs' and leaf uplinks' latency `nic_latency_s`. A rate given
// as text (--node-link, --node-link-of) is a line rate, of which a transfer gets `requested_share`
// (1: all of it; an emulated cluster's measured TCP share, about 0.956). Throws InputError naming
// the option at fault.
SimPlatform topology_platform(const TopologyOptions& o, double nic_bytes_per_s, double nic_latency_s, int world_size,
                              double requested_share = 1.0);

}  // namespace dpbench
