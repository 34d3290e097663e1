#include "record/result_json.hpp"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>

#include "record/env_info.hpp"
#include "record/result_file.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "workloads/model_description.hpp"

namespace dpbench {

namespace {
std::vector<double> rank0_step_times(const RunResult& run) {
  std::vector<double> t;
  for (const auto& s : run.ranks.front().steps) t.push_back(s.step_time);
  return t;
}

nlohmann::json phase_medians(const std::vector<StepRecord>& steps) {
  auto med = [&](double PhaseTimes::*field) {
    std::vector<double> v;
    for (const auto& s : steps) v.push_back(s.phases.*field);
    return median(v);
  };
  return {{"data_wait", med(&PhaseTimes::data_wait)}, {"h2d", med(&PhaseTimes::h2d)},
          {"forward", med(&PhaseTimes::forward)},     {"backward", med(&PhaseTimes::backward)},
          {"comm", med(&PhaseTimes::comm)},           {"comm_exposed", med(&PhaseTimes::comm_exposed)},
          {"optimizer", med(&PhaseTimes::optimizer)}};
}
}  // namespace

double median_throughput(const RunResult& run) {
  std::vector<double> tput;
  for (double t : rank0_step_times(run)) {
    if (t > 0) tput.push_back(static_cast<double>(run.config.global_batch) / t);
  }
  return median(tput);
}

double wall_throughput(const RunResult& run) {
  const RankResult& r0 = run.ranks.front();
  if (r0.steps.empty() || r0.timed_wall_s <= 0) return 0.0;
  return static_cast<double>(r0.steps.size()) * static_cast<double>(run.config.global_batch) / r0.timed_wall_s;
}

nlohmann::json optimizer_to_json(const TrainConfig& config) {
  return {{"optimizer", config.optimizer.name},
          {"lr", config.optimizer.lr},
          {"momentum", config.optimizer.momentum},
          {"weight_decay", config.optimizer.weight_decay},
          {"betas", {config.optimizer.beta1, config.optimizer.beta2}},
          {"eps", config.optimizer.eps},
          {"seed", config.seed}};
}

nlohmann::json dlrm_to_json(const TrainConfig& config) {
  const DlrmShape& d = config.model.dlrm;
  return {{"tables", d.tables},
          {"rows", d.rows},
          {"embedding_dim", d.dim},
          {"lookups", d.lookups},
          {"dense_features", d.dense_features},
          {"bottom_mlp", d.bottom},
          {"top_mlp", d.top},
          {"embedding_params", d.embedding_params()},
          {"sparse_grad", d.sparse_grad},
          {"embedding_optimizer", d.sparse_grad ? d.embedding_optimizer : config.optimizer.name},
          {"zipf_alpha", d.zipf_alpha}};
}

nlohmann::json config_to_json(const TrainConfig& config) {
  nlohmann::json j = {{"workload", config.model.workload},
                      {"mode", config.mode},
                      {"transport", config.transport},
                      {"comm", config.comm},
                      {"device", config.device},
                      {"world_size", config.world_size},
                      {"global_batch", config.global_batch},
                      {"epochs", config.run.epochs},
                      {"max_steps", config.run.max_steps},
                      {"warmup_steps", config.run.warmup_steps},
                      {"hidden", config.model.hidden},
                      {"hierarchy", config.hierarchy},
                      {"num_workers", config.loader.num_workers},
                      {"prefetch_factor", config.loader.prefetch_factor},
                      {"persistent_workers", config.loader.persistent_workers},
                      {"pin_memory", config.loader.pin_memory},
                      {"decode_cost_us", config.loader.decode_cost_us},
                      {"crop_padding", config.loader.crop_padding},
                      {"hflip", config.loader.hflip},
                      {"channels", config.model.channels},
                      {"sync_bn", config.model.sync_bn},
                      {"rank_batches", config.rank_batches}};
  j.update(optimizer_to_json(config));
  for (const Strategy& s : strategies()) {
    if (s.config_json != nullptr) s.config_json(config, j);
  }
  if (config.model.workload == "dlrm") j["dlrm"] = dlrm_to_json(config);
  return j;
}

namespace {

// The per-rank peaks by category (and the device's view on GPUs), the memory model's figures
// beside them where it applies, the imbalance and the root's excess over the mean.
nlohmann::json memory_to_json(const RunResult& run) {
  const TrainConfig& config = run.config;
  const auto p = static_cast<double>(config.world_size);
  nlohmann::json per_rank_mem = nlohmann::json::array();
  double sum = 0, max = 0;
  for (const auto& r : run.ranks) {
    nlohmann::json m = {{"rank", r.rank}, {"peak_bytes", r.memory.peak_bytes}};
    for (const auto& [cat, bytes] : r.memory.peak_by_category) m[cat] = bytes;
    if (r.device.device >= 0) {
      // The device's own view (cudaMemGetInfo): all ranks on it, the CUDA context, cuBLAS, NCCL.
      m["device"] = {{"index", r.device.device},
                     {"used_before_bytes", r.device.used_before},
                     {"used_after_bytes", r.device.used_after},
                     {"total_bytes", r.device.total}};
    }
    per_rank_mem.push_back(m);
    sum += static_cast<double>(r.memory.peak_bytes);
    max = std::max(max, static_cast<double>(r.memory.peak_bytes));
  }
  // The memory model's figures beside the measured ones (train/memory_model.hpp), where the
  // harness set them: CPU ranks over --comm local, where the model holds to the byte.
  const std::vector<RankMemory>& modelled = run.modelled_memory;
  for (std::size_t r = 0; r < modelled.size() && r < per_rank_mem.size(); ++r) {
    nlohmann::json m = {{"role", modelled[r].role}, {"total_bytes", modelled[r].total()}};
    for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
      m[std::string(category_name(static_cast<MemoryCategory>(cat)))] =
          modelled[r].bytes[static_cast<std::size_t>(cat)];
    }
    per_rank_mem[r]["modelled"] = m;
  }
  const double mean = sum / p;
  return {{"per_rank", per_rank_mem},
          {"imbalance_max_over_mean", mean > 0 ? max / mean : 1.0},
          {"root_minus_mean_bytes", static_cast<double>(run.ranks.front().memory.peak_bytes) - mean}};
}

// The checkpoints of a run with --checkpoint-dir: count, write times, bytes per rank, and where
// it resumed from.
void add_checkpoints_json(const RunResult& run, nlohmann::json& j) {
  const TrainConfig& config = run.config;
  // A checkpoint's time is its slowest rank's (barrier to file in place); bytes per checkpoint.
  std::vector<double> per_checkpoint;
  nlohmann::json bytes = nlohmann::json::array();
  for (const auto& r : run.ranks) {
    if (per_checkpoint.size() < r.checkpoint_write_s.size()) per_checkpoint.resize(r.checkpoint_write_s.size(), 0.0);
    for (std::size_t i = 0; i < r.checkpoint_write_s.size(); ++i) {
      per_checkpoint[i] = std::max(per_checkpoint[i], r.checkpoint_write_s[i]);
    }
    bytes.push_back(r.checkpoint_bytes);
  }
  j["checkpoints"] = {{"dir", config.checkpoint.dir},
                      {"every", config.checkpoint.every},
                      {"count", per_checkpoint.size()},
                      {"write_time_s",
                       {{"total", std::accumulate(per_checkpoint.begin(), per_checkpoint.end(), 0.0)},
                        {"median", median(per_checkpoint)}}},
                      {"bytes_per_rank", bytes}};
  j["resumed_from_step"] = run.resumed_from_step >= 0 ? nlohmann::json(run.resumed_from_step) : nlohmann::json();
  if (!run.elastic_restart.is_null()) j["elastic_restart"] = run.elastic_restart;
}

// Traffic, counted by each rank's communicator over the timed steps, and the bus bandwidth of
// the strategy's collective, nccl-tests definitions: algbw = bytes / comm time, busbw = algbw *
// the strategy's factor (only for strategies that declare one). Needs j["phases_s"].
void add_traffic_json(const RunResult& run, const Strategy& strategy, nlohmann::json& j) {
  const TrainConfig& config = run.config;
  nlohmann::json per_rank_comm = nlohmann::json::array();
  for (const auto& r : run.ranks) {
    per_rank_comm.push_back(
        {{"rank", r.rank}, {"sent", r.comm_per_step.bytes_sent}, {"received", r.comm_per_step.bytes_received}});
  }
  j["comm_bytes_per_step"] = {{"per_rank", per_rank_comm}};
  const double comm_s = j["phases_s"]["comm"].get<double>();
  const auto bus = strategy.bus_bandwidth(config, static_cast<double>(run.num_params * sizeof(float)));
  if (bus && comm_s > 0 && config.world_size > 1) {
    const double algbw = bus->bytes / comm_s / 1e9;
    j["bus_bandwidth_GBps"] = {{"collective", bus->collective},
                               {"bytes", bus->bytes},
                               {"factor", bus->factor},
                               {"algbw", algbw},
                               {"busbw", algbw * bus->factor}};
  }
}

}  // namespace

