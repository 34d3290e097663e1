#include "train/rank_context.hpp"

#include <cstring>

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/net_interface.hpp"
#include "train/cpu_context.hpp"
#include "train/elastic.hpp"
#include "train/step_schedule.hpp"
#include "workloads/dataloader.hpp"

namespace dpbench {

PinnedBatch::PinnedBatch(MemoryTracker& host_tracker, const HostMemory* pinned, std::size_t max_rows,
                         std::size_t features)
    : features_(features), pinned_(pinned != nullptr) {
  if (!pinned_) return;
  inputs_ = TrackedBuffer<float>(host_tracker, MemoryCategory::data_staging, max_rows * features, pinned);
  labels_ = TrackedBuffer<std::int32_t>(host_tracker, MemoryCategory::data_staging, max_rows, pinned);
}

StagedBatch PinnedBatch::stage(const Batch& batch, std::size_t rows) {
  if (!pinned_ || rows == 0) return {batch.inputs.data(), batch.labels.data()};
  std::memcpy(inputs_.data(), batch.inputs.data(), rows * features_ * sizeof(float));
  std::memcpy(labels_.data(), batch.labels.data(), rows * sizeof(std::int32_t));
  return {inputs_.data(), labels_.data()};
}

void RankContext::mark_timed_start() {
  timed_start_time_ = std::chrono::steady_clock::now();
  const std::string iface = cluster_interface();
  if (!iface.empty()) wire_start_ = interface_counters(iface);
}

RankContext::TimingPause RankContext::pause_timing() const {
  const std::string iface = cluster_interface();
  return {std::chrono::steady_clock::now(), iface.empty() ? std::nullopt : interface_counters(iface)};
}

std::chrono::steady_clock::duration RankContext::resume_timing(const TimingPause& pause) {
  const std::chrono::steady_clock::duration took = std::chrono::steady_clock::now() - pause.start;
  timed_start_time_ += took;
  const std::string iface = cluster_interface();
  const std::optional<CommStats> now = iface.empty() ? std::nullopt : interface_counters(iface);
  if (wire_start_ && pause.wire && now) {
    wire_start_->bytes_sent += now->bytes_sent - pause.wire->bytes_sent;
    wire_start_->bytes_received += now->bytes_received - pause.wire->bytes_received;
  }
  return took;
}

void finish_timed_rank(RankContext& ctx, RankResult& me, const CommStats& timed_start) {
  const CommStats end = ctx.comm().stats();
  me.timed_wall_s =
      me.steps.empty()
          ? 0.0
          : std::chrono::duration<double>(std::chrono::steady_clock::now() - ctx.timed_start_time()).count();
  ctx.record_device_view(me);
  finish_rank(me, {end.bytes_sent - timed_start.bytes_sent, end.bytes_received - timed_start.bytes_received},
              static_cast<long>(me.steps.size()), ctx.tracker());
  me.node = cluster_node();
  me.restart_count = restart_count();
  const auto wire_end = ctx.wire_start() ? interface_counters(cluster_interface()) : std::nullopt;
  if (wire_end && !me.steps.empty()) {
    const auto steps = static_cast<std::int64_t>(me.steps.size());
    me.wire_per_step = {(wire_end->bytes_sent - ctx.wire_start()->bytes_sent) / steps,
                        (wire_end->bytes_received - ctx.wire_start()->bytes_received) / steps};
  }
}

void BatchStaging::prefetch(const Batch&, std::size_t) { throw Error("device batch: this staging does not prefetch"); }

StagedBatch BatchStaging::take_prefetched() { throw Error("device batch: no prefetched batch to take"); }

void BatchStaging::check_rows(const Batch& batch, std::size_t rows, std::size_t max_rows) {
  if (rows > max_rows || rows > batch.size) {
    throw Error(fmt::format("device batch: {} rows do not fit (staging {}, batch {})", rows, max_rows, batch.size));
  }
}

void StepTimer::begin() {
  next_ = 0;
  laps_.clear();
  record(next_++);
}

StepTimer::Mark StepTimer::lap(double PhaseTimes::*phase) {
  const Mark m = next_++;
  record(m);
  laps_.emplace_back(phase, m);
  return m;
}

StepTimer::Mark StepTimer::note() {
  const Mark m = next_++;
  record(m);
  return m;
}

StepRecord StepTimer::end() {
  StepRecord rec;
  if (laps_.empty()) return rec;
  wait(laps_.back().second);
  Mark prev = 0;
  for (const auto& [phase, m] : laps_) {
    rec.phases.*phase += elapsed(prev, m);
    prev = m;
  }
  rec.step_time = elapsed(0, laps_.back().second);
  return rec;
}

std::vector<double> epoch_loss_sums(const std::vector<double>& step_losses, long steps_per_epoch, int epochs) {
  std::vector<double> sums(static_cast<std::size_t>(epochs), 0.0);
  for (std::size_t s = 0; s < step_losses.size(); ++s) {
    const auto e = static_cast<std::size_t>(static_cast<long>(s) / steps_per_epoch);
    if (e < sums.size()) sums[e] += step_losses[s];
  }
  return sums;
}

void finish_result_on_rank(RankContext& ctx, RunResult& result, const TrainData& data, Model& model,
                           const float* params, const std::vector<double>& step_loss_sums, long spe,
                           const std::vector<long>& steps_in_epoch) {
  const std::size_t n = model.num_params();
  result.step_train_loss.clear();
  for (const double sum : step_loss_sums) {
    result.step_train_loss.push_back(sum / static_cast<double>(result.config.global_batch));
  }
  const std::vector<double> loss_sums = epoch_loss_sums(step_loss_sums, spe, result.config.run.epochs);
  std::vector<float> host_params(n), host_buffers(model.num_buffers());
  ctx.synchronize();
  ctx.download(host_params.data(), params, n);
  ctx.download(host_buffers.data(), model.buffers(), host_buffers.size());
  finish_result(result, data, loss_sums, steps_in_epoch, host_params.data(), n,
                host_buffers.empty() ? nullptr : host_buffers.data(), host_buffers.size());
  result.ddp_buckets.clear();
  for (const ScheduleBucket& b : model_schedule_buckets(model, result.config))
    result.ddp_buckets.emplace_back(b.offset, b.size);
}

TestMetrics evaluate_on_rank(RankContext& ctx, const TrainConfig& config, const Dataset& test, Model& model,
                             const float* params) {
  std::vector<float> host_params(model.num_params()), host_buffers(model.num_buffers());
  ctx.synchronize();
  ctx.download(host_params.data(), params, host_params.size());
  ctx.download(host_buffers.data(), model.buffers(), host_buffers.size());
  return evaluate_test(config, test, host_params.data(), host_buffers.empty() ? nullptr : host_buffers.data());
}

namespace {

// Launchers of devices other than the CPU (which run_rank_contexts knows itself).
std::map<DeviceKind, RankLauncher>& launchers() {
  static std::map<DeviceKind, RankLauncher> table;
  return table;
}
std::mutex& launchers_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

void register_rank_launcher(DeviceKind device, RankLauncher launcher) {
  std::lock_guard<std::mutex> lock(launchers_mutex());
  launchers()[device] = launcher;
}

void run_rank_contexts(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body) {
  if (config.device == DeviceKind::cpu) return run_cpu_rank_contexts(config, ranks, body);
  RankLauncher launcher = nullptr;
  {
    std::lock_guard<std::mutex> lock(launchers_mutex());
    const auto it = launchers().find(config.device);
    if (it != launchers().end()) launcher = it->second;
  }
  if (launcher == nullptr) {
    throw InputError(fmt::format("--device {}: this build of dpbench cannot train on it", config.device));
  }
  launcher(config, ranks, body);
}

}  // namespace dpbench
