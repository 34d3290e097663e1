#include "analysis/simulated_projection.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "sim/critical_path.hpp"
#include "sim/extrapolate.hpp"
#include "train/models.hpp"
#include "workloads/replay_model.hpp"

namespace dpbench {

namespace {
// DDP's buckets over a flat gradient of n floats, for a calibration run that recorded none (older
// result files): the first 1 MiB of the last parameters, then bucket_cap_mb at a time towards
// the first.
std::vector<ScheduleBucket> flat_buckets(std::size_t n, const TrainConfig& config) {
  std::vector<ScheduleBucket> buckets;
  std::size_t end = n;
  double cap = config.allreduce.first_bucket_mb;
  while (end > 0) {
    const auto size = std::min(end, std::max<std::size_t>(1, static_cast<std::size_t>(cap * 1024 * 1024 / 4)));
    buckets.push_back({end - size, size, {}});
    end -= size;
    cap = config.allreduce.bucket_cap_mb;
  }
  return buckets;
}
// Node 0's NIC bytes {out, in} per step.
std::pair<double, double> node0_bytes(const StepSchedule& schedule, const SimPlatform& pf, int p) {
  std::vector<int> placement(static_cast<std::size_t>(p));
  for (int r = 0; r < p; ++r) placement[static_cast<std::size_t>(r)] = r / pf.ranks_per_node;
  const int nodes = (p + pf.ranks_per_node - 1) / pf.ranks_per_node;
  return schedule.node_link_bytes(placement, nodes).front();
}

// Node 0's NIC: the time its link needs for the step's bytes out and then in, each at its rate,
// over `step_s`. (ps's root gathers, then broadcasts: one direction after the other, so a NIC
// that bounds the step needs about the whole step. Modes that send and receive at once can exceed 1.)
double nic_time_fraction(const StepSchedule& schedule, const SimPlatform& pf, int p, double step_s) {
  const int nodes = (p + pf.ranks_per_node - 1) / pf.ranks_per_node;
  if (nodes < 2 || !(step_s > 0) || pf.nodes.empty()) return 0.0;
  const auto [out, in] = node0_bytes(schedule, pf, p);
  const SimNode& nic = pf.nodes.front();
  return (out / nic.up_bytes_per_s + in / nic.down_bytes_per_s) / step_s;
}
// True when the platform is built (no file) with one switch and every node's NIC alike: the
// premise of folding and of extrapolating in nodes.
bool alike_on_one_switch(const SimPlatform& pf) {
  if (!pf.platform_file.empty() || pf.ranks_per_node < 1 || pf.nodes.empty()) return false;
  if (pf.nodes_per_leaf > 0 && pf.nodes_per_leaf < static_cast<int>(pf.nodes.size())) return false;
  const SimNode& first = pf.nodes.front();
  return std::all_of(pf.nodes.begin(), pf.nodes.end(), [&first](const SimNode& n) {
    return n.up_bytes_per_s == first.up_bytes_per_s && n.down_bytes_per_s == first.down_bytes_per_s &&
           n.latency_s == first.latency_s;
  });
}
// How many ranks the simulation of p ranks can be folded onto (StepSchedule's folding): two
// nodes' ranks, where every node is alike (one switch, the same NIC) and the strategy's
// schedule is: the same inputs at 2 x that many ranks, built whole, are rotation-symmetric by
// it. 0: play every rank.
int fold_width(const Strategy& strategy, const ScheduleInputs& in, const SimPlatform& pf, int p) {
  const int rpn = pf.ranks_per_node;
  const int fold = 2 * rpn;
  if (!alike_on_one_switch(pf) || p % fold != 0 || p <= fold) return 0;
  ScheduleInputs small = in;
  small.config.world_size = 2 * fold;
  small.config.global_batch = in.config.global_batch / static_cast<std::size_t>(p / (2 * fold));
  small.compute.resize(static_cast<std::size_t>(2 * fold), in.compute.front());
  StepSchedule whole(2 * fold);
  strategy.schedule(small, whole);
  return whole.is_rotation_symmetric(fold) ? fold : 0;
}

}  // namespace

namespace {
// Why a projected point of `strategy` under `config` cannot be simulated; "" when it can.
std::string unsimulated(const Strategy& strategy, const TrainConfig& config, const StepModel& model) {
  if (strategy.schedule == nullptr) return "the strategy has no schedule";
  if (strategy.unsimulated != nullptr) {
    if (std::string why = strategy.unsimulated(config); !why.empty()) return why;
  }
  if (!simulation_available()) return "this dpbench was built without SimGrid";
  if (config.allreduce.comm_hook.powersgd_rank > 0 && model.described_model.empty()) {
    return "PowerSGD's messages follow the tensor shapes, which a projection does not know";
  }
  if (config.model.dlrm.sparse_grad) {
    return "--sparse-grad: the rows a step exchanges follow the data, measured at the run's world size only; the "
           "projection does not model them at others";
  }
  return "";
}
}  // namespace

std::optional<std::variant<double, std::string>> SimulationMemo::find(const Key& key) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = steps_.find(key);
  if (it == steps_.end()) return std::nullopt;
  return it->second;
}