// A replayed run (--model): what was replayed, from where, and its time scale; the workload is
// the description's name.
static void add_replay_json(const RunResult& run, nlohmann::json& j) {
  const ModelDescription& d = *run.description;
  j["workload"] = d.name;
  j["replay"] = {{"model", d.name},
                 {"origin", d.origin},
                 {"source_module", d.source_module},
                 {"timed_on", d.device_name},
                 {"device_profile", run.config.model.device_profile},
                 {"time_scale", run.config.model.replay_time_scale},
                 {"num_tensors", d.params.size()},
                 {"forward_us_per_sample", d.forward_us()},
                 {"backward_us_per_sample", d.backward_us()}};
}

// Throughput, step-time percentiles, stalls and, under time dilation, the figures scaled
// back to the target cluster.
static void add_timing_json(const RunResult& run, nlohmann::json& j) {
  const double wall = wall_throughput(run);
  j["throughput_samples_per_s"] = wall;
  j["throughput_median_step_samples_per_s"] = median_throughput(run);
  j["timed_wall_s"] = run.ranks.front().timed_wall_s;
  const std::vector<double> times = rank0_step_times(run);
  const double p50 = quantile(times, 0.50);
  j["step_time_s"] = {{"p10", quantile(times, 0.10)},
                      {"p50", p50},
                      {"p90", quantile(times, 0.90)},
                      {"p99", quantile(times, 0.99)},
                      {"samples", times}};
  j["stall_ratio_p90_p50"] = p50 > 0 ? quantile(times, 0.90) / p50 : 0.0;
  if (run.config.model.time_dilation != 1) {  // the target cluster's figures: measured ones over D
    const double d = run.config.model.time_dilation;
    j["time_dilation"] = {{"factor", d},
                          {"step_time_s_p50", p50 / d},
                          {"throughput_samples_per_s", wall * d},
                          {"note", "compute x D and links at rate / D; scaled back by 1/D. Latency and the host's "
                                   "per-message cost are not dilated"}};
  }
}

