// A run of several modes (harness/harness.hpp: train_modes) trains them in the order that
// spreads passing load over all of them, shows each run to the command's observer, and reports
// the median repetition of each; the result's runs (record/result_json.hpp: runs_to_json) compare
// every mode with the baseline's same repetition.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/stats.hpp"
#include "harness/harness.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "train/models.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

// Records every call the harness makes, in order.
class RecordingObserver final : public TrainingObserver {
 public:
  std::vector<std::string> calls;
  void starting(TrainConfig& config, int rep, int reps) override {
    calls.push_back(fmt::format("start {} {}/{}", config.mode, rep, reps));
  }
  void finished(const RunResult& run, double seconds) override {
    calls.push_back(fmt::format("done {}{}", run.config.mode, seconds >= 0 ? "" : " (negative time)"));
  }
  void perturbing(Mode mode, int runs) override { calls.push_back(fmt::format("perturb {} {}", mode, runs)); }
};

LoadedData tiny_data() {
  const SampleShape shape{1, 1, 8};
  return {make_synthetic_dataset(shape, 3, 96, 7), make_synthetic_dataset(shape, 3, 24, 8), {}};
}

ModesPlan tiny_plan(const LoadedData& data) {
  ModesPlan plan;
  plan.base.model.workload = "mlp";
  plan.base.model.hidden = {6};
  plan.base.world_size = 2;
  plan.base.global_batch = 16;
  plan.base.run.epochs = 1;
  plan.base.run.warmup_steps = 1;
  plan.modes = {Mode::allreduce, Mode::ps};
  plan.repetitions = 2;
  plan.sensitivity_starts = {perturbed_initial_params(plan.base, *data.train, 0)};
  return plan;
}

TEST(Harness, TrainModesAlternatesTheModesThenRunsTheSensitivityRunsQuietly) {
  const LoadedData data = tiny_data();
  const ModesPlan plan = tiny_plan(data);
  RecordingObserver observer;
  const TrainedModes t = train_modes(plan, data, observer);
  const std::vector<std::string> expected = {"start allreduce 0/2", "done allreduce", "start ps 0/2", "done ps",
                                             "start allreduce 1/2", "done allreduce", "start ps 1/2", "done ps",
                                             "perturb allreduce 1"};
  EXPECT_EQ(observer.calls, expected);
  ASSERT_EQ(t.by_mode.size(), 2u);
  for (std::size_t m = 0; m < 2; ++m) {
    ASSERT_EQ(t.by_mode[m].size(), 2u);
    EXPECT_EQ(t.by_mode[m][0].config.mode, plan.modes[m]);
    EXPECT_EQ(t.runs[m].config.mode, plan.modes[m]);
    EXPECT_EQ(wall_throughput(t.runs[m]), wall_throughput(t.by_mode[m][median_run(t.by_mode[m])]));
  }
  // The sensitivity run is the first mode's, as long as its runs, from another start.
  ASSERT_EQ(t.perturbed_losses.size(), 1u);
  EXPECT_EQ(t.perturbed_losses[0].size(), t.runs[0].step_train_loss.size());
}

TEST(Harness, RunsToJsonComparesEachRepetitionWithTheBaselines) {
  const LoadedData data = tiny_data();
  ModesPlan plan = tiny_plan(data);
  plan.sensitivity_starts.clear();
  RecordingObserver observer;
  const TrainedModes t = train_modes(plan, data, observer);
  const std::vector<nlohmann::json> docs = runs_to_json(t.runs, t.by_mode);
  ASSERT_EQ(docs.size(), 2u);
  // ps is the baseline: it carries its repetitions but no ratio; allreduce's ratio is per repetition.
  EXPECT_FALSE(docs[1].contains("ratio_to_baseline"));
  EXPECT_EQ(docs[1]["repetitions"]["count"], 2);
  const auto& ratio = docs[0].at("ratio_to_baseline");
  EXPECT_EQ(ratio["baseline"], "ps");
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_DOUBLE_EQ(ratio["by_repetition"][i].get<double>(),
                     wall_throughput(t.by_mode[0][i]) / wall_throughput(t.by_mode[1][i]));
    EXPECT_DOUBLE_EQ(docs[0]["repetitions"]["throughput_samples_per_s"][i].get<double>(),
                     wall_throughput(t.by_mode[0][i]));
  }
  EXPECT_LE(ratio["min"].get<double>(), ratio["median"].get<double>());
  EXPECT_LE(ratio["median"].get<double>(), ratio["max"].get<double>());
  // Without the baseline among the modes, no ratio at all.
  const auto alone = runs_to_json({t.runs[0]}, {t.by_mode[0]});
  EXPECT_FALSE(alone[0].contains("ratio_to_baseline"));
  EXPECT_THROW(runs_to_json(t.runs, {t.by_mode[0]}), Error);
}

