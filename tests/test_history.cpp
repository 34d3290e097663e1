// The results history: E-Divisive change points (a hand-computed statistic, a planted 20 % step
// found at its commit, none in noise), the SQLite store (series by commit, medians, pruning,
// refusals) and the figures taken from dpbench's files.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sqlite3.h>

#include "bench/app/history_command.hpp"
#include "core/error.hpp"
#include "history/change_points.hpp"
#include "history/history_store.hpp"
#include "tests/fixtures.hpp"

namespace dpbench {
namespace {

using testing::TempDir;

// 0 0 | 1 1: every cross pair differs by 1 (4 pairs), no pair within a side does:
// 2 x 2 / 4 x (2 / (2 x 2) x 4 - 0 - 0) = 2.
TEST(ChangePoints, EnergyStatisticByHand) {
  EXPECT_DOUBLE_EQ(energy_statistic({0, 0, 1, 1}, 2), 2.0);
  // 0 1 | 0 1: cross 2/(4) x (1+0+0+1)... within each side one pair of 1: 1 x (1 - 1 - 1) = -1.
  EXPECT_DOUBLE_EQ(energy_statistic({0, 1, 0, 1}, 2), -1.0);
  EXPECT_THROW(energy_statistic({0, 1, 2}, 1), Error);
}

std::vector<double> history_noisy(int n, double level, double noise, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, noise);
  std::vector<double> v;
  for (int i = 0; i < n; ++i) v.push_back(level * (1.0 + d(rng)));
  return v;
}

// A 20 % slowdown planted at index 12 of 24 values with 1 % noise is found there, once; noise
// alone, or a 2 % step (below the 5 % minimum effect), gives none.
TEST(ChangePoints, FindsAPlantedStepAndNothingInNoise) {
  std::vector<double> x = history_noisy(12, 100.0, 0.01, 3), after = history_noisy(12, 80.0, 0.01, 4);
  x.insert(x.end(), after.begin(), after.end());
  const auto found = change_points(x);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].index, 12u);
  EXPECT_NEAR(found[0].mean_after / found[0].mean_before, 0.8, 0.01);
  EXPECT_LE(found[0].p_value, 0.05);
  EXPECT_TRUE(change_points(history_noisy(24, 100.0, 0.01, 5)).empty());
  std::vector<double> small = history_noisy(12, 100.0, 0.001, 6), higher = history_noisy(12, 102.0, 0.001, 7);
  small.insert(small.end(), higher.begin(), higher.end());
  EXPECT_TRUE(change_points(small).empty());
  ChangePointOptions any;
  any.min_effect = 0;
  EXPECT_EQ(change_points(small, any).size(), 1u);
  EXPECT_TRUE(change_points({1, 2, 3}).empty());  // too short to split
  EXPECT_THROW(change_points({1, std::nan(""), 3, 4, 5, 6}), Error);
}

HistoryFigure history_fig(const std::string& commit, const std::string& created, double value,
                          const std::string& machine = "m1") {
  return {commit, created, machine, R"({"mode":"allreduce"})", "throughput_samples_per_s", value, "test"};
}

// Series come back one value per commit (the median of its figures), in the order of each
// commit's earliest file; prune keeps the newest commits of each machine.
TEST(HistoryStore, SeriesByCommitAndPruning) {
  TempDir dir;
  const std::string db = (dir.path() / "h.sqlite").string();
  {
    HistoryStore store(db);
    store.add({history_fig("b", "2026-01-02T00:00:00Z", 10), history_fig("a", "2026-01-01T00:00:00Z", 5),
               history_fig("b", "2026-01-02T01:00:00Z", 30), history_fig("b", "2026-01-02T02:00:00Z", 20),
               history_fig("c", "2026-01-03T00:00:00Z", 7), history_fig("x", "2026-01-01T00:00:00Z", 1, "m2")});
    EXPECT_EQ(store.rows(), 6);
  }
  HistoryStore store(db);  // reopened: the rows stay
  const auto all = store.series("throughput", "allreduce", "m1");
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].commits, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(all[0].values, (std::vector<double>{5, 20, 7}));
  EXPECT_EQ(store.series("", "", "").size(), 2u);  // m1 and m2
  EXPECT_TRUE(store.series("no such metric", "", "").empty());
  EXPECT_EQ(store.prune(2), 1);  // m1 loses commit a; m2 keeps its one
  EXPECT_EQ(store.series("", "", "m1")[0].commits, (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(store.series("", "", "m2")[0].commits, (std::vector<std::string>{"x"}));
  EXPECT_THROW(store.prune(0), InputError);
}

TEST(HistoryStore, RefusesWhatIsNotAHistory) {
  TempDir dir;
  EXPECT_THROW(HistoryStore((dir.path() / "missing" / "h.sqlite").string()), InputError);
  const std::string other = (dir.path() / "other.sqlite").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  sqlite3_exec(db,
               "CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL); INSERT INTO meta VALUES ('schema', '99')",
               nullptr, nullptr, nullptr);
  sqlite3_close(db);
  try {
    HistoryStore store(other);
    ADD_FAILURE() << "a history of another schema was opened";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("history schema 99"), std::string::npos) << e.what();
  }
}