// The run's losses and accuracy; a replay's (--model) are not the model's and are not reported.
static nlohmann::json quality_json(const RunResult& run) {
  if (!run.config.model.described.empty()) {
    return {{"final_train_loss", nullptr}, {"test_accuracy", nullptr}, {"not_measured", "replay"}};
  }
  nlohmann::json quality = {{"final_train_loss", run.final_train_loss},
                            {"epoch_train_loss", run.epoch_train_loss},
                            {"step_train_loss", run.step_train_loss}};
  quality["test_accuracy"] = run.test_accuracy >= 0 ? nlohmann::json(run.test_accuracy) : nlohmann::json();
  if (run.test_auc >= 0) quality["test_auc"] = run.test_auc;
  if (run.reached_target_loss) {
    const TimeToTarget& t = *run.reached_target_loss;
    quality["time_to_target_loss"] = {{"target", run.config.run.target_loss},
                                      {"window_steps", kTargetLossWindow},
                                      {"step", t.step > 0 ? nlohmann::json(t.step) : nlohmann::json()},
                                      {"seconds", t.seconds >= 0 ? nlohmann::json(t.seconds) : nlohmann::json()}};
  }
  if (!run.test_curve.empty()) {
    nlohmann::json& curve = quality["test_curve"] = nlohmann::json::array();
    for (const TestPoint& p : run.test_curve) {
      curve.push_back({{"step", p.step},
                       {"seconds", p.seconds},
                       {"test_accuracy", p.accuracy},
                       {"test_auc", p.auc >= 0 ? nlohmann::json(p.auc) : nlohmann::json()}});
    }
  }
  if (run.reached_target_auc) {
    const TimeToTarget& t = *run.reached_target_auc;
    quality["time_to_target_auc"] = {{"target", run.config.run.target_auc},
                                     {"test_freq", run.config.run.test_freq},
                                     {"step", t.step > 0 ? nlohmann::json(t.step) : nlohmann::json()},
                                     {"seconds", t.step > 0 ? nlohmann::json(t.seconds) : nlohmann::json()}};
  }
  return quality;
}

