// DDP's worker, written once for every mode that keeps a full model replica on every rank
// (`allreduce`, `sharded_ps`): the DistributedSampler shard, rank 0's parameters broadcast before
// the first step, BatchNorm buffers from rank 0 every step (broadcast_buffers), forward and
// backward on the rank's own batch, and DDP's gradient buckets. What happens to the gradients
// is the derived mode's (start_grad_sync ... param_sync). PyTorch torch/nn/parallel/distributed.py
// and torch/csrc/distributed/c10d/reducer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "train/buckets.hpp"
#include "train/step_loop.hpp"
#include "workloads/distributed_sampler.hpp"

namespace dpbench {

// Throws InputError on a config a replica mode cannot run with this data: validate_config's
// checks, a global batch not divisible by the world size (without --rank-batch), bucket sizes
// that are not positive.
void validate_replicas(const TrainConfig& config, const Dataset& train);

// The sample indices a rank loads in `epoch` (steps_per_epoch `spe` batches of `local_batch`):
// DistributedSampler's shard after set_epoch(epoch), cut to whole steps; or, with
// config.rank_batches (uneven split), the rank's slice [offset_in_batch, + local_batch) of every
// global batch of the (seed + epoch) shuffle.
std::vector<std::int64_t> ddp_epoch_indices(const TrainConfig& config, const Dataset& train,
                                            DistributedSampler& sampler, int epoch, std::size_t offset_in_batch,
                                            std::size_t local_batch, long spe);

// Every rank's step losses `local` summed onto rank 0 (an all-reduce on device memory); only rank
// 0's return value holds the sums. What a mode whose ranks each compute part of the batch returns
// from global_losses.
std::vector<double> sum_losses_on_rank0(RankContext& ctx, const std::vector<double>& local);

// One rank's replica: flat parameters and gradients ([n] floats each, in the model's parameter
// order), the buckets over them, logits and their gradient for local_batch rows.
class ReplicaRank : public ModeRank {
 public:
  explicit ReplicaRank(const RankSetup& setup);

  Model& model() override { return *model_; }
  float* master_params() override { return params_.data(); }
  std::size_t rows() const override { return local_batch_; }
  std::size_t loaded_rows() const override { return local_batch_; }
  std::size_t loss_rows() const override { return local_batch_; }
  std::vector<std::int64_t> epoch_order(int epoch) override;
  const std::vector<Bucket>& buckets() const override { return buckets_; }

  // Every replica starts from rank 0's parameters (DDP's constructor).
  void start() override;
  // DDP's broadcast_buffers: rank 0's BatchNorm running statistics, every step.
  void replicate() override;
  // Forward and the loss of the rank's rows, its gradient scaled by 1 / global_batch (DDP's
  // division by world size when batches are equal), so the summed gradient is the global mean's.
  void forward(const StagedBatch& batch, long step, StepTimer& timer) override;
  void backward(const GradReadyFn& on_grad_ready) override;
  // Sums every rank's step losses onto rank 0 (an all-reduce).
  std::vector<double> global_losses(std::vector<double> local) override;

 protected:
  RankSetup s_;
  std::size_t local_batch_;
  std::size_t offset_in_batch_ = 0;  // uneven split: this rank's slice of every global batch
  std::size_t classes_;
  std::unique_ptr<Model> model_;
  std::size_t n_;  // parameters
  Array<float> params_, grads_, logits_, dlogits_;
  std::vector<Bucket> buckets_;

 private:
  DistributedSampler sampler_;
  const float* inputs_ = nullptr;  // this step's staged inputs, from forward to backward
};

}  // namespace dpbench