// The done-when's synthetic history: 20 commits of one configuration, a 20 % step planted at
// commit c12; the trends name c12 and the step.
TEST(HistoryStore, APlantedStepIsFoundAtItsCommit) {
  TempDir dir;
  HistoryStore store((dir.path() / "h.sqlite").string());
  std::vector<double> values = history_noisy(20, 1000.0, 0.01, 11);
  std::vector<HistoryFigure> figures;
  for (int i = 0; i < 20; ++i) {
    const double v = i >= 12 ? 0.8 * values[static_cast<std::size_t>(i)] : values[static_cast<std::size_t>(i)];
    figures.push_back(history_fig(fmt::format("c{:02}", i), fmt::format("2026-01-{:02}T00:00:00Z", i + 1), v));
  }
  store.add(figures);
  const nlohmann::json trends = history_trends(store.series("throughput", "", ""), ChangePointOptions{});
  ASSERT_EQ(trends["series"].size(), 1u);
  const auto& changes = trends["series"][0]["change_points"];
  ASSERT_EQ(changes.size(), 1u) << changes.dump();
  EXPECT_EQ(changes[0]["commit"], "c12");
  EXPECT_NEAR(changes[0]["change"].get<double>(), -0.2, 0.02);
}

// A result file gives one figure per metric and successful run, keyed by its configuration and
// machine; a projection needs --commit; anything else is refused naming the file.
TEST(HistoryFigures, FromResultsAndProjections) {
  const nlohmann::json result = {
      {"schema", {{"name", "dpbench-result"}, {"version", 2}}},
      {"created", "2026-01-01T00:00:00Z"},
      {"env",
       {{"git_commit", "abc"},
        {"cpu_model", "CPU X"},
        {"cpu_cores", 2},
        {"gpus", nlohmann::json::array()},
        {"blas_core", "Haswell"}}},
      {"runs",
       {{{"mode", "allreduce"},
         {"config", {{"mode", "allreduce"}, {"world_size", 2}, {"global_batch", 64}, {"seed", 5}}},
         {"throughput_samples_per_s", 100.0},
         {"step_time_s", {{"p50", 0.5}}},
         {"comm_bytes_per_step", {{"per_rank", {{{"rank", 0}, {"sent", 4096}}}}}},
         {"memory", {{"per_rank", {{{"rank", 0}, {"peak_bytes", 1e6}}}}, {"imbalance_max_over_mean", 1.0}}},
         {"quality", {{"final_train_loss", 0.4}}}},
        {{"mode", "ps"}, {"status", "failed"}}}}};
  const auto figures = history_figures(result, "r.json");
  ASSERT_EQ(figures.size(), 6u);
  EXPECT_EQ(figures[0].commit, "abc");
  EXPECT_EQ(figures[0].machine, "CPU X, 2 cores, no GPU, BLAS Haswell");
  EXPECT_EQ(figures[0].config, R"({"global_batch":64,"mode":"allreduce","world_size":2})");  // no seed
  EXPECT_EQ(figures[0].metric, "throughput_samples_per_s");
  EXPECT_EQ(figures[2].metric, "rank0_bytes_sent_per_step");
  EXPECT_EQ(figures[2].value, 4096);
  EXPECT_EQ(history_figures(result, "r.json", "mine")[0].commit, "mine");
  const nlohmann::json projection = {{"schema", {{"name", "dpbench-projection"}, {"version", 1}}},
                                     {"created", "2026-01-01T00:00:00Z"},
                                     {"points",
                                      {{{"mode", "allreduce"},
                                        {"world_size", 8},
                                        {"per_rank_batch", 8.0},
                                        {"step_time_s", 0.1},
                                        {"simulation", {{"simulated_step_s", 0.12}}}}}}};
  EXPECT_THROW(history_figures(projection, "p.json"), InputError);
  const auto p = history_figures(projection, "p.json", "abc");
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].machine, "simulated");
  EXPECT_EQ(p[1].metric, "simulated_step_s");
  try {
    history_figures(nlohmann::json{{"schema", {{"name", "dpbench-memory"}}}}, "m.json");
    ADD_FAILURE() << "a memory file was taken";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("m.json: not a dpbench result"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpbench
