#include "bench/app/simulated_projection.hpp"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "cluster/link.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace {
constexpr double kMaxSimulatedBits = 100e12;  // 100 Tbit/s: beyond any NIC or NVLink

double bytes_per_s(const std::string& text, const std::string& option) {
  return cluster::parse_rate(text, option, kMaxSimulatedBits).bits_per_s / 8.0;
}

// DDP's buckets over a flat gradient of n floats, as the projection knows no tensor shapes: the
// first 1 MiB of the last parameters, then bucket_cap_mb at a time towards the first.
std::vector<ScheduleBucket> flat_buckets(std::size_t n, const TrainConfig& c) {
  std::vector<ScheduleBucket> buckets;
  std::size_t end = n;
  double cap = c.first_bucket_mb;
  while (end > 0) {
    const auto size = std::min(end, std::max<std::size_t>(1, static_cast<std::size_t>(cap * 1024 * 1024 / 4)));
    buckets.push_back({end - size, size});
    end -= size;
    cap = c.bucket_cap_mb;
  }
  return buckets;
}
}  // namespace

void add_topology_options(CLI::App& app, TopologyOptions& o) {
  app.add_flag("--simulate", o.simulate,
               "Also simulate every point: each mode's step schedule played by SimGrid on the topology below");
  app.add_option("--ranks-per-node", o.ranks_per_node, "--simulate: ranks (GPUs) per node")->capture_default_str();
  app.add_option("--node-link", o.node_link,
                 "--simulate: each node's NIC, each way, in tc's units (400gbit); default: the projection's link");
  app.add_option("--intra-link", o.intra_link, "--simulate: each rank's link inside its node (default: NVLink 4, "
                 "370 GB/s)")->capture_default_str();
  app.add_option("--nodes-per-leaf", o.nodes_per_leaf,
                 "--simulate: nodes per leaf switch of a two-level tree (0: one switch)")->capture_default_str();
  app.add_option("--oversubscription", o.oversubscription,
                 "--simulate: a leaf's nodes' bandwidth over its uplink's (1: non-blocking)")->capture_default_str();
  app.add_option("--node-link-of", o.node_link_of, "--simulate: I=RATE, node I's NIC (a straggler, a fat server)");
}

SimPlatform topology_platform(const TopologyOptions& o, const LinkModel& link, int world_size) {
  if (o.ranks_per_node < 1) throw InputError(fmt::format("--ranks-per-node {}: must be at least 1", o.ranks_per_node));
  if (o.nodes_per_leaf < 0) throw InputError(fmt::format("--nodes-per-leaf {}: must be >= 0", o.nodes_per_leaf));
  if (!(o.oversubscription >= 1.0)) {
    throw InputError(fmt::format("--oversubscription {}: must be at least 1", o.oversubscription));
  }
  const double nic = o.node_link.empty() ? 1.0 / link.beta_s_per_byte : bytes_per_s(o.node_link, "--node-link");
  const int nodes = (world_size + o.ranks_per_node - 1) / o.ranks_per_node;
  SimPlatform pf;
  pf.nodes.assign(static_cast<std::size_t>(nodes), SimNode{nic, nic, link.alpha_s / 2.0});
  static const std::regex kOverride(R"(^(\d+)=(.+)$)");
  for (const auto& text : o.node_link_of) {
    std::smatch m;
    if (!std::regex_match(text, m, kOverride)) {
      throw InputError(fmt::format("--node-link-of {}: expected I=RATE (node index, rate)", text));
    }
    const long node = std::stol(m[1].str());
    const double rate = bytes_per_s(m[2].str(), "--node-link-of");
    if (node < nodes) pf.nodes[static_cast<std::size_t>(node)].up_bytes_per_s = rate;
    if (node < nodes) pf.nodes[static_cast<std::size_t>(node)].down_bytes_per_s = rate;
  }
  pf.ranks_per_node = o.ranks_per_node;
  pf.intra_bytes_per_s = bytes_per_s(o.intra_link, "--intra-link");
  pf.intra_latency_s = 1e-6;
  if (o.nodes_per_leaf > 0 && nodes > o.nodes_per_leaf) {
    pf.nodes_per_leaf = o.nodes_per_leaf;
    pf.leaf_up_bytes_per_s = o.nodes_per_leaf * nic / o.oversubscription;
    pf.leaf_latency_s = link.alpha_s / 2.0;
  }
  return pf;
}

nlohmann::json simulate_point(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                              const LinkModel& link, const SimPlatform& platform, int p, double per_rank_batch) {
  if (strategy.schedule == nullptr) return {{"unavailable", "the strategy has no schedule"}};
  if (!simulation_available()) return {{"unavailable", "this dpbench was built without SimGrid"}};
  ScheduleInputs in;
  in.config = config;
  in.config.world_size = p;
  in.config.global_batch = static_cast<std::size_t>(std::llround(per_rank_batch * p));
  in.engine = link.collectives == "gloo" ? "gloo" : "local";
  in.num_params = static_cast<std::size_t>(model.param_bytes / 4.0);
  in.buckets = flat_buckets(in.num_params, in.config);
  in.input_floats = static_cast<std::size_t>(model.sample_bytes / 4.0);
  in.classes = static_cast<std::size_t>(model.logit_bytes / 4.0);
  const double compute = per_rank_batch * model.per_sample_compute_s;
  const double optimizer = strategy.name == "sharded_ps" ? model.optimizer_s / p : model.optimizer_s;
  in.compute.assign(static_cast<std::size_t>(p), RankCompute{0.0, compute / 3.0, 2.0 * compute / 3.0, optimizer});
  StepSchedule schedule(p);
  strategy.schedule(in, schedule);
  try {
    const SimulationResult r = simulate(schedule, platform, 1);
    return {{"simulated_step_s", r.step_s}, {"wall_s", r.wall_s}, {"messages", r.messages}};
  } catch (const Error& e) {
    return {{"unavailable", e.what()}};
  }
}

}  // namespace dpbench