nlohmann::json run_to_json(const RunResult& run) {
  if (run.traits.strategy == nullptr) throw Error("run_to_json: the run has no strategy (RunResult::traits is unset)");
  const TrainConfig& config = run.config;
  const Strategy& strategy = *run.traits.strategy;
  nlohmann::json j;
  j["mode"] = config.mode;
  j["strategy"] = run.traits.json;
  j["transport"] = j["strategy"]["transport"];
  j["comm"] = config.comm;
  j["device"] = config.device;
  j["workload"] = config.model.workload;
  j["dataset"] = run.dataset;
  j["world_size"] = config.world_size;
  j["global_batch"] = config.global_batch;
  j["num_params"] = run.num_params;
  if (!run.ddp_buckets.empty()) j["ddp_buckets"] = run.ddp_buckets;
  j["input_features"] = run.input_features;
  j["num_classes"] = run.num_classes;
  // GPU ranks sharing a device (more ranks than GPUs on a node); CPU ranks are threads.
  j["virtual_ranks"] = std::any_of(run.ranks.begin(), run.ranks.end(),
                                   [](const RankResult& r) { return r.device.virtual_rank; });
  if (run.blas_threads > 0) j["blas_threads"] = run.blas_threads;
  if (config.device == DeviceKind::cuda) j["precision"] = config.precision;
  j["config"] = config_to_json(config);
  j["steps"] = {{"total", run.steps_total}, {"timed", run.steps_timed}, {"warmup", config.run.warmup_steps}};
  j["phases_s"] = phase_medians(run.ranks.front().steps);
  add_traffic_json(run, strategy, j);
  j["memory"] = memory_to_json(run);
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& r : run.ranks) {
    std::vector<double> t;
    for (const auto& s : r.steps) t.push_back(s.step_time);
    ranks.push_back({{"rank", r.rank}, {"local_batch", r.local_batch}, {"step_time_p50_s", median(t)}});
  }
  j["per_rank"] = ranks;
  j["quality"] = quality_json(run);  // a non-finite loss is written as null
  if (!config.checkpoint.dir.empty()) add_checkpoints_json(run, j);
  if (strategy.run_json != nullptr) strategy.run_json(run, j);
  j["warnings"] = run.warnings;
  if (!std::isfinite(run.final_train_loss)) {
    j["warnings"].push_back("training diverged: the training loss is not finite (try a lower --lr)");
  }
  if (run.description != nullptr) add_replay_json(run, j);
  add_timing_json(run, j);
  return j;
}

std::size_t median_run(const std::vector<RunResult>& reps) {
  if (reps.empty()) throw Error("median_run: no runs");
  std::vector<std::size_t> order(reps.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return wall_throughput(reps[a]) < wall_throughput(reps[b]); });
  return order[(order.size() - 1) / 2];
}

std::vector<nlohmann::json> runs_to_json(const std::vector<RunResult>& runs,
                                         const std::vector<std::vector<RunResult>>& by_mode) {
  if (runs.size() != by_mode.size()) {
    throw Error(fmt::format("runs_to_json: {} runs but {} modes of repetitions", runs.size(), by_mode.size()));
  }
  std::vector<std::vector<double>> tput(runs.size());
  int baseline = -1;
  for (std::size_t m = 0; m < runs.size(); ++m) {
    for (const RunResult& r : by_mode[m]) tput[m].push_back(wall_throughput(r));
    if (baseline < 0 && runs[m].traits.json.value("baseline", false)) baseline = static_cast<int>(m);
  }
  std::vector<nlohmann::json> docs;
  for (const RunResult& run : runs) docs.push_back(run_to_json(run));
  for (std::size_t m = 0; m < runs.size(); ++m) {
    docs[m]["repetitions"] = {{"count", by_mode[m].size()}, {"throughput_samples_per_s", tput[m]}};
    if (baseline < 0 || static_cast<int>(m) == baseline) continue;
    const std::vector<double>& base = tput[static_cast<std::size_t>(baseline)];
    std::vector<double> ratio;
    for (std::size_t i = 0; i < tput[m].size(); ++i) ratio.push_back(tput[m][i] / std::max(base[i], 1e-12));
    docs[m]["ratio_to_baseline"] = {{"baseline", runs[static_cast<std::size_t>(baseline)].config.mode},
                                    {"median", quantile(ratio, 0.5)},
                                    {"min", *std::min_element(ratio.begin(), ratio.end())},
                                    {"max", *std::max_element(ratio.begin(), ratio.end())},
                                    {"by_repetition", ratio}};
  }
  return docs;
}

nlohmann::json make_document(nlohmann::json config, nlohmann::json runs) {
  nlohmann::json doc;
  doc["schema"] = {{"name", kSchemaName}, {"version", kSchemaVersion}};
  doc["created"] = utc_timestamp();
  doc["env"] = collect_env();
  doc["config"] = std::move(config);
  doc["runs"] = std::move(runs);
  return doc;
}

std::string utc_timestamp() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace dpbench