void SimulationMemo::put(const Key& key, std::variant<double, std::string> step) {
  const std::lock_guard<std::mutex> lock(mutex_);
  steps_[key] = std::move(step);
}

namespace {
// The schedule on the platform: the critical path where no link is shared, else SimGrid within
// kMaxSimGridMessages (Error past it).
SimulationResult play(const StepSchedule& schedule, const SimPlatform& platform) {
  return simulate_fast(schedule, platform, 1, kMaxSimGridMessages);
}

// The schedule's inputs for a projected point: p ranks of per_rank_batch samples each, on nodes of
// ranks_per_node ranks (for the tree all-reduce).
ScheduleInputs point_inputs(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                            const LinkModel& link, int p, double per_rank_batch, int ranks_per_node) {
  ScheduleInputs in;
  if (link.tree_allreduce) in.tree_ranks_per_node = std::clamp(ranks_per_node, 1, p);  // fewer: one node
  in.config = config;
  in.config.world_size = p;
  in.config.global_batch = static_cast<std::size_t>(std::llround(per_rank_batch * p));
  in.engine = family_engine(link.collectives);
  in.num_params = static_cast<std::size_t>(model.param_bytes / 4.0);
  if (strategy.schedule_buckets == nullptr) {
    // none to reduce
  } else if (model.described_model.empty() && !model.ddp_buckets.empty()) {
    for (const auto& [offset, size] : model.ddp_buckets) in.buckets.push_back({offset, size, {}});
  } else if (model.described_model.empty()) {
    in.buckets = flat_buckets(in.num_params, in.config);
  } else {
    in.buckets = strategy.schedule_buckets(ReplayModel(described_model(model.described_model), 1.0), in.config);
  }
  in.input_floats = static_cast<std::size_t>(model.sample_bytes / 4.0);
  in.classes = static_cast<std::size_t>(model.logit_bytes / 4.0);
  const double slowdown = model.compute_slowdown(p);
  const double compute = per_rank_batch * model.per_sample_compute_s * slowdown;
  const double optimizer = (strategy.shards_optimizer ? model.optimizer_s / p : model.optimizer_s) * slowdown;
  const double fwd = compute * model.forward_share;
  in.compute.assign(static_cast<std::size_t>(p), RankCompute{0.0, fwd, compute - fwd, optimizer});
  in.reduction = model.reduction;
  return in;
}

// The messages of the whole schedule at p ranks, estimated from the schedules at 2 and 4 nodes'
// ranks as a power of the rank count (a ring's grow as p^2, a root's as p), to refuse a point
// before building what could not be held.
double estimated_messages(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                          const LinkModel& link, int ranks_per_node, int p, double per_rank_batch) {
  const int small = 2 * std::max(1, ranks_per_node), large = 2 * small;
  if (p <= large) return 0;
  const auto messages_at = [&](int q) {
    StepSchedule schedule(q);
    strategy.schedule(point_inputs(strategy, config, model, link, q, per_rank_batch, ranks_per_node), schedule);
    return static_cast<double>(schedule.messages());
  };
  const double a = messages_at(small), b = messages_at(large);
  if (!(a > 0)) return b;
  return b * std::pow(static_cast<double>(p) / large, std::log2(b / a));
}

// Why the whole schedule at p ranks is beyond kMaxPlayedMessages; "" when it is not.
std::string over_budget(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                        const LinkModel& link, int ranks_per_node, int p, double per_rank_batch) {
  const double m = estimated_messages(strategy, config, model, link, ranks_per_node, p, per_rank_batch);
  if (m <= kMaxPlayedMessages) return "";
  return fmt::format("about {:.0f} million messages in the whole schedule of {} ranks: more than the {:.0f} million a "
                     "projected point may play",
                     m / 1e6, p, kMaxPlayedMessages / 1e6);
}

// Node 0's NIC bytes {out, in} per step at p ranks, from the programs of node 0's ranks alone.
std::pair<double, double> node0_bytes_at(const Strategy& strategy, const ScheduleInputs& in, const SimPlatform& pf,
                                         int p) {
  StepSchedule node0 = StepSchedule::only_ranks(p, std::min(p, pf.ranks_per_node));
  strategy.schedule(in, node0);
  return node0_bytes(node0, pf, p);
}

// The point at p ranks from smaller ones (sim/extrapolate.hpp): the step at n, 2n and 4n nodes,
// when it grows by the same amount per node over both doublings; null when it does not, or when
// the platform's nodes are not all alike on one switch (then the step is not affine). Node 0's
// NIC bytes are counted at p itself. Throws Error when a smaller point is beyond the budgets.
nlohmann::json extrapolated_point(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                                  const LinkModel& link, const SimPlatform& platform, int p, double per_rank_batch,
                                  SimulationMemo* memo) {
  const int rpn = platform.ranks_per_node;
  if (!alike_on_one_switch(platform) || p % rpn != 0) return nullptr;
  double wall = 0;
  long messages = 0;
  const auto step_at = [&](int n) {
    const int q = n * rpn;
    const SimulationMemo::Key key{static_cast<int>(strategy.mode), static_cast<int>(config.transport), q,
                                  per_rank_batch};
    if (auto known = memo != nullptr ? memo->find(key) : std::nullopt) {
      if (const auto* why = std::get_if<std::string>(&*known)) throw Error(fmt::format("at {} ranks: {}", q, *why));
      return std::vector<double>{std::get<double>(*known)};
    }
    const std::string over = over_budget(strategy, config, model, link, rpn, q, per_rank_batch);
    if (!over.empty()) {
      if (memo != nullptr) memo->put(key, over);
      throw Error(fmt::format("at {} ranks: {}", q, over));
    }
    StepSchedule schedule(q);
    strategy.schedule(point_inputs(strategy, config, model, link, q, per_rank_batch, rpn), schedule);
    schedule.shrink_to_fit();
    SimPlatform played = platform;
    played.nodes.resize(static_cast<std::size_t>(n));
    try {
      const SimulationResult r = play(schedule, played);
      wall += r.wall_s;
      messages += r.messages;
      if (memo != nullptr) memo->put(key, r.step_s);
      return std::vector<double>{r.step_s};
    } catch (const Error& e) {
      if (memo != nullptr) memo->put(key, std::string(e.what()));
      throw Error(fmt::format("at {} ranks: {}", q, e.what()));
    }
  };
  const auto x = extrapolate_in_nodes(p / rpn, step_at);
  if (!x) return nullptr;
  std::vector<int> from;
  for (int n : x->from_nodes) from.push_back(n * rpn);
  const SimNode& nic = platform.nodes.front();
  const double step = x->figures[0];
  const auto [out, in] = node0_bytes_at(strategy, point_inputs(strategy, config, model, link, p, per_rank_batch, rpn),
                                        platform, p);
  return {{"simulated_step_s", step},
          {"wall_s", wall},
          {"messages", messages},
          {"engine", "extrapolated in nodes from the simulations of extrapolated_from_ranks"},
          {"extrapolated_from_ranks", from},
          {"node0_nic_time_fraction", (out / nic.up_bytes_per_s + in / nic.down_bytes_per_s) / step}};
}

// --what-if's variants of a whole schedule: the tree's uplinks at their nodes' full rate (when
// oversubscribed) and the last node's NIC at kWhatIfStragglerShare (with 2 nodes or more).
void add_what_if(const StepSchedule& schedule, const SimPlatform& platform, nlohmann::json& out) {
  const int nodes = static_cast<int>(platform.nodes.size());
  if (platform.nodes_per_leaf > 0 && platform.nodes_per_leaf < nodes) {
    SimPlatform open = platform;
    double fastest = 0;
    for (const SimNode& n : platform.nodes) fastest = std::max(fastest, n.up_bytes_per_s);
    open.leaf_up_bytes_per_s = platform.nodes_per_leaf * fastest;
    if (open.leaf_up_bytes_per_s > platform.leaf_up_bytes_per_s)
      out["non_blocking_step_s"] = play(schedule, open).step_s;
  }
  if (nodes >= 2) {
    SimPlatform slow = platform;
    slow.nodes.back().up_bytes_per_s *= kWhatIfStragglerShare;
    slow.nodes.back().down_bytes_per_s *= kWhatIfStragglerShare;
    out["straggler_step_s"] = play(schedule, slow).step_s;
  }
}
}  // namespace