// The in-run simulation of a cluster run with repetitions reads every repetition's steps
// (RunResult::pooled_steps): each rank's, joined in run order; none where the ranks differ.
TEST(Harness, PoolStepsJoinsEachRanksStepsOfEveryRepetition) {
  auto run = [](std::vector<std::vector<double>> step_times) {
    RunResult r;
    for (std::size_t i = 0; i < step_times.size(); ++i) {
      RankResult& rank = r.ranks.emplace_back();
      rank.rank = static_cast<int>(i);
      for (const double t : step_times[i]) rank.steps.push_back({t, {}});
    }
    return r;
  };
  const std::vector<RunResult> reps = {run({{1, 2}, {3}}), run({{4}, {5, 6}}), run({{7}, {8}})};
  const auto pooled = pool_steps(reps);
  ASSERT_EQ(pooled.size(), 2u);
  std::vector<double> rank0, rank1;
  for (const StepRecord& s : pooled[0]) rank0.push_back(s.step_time);
  for (const StepRecord& s : pooled[1]) rank1.push_back(s.step_time);
  EXPECT_EQ(rank0, (std::vector<double>{1, 2, 4, 7}));
  EXPECT_EQ(rank1, (std::vector<double>{3, 5, 6, 8}));
  EXPECT_TRUE(pool_steps({run({{1}, {2}}), run({{3}})}).empty());
  EXPECT_TRUE(pool_steps({}).empty());
}

// The sampling error the in-run simulation reports: the standard error of the mean over the mean.
TEST(Harness, RelativeStandardErrorIsTheMeansOverTheMean) {
  // {1, 2, 3, 4}: mean 2.5, sample standard deviation sqrt(5/3), over sqrt(4).
  EXPECT_NEAR(relative_standard_error({1, 2, 3, 4}), std::sqrt(5.0 / 3.0) / 2.0 / 2.5, 1e-12);
  EXPECT_NEAR(relative_standard_error({-1, -2, -3, -4}), std::sqrt(5.0 / 3.0) / 2.0 / 2.5, 1e-12);
  EXPECT_DOUBLE_EQ(relative_standard_error({3, 3, 3}), 0.0);
  EXPECT_DOUBLE_EQ(relative_standard_error({5}), 0.0);
  EXPECT_DOUBLE_EQ(relative_standard_error({-1, 1}), 0.0);  // a zero mean
}

TEST(Harness, AnExecutedPointCarriesWhatItsRecordReads) {
  const LoadedData data = tiny_data();
  const ModesPlan plan = tiny_plan(data);
  TrainConfig config = plan.base;
  config.mode = Mode::allreduce;
  const RunResult r = execute_point(config, data, plan.device);
  // Its strategy and traits, resolved once: the record's strategy block is strategy_to_json's.
  ASSERT_NE(r.traits.strategy, nullptr);
  EXPECT_EQ(r.traits.strategy->mode, Mode::allreduce);
  EXPECT_EQ(r.traits.json, strategy_to_json(config));
  EXPECT_GT(r.traits.overlapped_share, 0.0);  // DDP overlaps its buckets with backward
  // The strategy's buckets cover the parameters in ranges; the memory model has every rank.
  std::size_t floats = 0;
  for (const ScheduleBucket& b : r.schedule_buckets) floats += b.size;
  EXPECT_EQ(floats, r.num_params);
  ASSERT_EQ(r.modelled_memory.size(), static_cast<std::size_t>(config.world_size));
  EXPECT_EQ(r.modelled_memory[0].role, "replica");
  const nlohmann::json doc = run_to_json(r);
  EXPECT_EQ(doc.at("memory").at("per_rank").at(1).at("modelled").at("total_bytes").get<double>(),
            r.modelled_memory[1].total());
  // A run the harness did not make has no strategy to report: an error, not a guess.
  RunResult bare = r;
  bare.traits = {};
  EXPECT_THROW(run_to_json(bare), Error);
}

// A run whose wall throughput is `samples_per_s` (one timed step of a global batch of 100).
RunResult run_at(double samples_per_s) {
  RunResult r;
  r.config.global_batch = 100;
  r.ranks.resize(1);
  r.ranks[0].steps.resize(1);
  r.ranks[0].timed_wall_s = 100.0 / samples_per_s;
  return r;
}

TEST(Harness, MedianRunIsTheMiddleRepetitionTheLowerOneOfAnEvenCount) {
  EXPECT_EQ(median_run({run_at(30), run_at(10), run_at(20)}), 2u);
  EXPECT_EQ(median_run({run_at(40), run_at(10), run_at(30), run_at(20)}), 3u);
  EXPECT_EQ(median_run({run_at(5)}), 0u);
  EXPECT_THROW(median_run({}), Error);
}

}  // namespace
}  // namespace dpbench
