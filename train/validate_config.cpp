// A run configuration's checks, before any rank starts (train/training.hpp: check_common_options,
// validate_config, validate_node_hierarchy): each mistake is one InputError naming the option.
#include <algorithm>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "train/models.hpp"
#include "train/optimizer.hpp"
#include "train/training.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

namespace {

// The optimizer's hyperparameters: --lr, --momentum, --optimizer, --weight-decay, --betas, --eps.
void validate_optimizer(const OptimizerConfig& o) {
  if (!(o.lr > 0.0f)) throw InputError(fmt::format("--lr {}: must be positive", o.lr));
  if (o.momentum < 0.0f || o.momentum >= 1.0f) {
    throw InputError(fmt::format("--momentum {}: must be in [0, 1)", o.momentum));
  }
  optimizer_slots(o.name);  // throws on an unknown name
  if (!(o.weight_decay >= 0.0f)) {
    throw InputError(fmt::format("--weight-decay {}: must be >= 0", o.weight_decay));
  }
  if (!(o.beta1 >= 0.0f && o.beta1 < 1.0f && o.beta2 >= 0.0f && o.beta2 < 1.0f)) {
    throw InputError(fmt::format("--betas {},{}: each must be in [0, 1)", o.beta1, o.beta2));
  }
  if (!(o.eps >= 0.0f)) throw InputError(fmt::format("--eps {}: must be >= 0", o.eps));
}

// --staleness and --staleness-replay, whatever the mode (a run of another mode refuses them
// through sharded_ps's own_option_given).
void validate_staleness_values(const TrainConfig& config) {
  const ShardedPsConfig& sharded = config.sharded_ps;
  if (sharded.staleness < 0) throw InputError(fmt::format("--staleness {}: must be >= 0", sharded.staleness));
  if (sharded.staleness_replay >= 0 && sharded.staleness == 0) {
    throw InputError(fmt::format("--staleness-replay {}: replays a bounded-staleness run; give --staleness S > 0",
                                 sharded.staleness_replay));
  }
}

// --rank-batch: one positive entry per rank, summing to the global batch (without wrapping).
// --test-freq and --target-auc: InputError naming the option.
void check_test_freq(const TrainConfig& config) {
  const RunLength& run = config.run;
  if (run.test_freq < 0) {
    throw InputError(fmt::format("--test-freq {}: must be 0 (after the last step only) or positive", run.test_freq));
  }
  const bool replay = !config.model.described.empty();
  if (run.test_freq > 0 && (replay || !config.evaluate)) {
    throw InputError(replay ? "--test-freq: a replay (--model) trains no model to evaluate"
                            : "--test-freq: evaluates the test set; not with --no-eval");
  }
  if (run.target_auc == 0) return;
  if (!(run.target_auc > 0 && run.target_auc <= 1)) {
    throw InputError(fmt::format("--target-auc {}: must be in (0, 1]", run.target_auc));
  }
  if (replay || config.model.workload != "dlrm") {
    throw InputError("--target-auc: the test AUC exists for two-class workloads (--workload dlrm)");
  }
  if (run.test_freq == 0)
    throw InputError("--target-auc: needs --test-freq N (the test AUC is measured every N steps)");
}

void validate_rank_batches(const TrainConfig& config) {
  if (config.rank_batches.empty()) return;
  const std::string list = fmt::format("{}", fmt::join(config.rank_batches, ","));
  std::size_t sum = 0;  // checked: entries near 2^64 must not wrap around to the global batch
  for (std::size_t b : config.rank_batches) {
    if (b > std::numeric_limits<std::size_t>::max() - sum) {
      throw InputError(fmt::format("--rank-batch {}: sums to more than 2^64", list));
    }
    sum += b;
  }
  if (config.rank_batches.size() != static_cast<std::size_t>(config.world_size)) {
    throw InputError(
        fmt::format("--rank-batch {}: {} entries for --ranks {}", list, config.rank_batches.size(), config.world_size));
  }
  if (std::find(config.rank_batches.begin(), config.rank_batches.end(), 0u) != config.rank_batches.end()) {
    throw InputError(fmt::format("--rank-batch {}: every rank needs at least one sample", list));
  }
  if (sum != config.global_batch) {
    throw InputError(
        fmt::format("--rank-batch {}: sums to {}, but the global batch is {}", list, sum, config.global_batch));
  }
}

}  // namespace

