#include "bench/app/history_command.hpp"

#include <fstream>
#include <map>

#include <fmt/format.h>

#include "record/result_file.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

int history_add(const HistoryOptions& o) {
  if (o.files.empty()) throw InputError("history add: give result, sweep, projection or benchmark files");
  std::vector<HistoryFigure> figures;
  for (const std::string& path : o.files) {  // every file read before the database is touched
    std::vector<HistoryFigure> mine = history_figures(read_json(path), path, o.commit);
    if (mine.empty()) throw InputError(fmt::format("{}: holds no figure (no run succeeded?)", path));
    figures.insert(figures.end(), mine.begin(), mine.end());
  }
  HistoryStore store(o.db);
  const long added = store.add(figures);
  fmt::print("history: {} figures from {} file{} added to {} ({} in all)\n", added, o.files.size(),
             o.files.size() == 1 ? "" : "s", o.db, store.rows());
  return 0;
}

void print_series(const nlohmann::json& s) {
  fmt::print("{} on {}\n  {}\n", s["metric"].get<std::string>(), s["machine"].get<std::string>(),
             s["config"].get<std::string>());
  std::map<std::size_t, const nlohmann::json*> changes;
  for (const auto& c : s["change_points"]) changes[c["index"].get<std::size_t>()] = &c;
  for (std::size_t i = 0; i < s["values"].size(); ++i) {
    std::string mark;
    if (const auto it = changes.find(i); it != changes.end()) {
      const auto& c = *it->second;
      mark = fmt::format("  <- change point: {:+.1f} % (mean {:.6g} -> {:.6g}, p = {:.3f})",
                         100 * c["change"].get<double>(), c["mean_before"].get<double>(), c["mean_after"].get<double>(),
                         c["p_value"].get<double>());
    }
    fmt::print("  {:<14} {:<22} {:>14.6g}{}\n", s["commits"][i].get<std::string>(), s["created"][i].get<std::string>(),
               s["values"][i].get<double>(), mark);
  }
}

int history_show(const HistoryOptions& o) {
  if (!o.out.empty()) check_result_path(o.out, "--out");
  const HistoryStore store(o.db);
  const nlohmann::json trends = history_trends(store.series(o.metric, o.config, o.machine), o.change);
  if (trends["series"].empty()) {
    throw InputError(fmt::format("history show: no series in {} matches --metric '{}' --config '{}' --machine '{}'",
                                 o.db, o.metric, o.config, o.machine));
  }
  if (!o.out.empty()) write_result_file(o.out, trends.dump(1) + "\n", "--out");
  if (o.json) {
    fmt::print("{}\n", trends.dump(1));
    return 0;
  }
  for (const auto& s : trends["series"]) print_series(s);
  if (!o.out.empty()) fmt::print("trends written to {} (for `dpbench report --trends`)\n", o.out);
  return 0;
}

}  // namespace

nlohmann::json history_trends(const std::vector<HistorySeries>& series, const ChangePointOptions& options) {
  nlohmann::json out = {{"schema", {{"name", "dpbench-trends"}, {"version", 1}}},
                        {"change_point_method",
                         {{"name", "E-Divisive means"},
                          {"max_p_value", options.max_p_value},
                          {"permutations", options.permutations},
                          {"min_effect", options.min_effect},
                          {"min_segment", options.min_segment}}},
                        {"series", nlohmann::json::array()}};
  for (const HistorySeries& s : series) {
    nlohmann::json changes = nlohmann::json::array();
    for (const ChangePoint& c : change_points(s.values, options)) {
      changes.push_back({{"index", c.index},
                         {"commit", s.commits[c.index]},
                         {"mean_before", c.mean_before},
                         {"mean_after", c.mean_after},
                         {"change", c.mean_before != 0 ? c.mean_after / c.mean_before - 1.0 : 0.0},
                         {"p_value", c.p_value}});
    }
    out["series"].push_back({{"machine", s.machine},
                             {"config", s.config},
                             {"metric", s.metric},
                             {"commits", s.commits},
                             {"created", s.created},
                             {"values", s.values},
                             {"change_points", changes}});
  }
  return out;
}

CLI::App* add_history_command(CLI::App& app, HistoryOptions& o) {
  CLI::App* history = app.add_subcommand(
      "history", "A results history in SQLite: add result, sweep, projection and benchmark files; show a "
                 "metric's trend per configuration and machine with its change points; prune old commits");
  history->require_subcommand(1);
  history->fallthrough();  // --db after the subcommand too
  history->add_option("--db", o.db, "The history database (SQLite)")->capture_default_str();
  CLI::App* add = history->add_subcommand("add", "Put every figure of these files into the history");
  add->add_option("files", o.files, "dpbench result, sweep or projection JSON, or dpbench_collectives' JSON")
      ->required();
  add->add_option("--commit", o.commit, "The commit these files are of (where a file records none: projections)");
  CLI::App* show = history->add_subcommand("show", "A metric's trend per configuration and machine");
  show->add_option("--metric", o.metric,
                   "Metric (a substring): throughput_samples_per_s, step_time_p50_s, rank0_bytes_sent_per_step, "
                   "rank0_peak_bytes, memory_imbalance, final_train_loss, bus_bandwidth_GBps, projected_step_s, "
                   "simulated_step_s, real_time, busbw")
      ->capture_default_str();
  show->add_option("--config", o.config, "Only configurations containing this text (e.g. '\"mode\":\"allreduce\"')");
  show->add_option("--machine", o.machine, "Only machines containing this text");
  show->add_flag("--json", o.json, "Print the trends as JSON instead of the table");
  show->add_option("--out", o.out, "Also write the trends as JSON to this file (for `dpbench report --trends`)");
  show->add_option("--min-effect", o.change.min_effect, "A change point's smallest |mean after / before - 1|")
      ->capture_default_str();
  show->add_option("--max-p-value", o.change.max_p_value, "A change point's permutation-test significance")
      ->capture_default_str();
  CLI::App* prune = history->add_subcommand("prune", "Keep the newest --keep commits of each machine");
  prune->add_option("--keep", o.keep, "Commits to keep per machine")->required();
  return history;
}

int history_command(const CLI::App& history, const HistoryOptions& o) {
  if (history.got_subcommand("add")) return history_add(o);
  if (history.got_subcommand("show")) return history_show(o);
  HistoryStore store(o.db);
  const long deleted = store.prune(o.keep);
  fmt::print("history: {} figures of older commits removed from {} ({} left)\n", deleted, o.db, store.rows());
  return 0;
}

}  // namespace dpbench