nlohmann::json simulate_point(const Strategy& strategy, const TrainConfig& config, const StepModel& model,
                              const LinkModel& link, const SimPlatform& platform, int p, double per_rank_batch,
                              bool what_if, SimulationMemo* memo) {
  if (const std::string why = unsimulated(strategy, config, model); !why.empty()) return {{"unavailable", why}};
  const ScheduleInputs in = point_inputs(strategy, config, model, link, p, per_rank_batch, platform.ranks_per_node);
  if (in.tree_ranks_per_node > 0 && strategy.mode == Mode::allreduce && p > kMaxTreeRanks) {
    return {{"unavailable", fmt::format("NCCL's tree at {} ranks: it is played message by message, its time growing "
                                        "about as p^2; not beyond {} ranks (kMaxTreeRanks)",
                                        p, kMaxTreeRanks)}};
  }
  const int fold = what_if ? 0 : fold_width(strategy, in, platform, p);
  if (fold == 0 && !what_if) {
    try {
      if (nlohmann::json x = extrapolated_point(strategy, config, model, link, platform, p, per_rank_batch, memo);
          !x.is_null())
        return x;
    } catch (const Error& e) {
      return {{"unavailable", e.what()}};
    }
  }
  const SimulationMemo::Key key{static_cast<int>(strategy.mode), static_cast<int>(config.transport), p, per_rank_batch};
  if (fold == 0) {
    const std::string over = over_budget(strategy, config, model, link, std::max(1, platform.ranks_per_node), p,
                                         per_rank_batch);
    if (memo != nullptr && !over.empty() && !what_if) memo->put(key, over);
    if (!over.empty()) return {{"unavailable", over + " (it neither folds onto two nodes nor extrapolates in nodes)"}};
  }
  StepSchedule schedule(p, fold);
  strategy.schedule(in, schedule);
  schedule.shrink_to_fit();
  try {
    schedule.settle_folded_messages();
    SimPlatform played = platform;
    if (fold > 0) played.nodes.resize(static_cast<std::size_t>(fold / platform.ranks_per_node));
    const SimulationResult r = play(schedule, played);
    nlohmann::json out = {
        {"simulated_step_s", r.step_s}, {"wall_s", r.wall_s}, {"messages", r.messages}, {"engine", r.config["engine"]}};
    if (fold > 0) out["folded_onto_ranks"] = fold;
    if (!platform.nodes.empty()) {
      out["node0_nic_time_fraction"] = nic_time_fraction(schedule, played, fold > 0 ? fold : p, r.step_s);
    }
    if (memo != nullptr && fold == 0 && !what_if) memo->put(key, r.step_s);
    if (what_if) add_what_if(schedule, platform, out);
    return out;
  } catch (const Error& e) {
    if (memo != nullptr && fold == 0 && !what_if) memo->put(key, std::string(e.what()));
    return {{"unavailable", e.what()}};
  }
}