void validate_config(const TrainConfig& config, const Dataset& train) {
  if (config.world_size < 1) {
    throw InputError(fmt::format("--ranks {}: must be at least 1", config.world_size));
  }
  if (config.global_batch < 1) throw InputError("--batch-size 0: must be at least 1");
  if (static_cast<std::int64_t>(config.world_size) > train.size()) {
    throw InputError(fmt::format("--ranks {}: more ranks than the {} training samples of {}", config.world_size,
                                 train.size(), train.name()));
  }
  if (static_cast<std::int64_t>(config.global_batch) > train.size()) {
    throw InputError(fmt::format("--batch-size {}: larger than the {} training samples of {}", config.global_batch,
                                 train.size(), train.name()));
  }
  if (config.run.epochs < 1) throw InputError(fmt::format("--epochs {}: must be at least 1", config.run.epochs));
  validate_optimizer(config.optimizer);
  if (config.run.warmup_steps < 0) {
    throw InputError(fmt::format("--warmup-steps {}: must be >= 0", config.run.warmup_steps));
  }
  validate_staleness_values(config);
  validate_rank_batches(config);
}

CommHook parse_comm_hook(std::string_view text, std::string_view option) {
  if (const std::optional<CommHook> hook = comm_hook_from(text)) return *hook;
  throw InputError(fmt::format("{} {}: unknown hook (choose allreduce, fp16, bf16 or powersgd:R, R a positive "
                               "integer: PowerSGD's matrix_approximation_rank)",
                               option, text));
}

void validate_node_hierarchy(const TrainConfig& config) {
  if (config.hierarchy != Hierarchy::node) return;
  if (config.device != DeviceKind::cpu) {
    throw InputError(
        fmt::format("--hierarchy node: adds on the host; run it with --device cpu, not {}", config.device));
  }
  const int k = hierarchy_ranks_per_node(config);
  if (k < 1 || config.world_size % k != 0) {
    throw InputError(
        fmt::format("--hierarchy node: {} ranks do not make nodes of {} ranks each", config.world_size, k));
  }
}

void check_common_options(const TrainConfig& config, double timeout_s) {
  if (config.world_size < 1) throw InputError(fmt::format("--ranks {}: must be at least 1", config.world_size));
  if (config.global_batch < 1) throw InputError("--batch-size 0: must be at least 1");
  if (config.loader.num_workers < 0) {
    throw InputError(fmt::format("--num-workers {}: must be >= 0", config.loader.num_workers));
  }
  if (config.loader.prefetch_factor < 1) {
    throw InputError(fmt::format("--prefetch-factor {}: must be >= 1", config.loader.prefetch_factor));
  }
  if (config.run.max_steps == 0 || config.run.max_steps < -1) {
    throw InputError(fmt::format("--max-steps {}: must be -1 (no cap) or at least 1", config.run.max_steps));
  }
  // Bounded so that the milliseconds the run converts it to fit (1e300 was undefined behaviour).
  constexpr double kMaxTimeoutS = 1e9;
  if (!(timeout_s > 0) || timeout_s > kMaxTimeoutS) {
    throw InputError(fmt::format("--timeout {}: must be positive and at most {:g} s", timeout_s, kMaxTimeoutS));
  }
  check_test_freq(config);
  if (config.model.workload == "dlrm" && config.model.described.empty()) {
    check_dlrm_shape(config.model.dlrm);
  } else if (config.model.described.empty()) {
    make_model(config, SampleShape{1, 4, 4}, 2);  // unknown workload / bad widths
  } else {
    described_model(config.model.described);  // an unknown name, a bad file
  }
  if (config.model.sync_bn && config.model.workload != "cnn") {
    throw InputError(fmt::format("--sync-bn: the {} has no BatchNorm layer (SyncBatchNorm applies to --workload cnn)",
                                 config.model.workload));
  }
}

}  // namespace dpbench
