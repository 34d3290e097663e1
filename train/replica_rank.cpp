#include "train/replica_rank.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "train/models.hpp"

namespace dpbench {

void validate_replicas(const TrainConfig& config, const Dataset& train) {
  validate_config(config, train);
  if (config.rank_batches.empty() && config.global_batch % static_cast<std::size_t>(config.world_size) != 0) {
    throw InputError(fmt::format("--batch-size {}: not divisible by --ranks {} ({} mode gives every rank "
                                 "global_batch / world_size samples)",
                                 config.global_batch, config.world_size, config.mode));
  }
  if (!(config.allreduce.bucket_cap_mb > 0)) {
    throw InputError(fmt::format("--bucket-cap-mb {}: must be positive", config.allreduce.bucket_cap_mb));
  }
  if (!(config.allreduce.first_bucket_mb > 0)) {
    throw InputError(fmt::format("--first-bucket-mb {}: must be positive", config.allreduce.first_bucket_mb));
  }
}

std::vector<std::int64_t> ddp_epoch_indices(const TrainConfig& config, const Dataset& train,
                                            DistributedSampler& sampler, int epoch, std::size_t offset_in_batch,
                                            std::size_t local_batch, long spe) {
  if (config.rank_batches.empty()) {
    sampler.set_epoch(epoch);
    std::vector<std::int64_t> indices = sampler.indices();
    indices.resize(static_cast<std::size_t>(spe) * local_batch);
    return indices;
  }
  // Uneven split: the data is partitioned in proportion to the rank batches, rank r taking its
  // slice of every global batch, so the ranks together see the 1-rank run's batches.
  return proportional_shard(shuffled_indices(train.size(), config.seed + static_cast<std::uint64_t>(epoch)),
                            config.global_batch, offset_in_batch, local_batch, spe);
}

namespace {
// Every rank's batch: even, or the uneven split of --rank-batch.
std::vector<std::size_t> rank_batches(const TrainConfig& config) {
  const auto p = static_cast<std::size_t>(config.world_size);
  return config.rank_batches.empty() ? std::vector<std::size_t>(p, config.global_batch / p) : config.rank_batches;
}
}  // namespace

ReplicaRank::ReplicaRank(const RankSetup& s)
    : s_(s),
      local_batch_(rank_batches(s.config)[static_cast<std::size_t>(s.ctx.rank())]),
      classes_(static_cast<std::size_t>(s.train.num_classes())),
      model_(s.ctx.make_model(s.config, s.train.shape(), classes_, local_batch_)),
      n_(model_->num_params()),
      params_(s.ctx, MemoryCategory::parameters, n_),
      grads_(s.ctx, MemoryCategory::gradients, n_),
      logits_(s.ctx, MemoryCategory::activations, local_batch_ * classes_),
      dlogits_(s.ctx, MemoryCategory::activations, local_batch_ * classes_),
      buckets_(assign_buckets(model_->params(), sizeof(float), s.config.allreduce.first_bucket_mb,
                              s.config.allreduce.bucket_cap_mb, model_->grad_ready_order())),
      sampler_(s.train.size(), s.config.world_size, s.ctx.rank(), /*shuffle=*/true, s.config.seed) {
  const std::vector<std::size_t> batches = rank_batches(s.config);
  for (int r = 0; r < s.ctx.rank(); ++r) offset_in_batch_ += batches[static_cast<std::size_t>(r)];
  if (s.ctx.rank() == 0) {  // initialised on rank 0, broadcast by start()
    const std::vector<float> initial = initial_parameters(*model_, s.config);
    s.ctx.upload(params_.data(), initial.data(), n_);
  }
}

std::vector<std::int64_t> ReplicaRank::epoch_order(int epoch) {
  return ddp_epoch_indices(s_.config, s_.train, sampler_, epoch, offset_in_batch_, local_batch_, s_.steps_per_epoch);
}

void ReplicaRank::start() { s_.ctx.comm().broadcast(params_.data(), n_, 0); }

void ReplicaRank::replicate() {
  // Blocking, so exposed in full; the previous step's compute has finished.
  if (model_->num_buffers() > 0) s_.ctx.comm().broadcast(model_->buffers(), model_->num_buffers(), 0);
}

void ReplicaRank::forward(const StagedBatch& batch, long step, StepTimer&) {
  inputs_ = batch.inputs;
  model_->forward(params_.data(), inputs_, local_batch_, logits_.data());
  s_.ctx.cross_entropy(logits_.data(), batch.labels, local_batch_, classes_, dlogits_.data(),
                       1.0f / static_cast<float>(s_.config.global_batch), step);
}

void ReplicaRank::backward(const GradReadyFn& on_grad_ready) {
  model_->backward(params_.data(), inputs_, dlogits_.data(), local_batch_, grads_.data(), on_grad_ready);
}

std::vector<double> ReplicaRank::global_losses(std::vector<double> local) { return sum_losses_on_rank0(s_.ctx, local); }

std::vector<double> sum_losses_on_rank0(RankContext& ctx, const std::vector<double>& local) {
  Array<float> losses(ctx, MemoryCategory::activations, std::max<std::size_t>(1, local.size()));
  const std::vector<float> host_sums(local.begin(), local.end());
  ctx.upload(losses.data(), host_sums.data(), host_sums.size());
  ctx.comm().allreduce_sum(losses.data(), host_sums.size());
  std::vector<float> sums(host_sums.size());
  if (ctx.rank() == 0) ctx.download(sums.data(), losses.data(), sums.size());
  return {sums.begin(), sums.end()};
}

}  // namespace dpbench
