// A results history a team keeps across commits: one row per (commit, machine, configuration,
// metric) in an SQLite database (the SQLite C API), filled from result, sweep, projection and
// Google Benchmark files, read back as series ordered by commit, and kept bounded by pruning the
// oldest commits of each machine.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

struct sqlite3;

namespace dpbench {

// One figure of one file: what was measured, where, on which commit.
struct HistoryFigure {
  std::string commit;   // the build's git commit (env.git_commit), or as given
  std::string created;  // the file's creation time, ISO 8601 UTC: orders a machine's commits
  std::string machine;  // history_machine(): CPU model, cores, GPUs, BLAS core
  std::string config;   // the configuration, a JSON object as text (its keys sorted)
  std::string metric;   // "throughput_samples_per_s", "step_time_p50_s", ...
  double value = 0;
  std::string source;  // the file it came from
};

// The machine a result was measured on, from its env block: "AMD EPYC, 2 cores, no GPU, BLAS
// Haswell". A file without one (a projection: a simulation) is "simulated".
std::string history_machine(const nlohmann::json& env);

// Every figure of one dpbench file: a result or sweep (each run that did not fail: throughput,
// p50 step, rank 0's bytes sent per step, rank 0's peak memory, the memory imbalance, the final
// loss and bus bandwidth where recorded), a projection (each point's step, and its simulated
// step), or Google Benchmark's JSON (dpbench_collectives: each benchmark's real time and its
// counters). `commit` replaces the file's own (needed where a file records none). Throws
// InputError naming the file and what it lacks.
std::vector<HistoryFigure> history_figures(const nlohmann::json& doc, const std::string& source,
                                           const std::string& commit = "");

// One configuration's metric on one machine, one value per commit (the median of its figures),
// in commit order (each commit's earliest file).
struct HistorySeries {
  std::string machine, config, metric;
  std::vector<std::string> commits, created;
  std::vector<double> values;
};

class HistoryStore {
 public:
  // Opens or creates the database at `path`. Throws InputError naming the path when it cannot be
  // opened or is not a dpbench history.
  explicit HistoryStore(const std::string& path);
  ~HistoryStore();
  HistoryStore(const HistoryStore&) = delete;
  HistoryStore& operator=(const HistoryStore&) = delete;

  // Inserts the figures in one transaction (a figure with the same commit, machine, config,
  // metric and created replaces the old one). Returns how many were written.
  long add(const std::vector<HistoryFigure>& figures);
  // The series whose metric, config and machine contain the given texts ("" matches all).
  std::vector<HistorySeries> series(const std::string& metric, const std::string& config,
                                    const std::string& machine) const;
  // Keeps the newest `keep` commits of each machine; returns the rows deleted. InputError when
  // keep < 1.
  long prune(int keep);
  long rows() const;

 private:
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace dpbench
