#include "train/optimizer.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/cpu_kernels.hpp"

namespace dpbench {

int optimizer_slots(const std::string& name) {
  if (name == "sgd") return 1;
  if (name == "adam" || name == "adamw") return 2;
  throw InputError(fmt::format("--optimizer {}: unknown (choose sgd, adam or adamw)", name));
}

Optimizer::Optimizer(RankContext& ctx, const TrainConfig& config, std::size_t offset, std::size_t count)
    : ctx_(ctx),
      config_(config),
      offset_(offset),
      count_(count),
      slots_(optimizer_slots(config.optimizer.name)),
      state_(ctx, MemoryCategory::optimizer_state, static_cast<std::size_t>(slots_) * count) {}

void Optimizer::step(float* params, const float* grads) {
  ++steps_;
  if (count_ == 0) return;
  const OptimizerConfig& o = config_.optimizer;
  if (slots_ == 1) {
    ctx_.sgd_momentum(params, grads, state_.data(), count_, o.lr, o.momentum, o.weight_decay);
    return;
  }
  const cpu::AdamScalars s = cpu::adam_scalars(o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, steps_,
                                               o.name == "adamw");
  ctx_.adam(params, grads, state_.data(), state_.data() + count_, count_, s);
}

OptimizerShard Optimizer::shard() { return {state_.data(), offset_, count_, slots_}; }

}  // namespace dpbench
