// The optimizer one rank runs over the flat parameter range it updates, written once for every
// strategy and device: SGD with momentum (torch/optim/sgd.py), Adam (torch/optim/adam.py;
// Kingma & Ba 2015) or AdamW (torch/optim/adamw.py; Loshchilov & Hutter 2019), with PyTorch's
// semantics. `ps` runs one on the root over all parameters, `allreduce` one per replica,
// `sharded_ps` one per server over its range. Its state lives in rank-device memory, charged to
// MemoryCategory::optimizer_state: SGD's momentum buffer, or Adam's exp_avg and exp_avg_sq.
// Which optimizer and its hyperparameters: TrainConfig's `optimizer` section (OptimizerConfig,
// train/optimizer_config.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "train/checkpoint.hpp"
#include "train/optimizer_config.hpp"
#include "train/rank_context.hpp"
#include "train/training.hpp"

namespace dpbench {

// State arrays per parameter of optimizer `name`: 1 for "sgd" (momentum_buffer), 2 for "adam"
// and "adamw" (exp_avg, exp_avg_sq). Throws InputError naming --optimizer on an unknown name.
int optimizer_slots(const std::string& name);

class Optimizer {
 public:
  // The optimizer of config.optimizer.name over `count` parameters starting at flat index `offset`
  // (count 0: a rank that updates nothing). The context must outlive it.
  Optimizer(RankContext& ctx, const TrainConfig& config, std::size_t offset, std::size_t count);

  // One step over the range: params [count] -= update(grads [count]), both rank-device pointers
  // to the range's first element; enqueued on the compute stream. Counts the step (Adam's bias
  // correction uses the step number).
  void step(float* params, const float* grads);

  // The state for checkpoints: slots() arrays of count floats, contiguous.
  OptimizerShard shard();

  // After a resume from a checkpoint of `steps_done` steps: the next step is steps_done + 1.
  void resume_at(long steps_done) { steps_ = steps_done; }

  std::size_t count() const { return count_; }

 private:
  RankContext& ctx_;
  const TrainConfig& config_;
  std::size_t offset_;
  std::size_t count_;
  int slots_;
  Array<float> state_;  // [slots_ * count_]
  long steps_ = 0;      // steps taken (or resumed)
};

}  // namespace dpbench
