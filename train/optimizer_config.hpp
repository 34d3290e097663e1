// The optimizer's options (--optimizer, --lr, --momentum, --weight-decay, --betas, --eps),
// TrainConfig's `optimizer` section; the optimizer itself is train/optimizer.hpp. A leaf header
// (standard headers only), so that train/training.hpp can hold it.
#pragma once

#include <string>

namespace dpbench {

// Which optimizer a run steps with and its hyperparameters, torch.optim's names and defaults.
struct OptimizerConfig {
  std::string name = "sgd";  // "sgd", "adam" or "adamw"
  float lr = 0.1f;
  float momentum = 0.9f;      // sgd
  float weight_decay = 0.0f;  // sgd, adam: L2 added to the gradient; adamw: decoupled decay
  float beta1 = 0.9f;         // adam, adamw: --betas
  float beta2 = 0.999f;
  float eps = 1e-8f;  // adam, adamw
};

}  // namespace dpbench
