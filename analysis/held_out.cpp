#include "analysis/held_out.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/stats.hpp"

namespace dpbench {

namespace {

// A held-out run's cluster (a sweep run's "cluster" block, else its file's "network" block) as
// project --simulate's topology options: its ranks per node, the rate most of its nodes were
// given as --node-link, the others as --node-link-of.
TopologyOptions held_out_topology(const HeldOutFile& f, const nlohmann::json& run, const TopologyOptions& base) {
  const nlohmann::json& net = run.contains("cluster") ? run["cluster"]
                                                      : f.doc.value("network", nlohmann::json::object());
  if (!net.contains("links") || !net["links"].is_array() || net["links"].empty()) {
    throw InputError(fmt::format("{}: not an emulated-cluster result (no network block with its links): a held-out "
                                 "point is a run on `dpbench run --nodes N --link RATE`",
                                 f.path));
  }
  std::map<std::string, int> count;
  for (const auto& link : net["links"]) ++count[link.at("requested_rate").get<std::string>()];
  const auto most = std::max_element(count.begin(), count.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  TopologyOptions t = base;
  t.simulate = true;
  t.preset.clear();
  t.platform_file.clear();
  t.ranks_per_node = net.value("ranks_per_node", 1);
  t.node_link = most->first;
  t.node_link_of.clear();
  for (const auto& link : net["links"]) {
    const auto rate = link.at("requested_rate").get<std::string>();
    if (rate != t.node_link) t.node_link_of.push_back(fmt::format("{}={}", link.at("node").get<int>(), rate));
  }
  return t;
}

// The simulated step of `curve` at world size p in a projection document, or why there is none.
std::pair<double, std::string> simulated_at(const nlohmann::json& projection, const std::string& curve, int p) {
  for (const auto& pt : projection.at("points")) {
    if (pt.at("world_size").get<int>() != p || pt.at("curve").get<std::string>() != curve) continue;
    const nlohmann::json& sim = pt.value("simulation", nlohmann::json::object());
    if (sim.contains("simulated_step_s")) return {sim["simulated_step_s"].get<double>(), ""};
    return {0.0, sim.value("unavailable", std::string("not simulated"))};
  }
  return {0.0, fmt::format("the projection has no {} point at {} ranks", curve, p)};
}

// One held-out run's row: its setting, its measured step p50 and the simulated point of the
// projection made for that setting ("predicted_step_s"), or "unavailable" with the reason.
// `projections` keeps the projections made, by setting.
nlohmann::json predicted_row(const ProjectOptions& options, const std::vector<nlohmann::json>& calibration,
                             const HeldOutFile& f, const nlohmann::json& run,
                             std::map<std::string, nlohmann::json>& projections) {
  const int p = run.at("world_size").get<int>();
  const TopologyOptions t = held_out_topology(f, run, options.topology);
  // The run's own global batch, as weak scaling at its per-rank share.
  const double global_batch = run.at("global_batch").get<double>();
  ProjectOptions o = options;
  o.topology = t;
  o.max_ranks = p;
  o.scaling = "weak";
  o.per_rank_batch = global_batch / p;
  const std::string key = fmt::format("{}|{}|{}|{}|{}", t.ranks_per_node, t.node_link, fmt::join(t.node_link_of, ","),
                                      p, o.per_rank_batch);
  if (!projections.contains(key)) projections[key] = project(o, calibration, nullptr);
  const std::string curve = run.at("strategy").at("projection").get<std::string>();
  const auto [predicted, why] = simulated_at(projections[key], curve, p);
  nlohmann::json row = {{"file", f.path},
                        {"mode", run.at("mode")},
                        {"curve", curve},
                        {"label", run.at("strategy").value("label", curve)},
                        {"world_size", p},
                        {"global_batch", global_batch},
                        {"nodes", p / t.ranks_per_node},
                        {"ranks_per_node", t.ranks_per_node},
                        {"node_link", t.node_link},
                        {"node_link_of", t.node_link_of},
                        {"measured_step_s", run.at("step_time_s").at("p50").get<double>()}};
  if (why.empty()) {
    row["predicted_step_s"] = predicted;
  } else {
    row["unavailable"] = why;
  }
  return row;
}

}  // namespace

nlohmann::json validate_held_out(const ProjectOptions& options, const std::vector<nlohmann::json>& calibration,
                                 const std::vector<HeldOutFile>& held_out, double max_error) {
  if (!(max_error > 0)) throw InputError(fmt::format("--max-error {}: must be a positive percentage", 100 * max_error));
  nlohmann::json runs = nlohmann::json::array();
  std::vector<double> errors;
  int beyond = 0;
  std::map<std::string, nlohmann::json> projections;
  for (const HeldOutFile& f : held_out) {
    for (const auto& run : f.doc.at("runs")) {
      if (run.at("world_size").get<int>() < 2 || run.value("status", std::string("ok")) != "ok") continue;
      nlohmann::json row = predicted_row(options, calibration, f, run, projections);
      if (row.contains("predicted_step_s")) {
        const double error = row["predicted_step_s"].get<double>() / row["measured_step_s"].get<double>() - 1.0;
        row["relative_error"] = error;
        row["within"] = std::abs(error) <= max_error;
        errors.push_back(std::abs(error));
      }
      if (!row.value("within", false)) ++beyond;
      runs.push_back(row);
    }
  }
  return {{"runs", runs},
          {"max_error", max_error},
          {"max_abs_error", errors.empty() ? 0.0 : *std::max_element(errors.begin(), errors.end())},
          {"median_abs_error", median(errors)},
          {"beyond", beyond},
          {"method", "each held-out run's setting (its nodes, ranks per node and requested link rates) projected with "
                     "--simulate from the calibration files alone, read at its world size; measured: its step p50"}};
}

}  // namespace dpbench
