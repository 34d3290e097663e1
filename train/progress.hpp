// Rank 0's progress reports while a run trains: at most one per TrainConfig::progress_interval_s
// and one after the last step, each with the loss and the throughput since the previous report.
// Reading the loss waits for the compute stream (RankContext::step_losses), so reports are
// rare; with no TrainConfig::progress nothing is read or timed.
#pragma once

#include <chrono>
#include <cstddef>

#include "train/rank_context.hpp"
#include "train/training.hpp"

namespace dpbench {

class ProgressMeter {
 public:
  // loss_rows: the samples rank 0's recorded step loss sums over (its local batch, or the global
  // batch where rank 0 computes the loss for everyone, as the ps root does).
  ProgressMeter(const TrainConfig& config, long total_steps, std::size_t loss_rows);
  // After step `step` (0-based) of `epoch` on rank 0; a no-op on other ranks or without a callback.
  void step_done(RankContext& ctx, int epoch, long step);
  // A run resumed from a checkpoint (train/checkpoint.hpp) starts counting at `steps_done`.
  void resume_at(long steps_done) { last_step_ = steps_done; }

 private:
  using Clock = std::chrono::steady_clock;
  const TrainConfig& config_;
  long total_;
  double loss_rows_;
  Clock::time_point last_time_ = Clock::now();
  long last_step_ = 0;  // steps done at the previous report
};

}  // namespace dpbench
