#include "sim/topology.hpp"

#include <algorithm>
#include <regex>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/rate.hpp"

namespace dpbench {

namespace {
constexpr double kMaxSimulatedBits = 100e12;  // 100 Tbit/s: beyond any NIC or NVLink

double bytes_per_s(const std::string& text, const std::string& option) {
  return parse_rate(text, option, kMaxSimulatedBits).bits_per_s / 8.0;
}
}  // namespace

const std::vector<TopologyPreset>& topology_presets() {
  static const std::vector<TopologyPreset> presets = {
      {"dgx-h100", 8, "2960gbit", "3200gbit",
       "NVIDIA DGX H100 datasheet: 8 H100 SXM5 on NVLink 4 (900 GB/s bidirectional per GPU; here 370 GB/s, "
       "the nvlink4 link preset's ring busbw), 8 single-port ConnectX-7 at 400 Gb/s for the compute fabric"},
      {"h100-8gpu-400g", 8, "2960gbit", "400gbit",
       "8 H100 SXM5 on NVLink 4 as dgx-h100, sharing one 400 Gb/s NIC (ConnectX-7 NDR) per node"},
      {"a100-pcie-8gpu-100g", 8, "200gbit", "100gbit",
       "8 A100 PCIe on PCIe 4.0 x16 (32 GB/s each way by the PCIe 4.0 spec; here 25 GB/s achievable, the pcie4 link "
       "preset), one 100 Gb/s NIC per node"},
  };
  return presets;
}

nlohmann::json topology_preset_source(const std::string& name) {
  for (const auto& t : topology_presets()) {
    if (t.name == name) return t.source;
  }
  return nullptr;
}

namespace {
// --topology, --what-if and --platform need --simulate; --platform stands alone.
void check_topology_combination(const TopologyOptions& o, bool described_set) {
  std::string option;
  if (!o.platform_file.empty()) {
    option = "--platform " + o.platform_file;
  } else if (!o.preset.empty()) {
    option = "--topology " + o.preset;
  } else if (o.what_if) {
    option = "--what-if";
  } else if (o.nccl_algo != "ring") {
    option = "--nccl-algo " + o.nccl_algo;
  }
  if (!o.simulate && !option.empty()) throw InputError(fmt::format("{}: needs --simulate", option));
  if (!o.platform_file.empty() && (!o.preset.empty() || o.what_if || described_set)) {
    throw InputError(fmt::format("{}: the file describes the whole platform; drop --topology, --what-if, "
                                 "--ranks-per-node, --node-link, --intra-link, --nodes-per-leaf, --oversubscription "
                                 "and --node-link-of",
                                 option));
  }
}
}  // namespace

void apply_topology_preset(TopologyOptions& o, bool ranks_per_node_set, bool intra_link_set, bool node_link_set,
                           bool described_set) {
  check_topology_combination(o, described_set);
  if (o.preset.empty()) return;
  const auto& all = topology_presets();
  const auto it = std::find_if(all.begin(), all.end(), [&](const TopologyPreset& t) { return t.name == o.preset; });
  if (it == all.end()) {
    std::string names;
    for (const auto& t : all) names += (names.empty() ? "" : ", ") + t.name;
    throw InputError(fmt::format("--topology {}: unknown preset (known: {})", o.preset, names));
  }
  if (!ranks_per_node_set) o.ranks_per_node = it->ranks_per_node;
  if (!intra_link_set) o.intra_link = it->intra_link;
  if (!node_link_set) o.node_link = it->node_link;
}

void check_node_link_of(const TopologyOptions& o, int max_ranks) {
  if (!o.simulate || !o.platform_file.empty() || o.ranks_per_node < 1) return;
  const long nodes = (max_ranks + o.ranks_per_node - 1) / o.ranks_per_node;
  static const std::regex kIndex(R"(^(\d+)=.*$)");
  for (const auto& text : o.node_link_of) {
    std::smatch m;
    if (!std::regex_match(text, m, kIndex)) continue;  // topology_platform names the bad form
    if (m[1].str().size() > 9 || std::stol(m[1].str()) >= nodes) {
      throw InputError(fmt::format("--node-link-of {}: node {} is outside the projection's nodes 0..{} ({} ranks, {} "
                                   "per node)",
                                   text, m[1].str(), nodes - 1, max_ranks, o.ranks_per_node));
    }
  }
}

SimPlatform topology_platform(const TopologyOptions& o, double nic_bytes_per_s, double nic_latency_s, int world_size,
                              double requested_share) {
  if (!o.platform_file.empty()) {
    SimPlatform pf;
    pf.platform_file = o.platform_file;
    return pf;
  }
  if (o.ranks_per_node < 1) throw InputError(fmt::format("--ranks-per-node {}: must be at least 1", o.ranks_per_node));
  if (o.nodes_per_leaf < 0) throw InputError(fmt::format("--nodes-per-leaf {}: must be >= 0", o.nodes_per_leaf));
  if (!(o.oversubscription >= 1.0)) {
    throw InputError(fmt::format("--oversubscription {}: must be at least 1", o.oversubscription));
  }
  if (!(requested_share > 0 && requested_share <= 1)) {
    throw Error(fmt::format("topology_platform: a requested rate's share {} is not in (0, 1]", requested_share));
  }
  const double nic = o.node_link.empty() ? nic_bytes_per_s : requested_share * bytes_per_s(o.node_link, "--node-link");
  const int nodes = (world_size + o.ranks_per_node - 1) / o.ranks_per_node;
  SimPlatform pf;
  pf.nodes.assign(static_cast<std::size_t>(nodes), SimNode{nic, nic, nic_latency_s});
  static const std::regex kOverride(R"(^(\d+)=(.+)$)");
  for (const auto& text : o.node_link_of) {
    std::smatch m;
    if (!std::regex_match(text, m, kOverride)) {
      throw InputError(fmt::format("--node-link-of {}: expected I=RATE (node index, rate)", text));
    }
    const long node = std::stol(m[1].str());
    const double rate = requested_share * bytes_per_s(m[2].str(), "--node-link-of");
    if (node < nodes) pf.nodes[static_cast<std::size_t>(node)].up_bytes_per_s = rate;
    if (node < nodes) pf.nodes[static_cast<std::size_t>(node)].down_bytes_per_s = rate;
  }
  pf.ranks_per_node = o.ranks_per_node;
  pf.intra_bytes_per_s = bytes_per_s(o.intra_link, "--intra-link");
  pf.intra_latency_s = 1e-6;
  if (o.nodes_per_leaf > 0 && nodes > o.nodes_per_leaf) {
    pf.nodes_per_leaf = o.nodes_per_leaf;
    pf.leaf_up_bytes_per_s = o.nodes_per_leaf * nic / o.oversubscription;
    pf.leaf_latency_s = nic_latency_s;
  }
  return pf;
}

}  // namespace dpbench