namespace {
using Json = nlohmann::json;

std::string curve_label(const Json& curves, const std::string& key) {
  for (const auto& m : curves) {
    if (m.at("curve") == key) return m.value("label", key);
  }
  return key;
}

// The simulated figure `field` of a point, if it has one.
std::optional<double> sim_value(const Json& pt, const char* field) {
  if (!pt.contains("simulation") || !pt["simulation"].contains(field)) return std::nullopt;
  return pt["simulation"][field].get<double>();
}

// Where each ps curve's root NIC first carries kNicSaturated of the step.
void nic_findings(const Json& points, const Json& curves, Json& out) {
  for (const auto& m : curves) {
    if (!find_strategy(m.at("strategy").get<Mode>()).has_root) continue;
    const std::string key = m.at("curve");
    std::optional<int> from;
    double last = 0;
    int largest = 0;
    for (const auto& pt : points) {
      const auto busy = pt.at("curve") == key ? sim_value(pt, "node0_nic_time_fraction") : std::nullopt;
      if (!busy) continue;
      largest = pt.at("world_size").get<int>();
      last = *busy;
      if (!from && *busy >= kNicSaturated) from = largest;
    }
    if (largest == 0) continue;
    const std::string label = curve_label(curves, key);
    out.push_back({{"kind", "nic_saturation"},
                   {"curve", key},
                   {"world_size", from ? Json(*from) : Json()},
                   {"time_fraction_at_largest", last},
                   {"largest_world_size", largest},
                   {"text", from ? fmt::format("{}: the root's NIC (node 0) needs {:.0f} % of the simulated step or "
                                               "more for its bytes from {} ranks on ({:.0f} % at {})",
                                               label, 100 * kNicSaturated, *from, 100 * last, largest)
                                 : fmt::format("{}: the root's NIC (node 0) needs less than {:.0f} % of the "
                                               "simulated step for its bytes up to {} ranks ({:.0f} % there)",
                                               label, 100 * kNicSaturated, largest, 100 * last)}});
  }
}

// The first world size at which some pair of curves is ordered the other way round (each apart
// by more than 5 %) with non-blocking uplinks than with the oversubscribed ones.
void oversubscription_finding(const Json& points, const Json& curves, const TopologyOptions& o, Json& out) {
  std::map<int, std::vector<std::tuple<std::string, double, double>>> by_size;  // mode, oversubscribed, non-blocking
  for (const auto& pt : points) {
    const auto os = sim_value(pt, "simulated_step_s");
    const auto nb = sim_value(pt, "non_blocking_step_s");
    if (os && nb) by_size[pt.at("world_size").get<int>()].emplace_back(pt.at("curve").get<std::string>(), *os, *nb);
  }
  if (by_size.empty()) return;
  const auto apart = [](double a, double b) { return std::abs(a - b) > 0.05 * std::min(a, b); };
  for (const auto& [p, row] : by_size) {
    std::vector<std::string> flips;
    for (const auto& [a, os_a, nb_a] : row) {
      for (const auto& [b, os_b, nb_b] : row) {
        if (nb_a < nb_b && os_a > os_b && apart(nb_a, nb_b) && apart(os_a, os_b)) {
          flips.push_back(fmt::format("{} falls behind {} ({:.2f} vs {:.2f} ms non-blocking, {:.2f} vs {:.2f} ms "
                                      "oversubscribed)",
                                      curve_label(curves, a), curve_label(curves, b), 1e3 * nb_a, 1e3 * nb_b,
                                      1e3 * os_a, 1e3 * os_b));
        }
      }
    }
    if (flips.empty()) continue;
    std::string text;
    for (const auto& f : flips) text += (text.empty() ? "" : "; ") + f;
    out.push_back(
        {{"kind", "oversubscription_order"},
         {"world_size", p},
         {"oversubscription", o.oversubscription},
         {"text", fmt::format("{:g}x oversubscribed uplinks change the order of the modes from {} ranks on: {}",
                              o.oversubscription, p, text)}});
    return;
  }
  out.push_back({{"kind", "oversubscription_order"},
                 {"world_size", nullptr},
                 {"oversubscription", o.oversubscription},
                 {"text", fmt::format("{:g}x oversubscribed uplinks leave the order of the modes as non-blocking ones "
                                      "give it at every simulated size (up to {} ranks)",
                                      o.oversubscription, by_size.rbegin()->first)}});
}

// What the straggler costs each mode at the largest world size that has its variant.
void straggler_finding(const Json& points, const Json& curves, Json& out) {
  int largest = 0;
  for (const auto& pt : points) {
    if (sim_value(pt, "straggler_step_s")) largest = std::max(largest, pt.at("world_size").get<int>());
  }
  if (largest == 0) return;
  Json costs = Json::object();
  std::string text;
  for (const auto& pt : points) {
    const auto base = sim_value(pt, "simulated_step_s");
    const auto slow = sim_value(pt, "straggler_step_s");
    if (pt.at("world_size") != largest || !base || !slow) continue;
    const std::string key = pt.at("curve");
    costs[key] = *slow / *base - 1.0;
    text += fmt::format("{}{} {:+.0f} %", text.empty() ? "" : ", ", curve_label(curves, key),
                        100 * (*slow / *base - 1.0));
  }
  out.push_back({{"kind", "straggler_cost"},
                 {"world_size", largest},
                 {"nic_share", kWhatIfStragglerShare},
                 {"costs", costs},
                 {"text", fmt::format("one straggler (the last node's NIC at {:.0f} % of its rate) at {} ranks costs "
                                      "each mode's simulated step: {}",
                                      100 * kWhatIfStragglerShare, largest, text)}});
}
}  // namespace

nlohmann::json simulation_findings(const nlohmann::json& points, const nlohmann::json& curves,
                                   const TopologyOptions& o) {
  Json out = Json::array();
  nic_findings(points, curves, out);
  if (o.what_if) {
    oversubscription_finding(points, curves, o, out);
    straggler_finding(points, curves, out);
  }
  return out;
}

}  // namespace dpbench
