// `dpbench history add|show|prune`: a results history in SQLite (history/history_store.hpp), the
// trend of a metric per configuration and machine, and its change points
// (history/change_points.hpp).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "history/change_points.hpp"
#include "history/history_store.hpp"

namespace dpbench {

struct HistoryOptions {
  std::string db = "dpbench-history.sqlite";
  std::vector<std::string> files;                                    // add
  std::string commit;                                                // add: instead of each file's env.git_commit
  std::string metric = "throughput_samples_per_s", config, machine;  // show: substrings
  bool json = false;                                                 // show: the trends as JSON
  std::string out;                                                   // show: also write them to this file
  int keep = 0;                                                      // prune
  ChangePointOptions change;
};

// Adds the `history` subcommand and its add, show and prune subcommands; returns it.
CLI::App* add_history_command(CLI::App& app, HistoryOptions& options);

// The series with their change points, {"schema": {"name": "dpbench-trends"}, "db", "series":
// [{"machine", "config", "metric", "commits", "created", "values", "change_points": [{"index",
// "commit", "mean_before", "mean_after", "change", "p_value"}]}]}: what `history show --json`
// prints and the report draws.
nlohmann::json history_trends(const std::vector<HistorySeries>& series, const ChangePointOptions& options);

// Runs the chosen history subcommand. Throws InputError.
int history_command(const CLI::App& history, const HistoryOptions& options);

}  // namespace dpbench
