// Result files: one JSON document per invocation, schema results/schema/dpbench-result.schema.json
// (name "dpbench-result", version kSchemaVersion), written atomically (temporary file, then rename) so that a
// failed run never leaves a file that looks complete.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "record/result_file.hpp"
#include "train/training.hpp"

namespace dpbench {

inline constexpr const char* kSchemaName = "dpbench-result";
inline constexpr int kSchemaVersion = 4;

// One entry of the "runs" array. Times in seconds, memory and traffic in bytes.
nlohmann::json run_to_json(const RunResult& run);

// The "runs" of a result of several modes, one entry per mode m: run_to_json(runs[m]) (its
// chosen repetition), "repetitions" (the count and each repetition's wall throughput in
// samples/s, from by_mode[m]) and, for every mode but the baseline strategy's (the first whose
// strategy is marked baseline; none: no ratios), "ratio_to_baseline": its throughput over the
// baseline's in the same repetition, per repetition, with median, min and max. Throws Error when
// the sizes disagree.
std::vector<nlohmann::json> runs_to_json(const std::vector<RunResult>& runs,
                                         const std::vector<std::vector<RunResult>>& by_mode);

// The full result document: schema, created, env (env_info.hpp), the given config block and runs.
nlohmann::json make_document(nlohmann::json config, nlohmann::json runs);

// The config block of a TrainConfig (every option that shaped the run).
nlohmann::json config_to_json(const TrainConfig& config);
// The dlrm workload's block of a config: its sizes, embedding parameters, gradients, the tables'
// optimizer and the click logs' Zipf alpha (0: uniform).
nlohmann::json dlrm_to_json(const TrainConfig& config);
// The optimizer's part of it, which the PyTorch reference's start bundle carries too: optimizer,
// lr, momentum, weight_decay, betas, eps, seed.
nlohmann::json optimizer_to_json(const TrainConfig& config);

// Median of per-step throughput (global_batch / step_time) in samples/s; 0 without steps.
double median_throughput(const RunResult& run);
// The run's throughput: timed steps x global_batch / rank 0's wall-clock time over them
// (RankResult::timed_wall_s), in samples/s, what a user's epoch sees; 0 without timed steps.
double wall_throughput(const RunResult& run);
// The repetition a result reports of several (a mode's runs): the one whose wall_throughput is
// the median, the lower middle for an even count. Throws Error when `reps` is empty.
std::size_t median_run(const std::vector<RunResult>& reps);

// Current UTC time as ISO 8601, e.g. "2026-11-21T05:30:00Z".
std::string utc_timestamp();

}  // namespace dpbench
