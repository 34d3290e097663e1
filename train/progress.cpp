#include "train/progress.hpp"

namespace dpbench {

ProgressMeter::ProgressMeter(const TrainConfig& config, long total_steps, std::size_t loss_rows)
    : config_(config), total_(total_steps), loss_rows_(static_cast<double>(loss_rows)) {}

void ProgressMeter::step_done(RankContext& ctx, int epoch, long step) {
  if (!config_.progress || ctx.rank() != 0) return;
  const long done = step + 1;
  const Clock::time_point now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_time_).count();
  if (elapsed < config_.progress_interval_s && done < total_) return;
  const std::vector<double> losses = ctx.step_losses(done);
  double sum = 0;
  for (long s = last_step_; s < done; ++s) sum += losses[static_cast<std::size_t>(s)];
  const long steps = done - last_step_;
  Progress p;
  p.epoch = epoch;
  p.epochs = config_.run.epochs;
  p.step = done;
  p.total_steps = total_;
  p.loss = steps > 0 && loss_rows_ > 0 ? sum / static_cast<double>(steps) / loss_rows_ : 0.0;
  const double steps_per_s = elapsed > 0 ? static_cast<double>(steps) / elapsed : 0.0;
  p.samples_per_s = steps_per_s * static_cast<double>(config_.global_batch);
  p.eta_s = steps_per_s > 0 ? static_cast<double>(total_ - done) / steps_per_s : 0.0;
  last_time_ = now;
  last_step_ = done;
  config_.progress(p);
}

}  // namespace dpbench
