// DDP's worker loop, written once for every strategy that keeps a full model replica on every
// rank (`allreduce`, `sharded_ps`): the sampler shard, the initial broadcast, BatchNorm buffers
// from rank 0, forward, backward with DDP's buckets, and the phase timings; what happens to the
// gradients is the strategy's ReplicaSync. PyTorch torch/nn/parallel/distributed.py and
// torch/csrc/distributed/c10d/reducer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/comm_stream.hpp"
#include "train/buckets.hpp"
#include "train/checkpoint.hpp"
#include "train/optimizer.hpp"
#include "train/rank_context.hpp"
#include "train/training.hpp"
#include "workloads/distributed_sampler.hpp"

namespace dpbench {

// Throws InputError on a config a replica strategy cannot run with this data: validate_config's
// checks, a global batch not divisible by the world size (without --rank-batch), bucket sizes
// that are not positive.
void validate_replicas(const TrainConfig& config, const Dataset& train);

// The sample indices a rank loads in `epoch` (steps_per_epoch `spe` batches of `local_batch`):
// DistributedSampler's shard after set_epoch(epoch), cut to whole steps; or, with
// config.rank_batches (uneven split), the rank's slice [offset_in_batch, + local_batch) of every
// global batch of the (seed + epoch) shuffle.
std::vector<std::int64_t> ddp_epoch_indices(const TrainConfig& config, const Dataset& train,
                                            DistributedSampler& sampler, int epoch,
                                            std::size_t offset_in_batch, std::size_t local_batch, long spe);

// What a strategy with a full model replica on every rank does with each step's gradients:
// DDP's bucketed all-reduce and local optimizer step (allreduce/), or the sharded parameter
// server's push, server step and pull (sharded_ps/). The worker loop around it is DDP's and is
// written once (train_replicas, below). Calls come from the rank's thread, in this order every step:
// bucket_ready for every bucket (during backward, in bucket order; progress() between them),
// join(), step(), pull() when pulls(), finish_step().
class ReplicaSync {
 public:
  virtual ~ReplicaSync() = default;
  // Bucket b's gradients have been enqueued on the compute stream: start communicating them.
  virtual void bucket_ready(std::size_t bucket) = 0;
  // Lets started nonblocking operations advance.
  virtual void progress() {}
  // True when bucket_ready starts communication during backward; false when everything
  // happens from join() on (then nothing overlaps backward).
  virtual bool overlaps_backward() const = 0;
  // Before the optimizer: the compute stream waits for the gradients this rank steps on.
  virtual void join() = 0;
  // The optimizer step on the parameters this rank updates.
  virtual void step() = 0;
  // True when pull() communicates: the parameters updated elsewhere come back after step().
  virtual bool pulls() const { return false; }
  virtual void pull() {}
  // After the step's compute has used the buffers: completes the backend's bookkeeping.
  virtual void finish_step() = 0;
  // The communication thread, for collectives that must run in order with the buckets
  // (SyncBatchNorm); null when the backend orders its own operations.
  virtual CommStream* thread() = 0;
  // The optimizer this rank steps with (its state goes into checkpoints, train/checkpoint.hpp).
  virtual Optimizer& optimizer() = 0;
  // Ranks 0..checkpoint_writers()-1 write a checkpoint file each: rank 0 alone when every rank's
  // optimizer state is a copy of rank 0's; each server its shard when the state is partitioned.
  virtual int checkpoint_writers() const { return 1; }
};

// What a ReplicaSync is built from on one rank: the flat parameters and gradients ([n] floats
// each, in the model's parameter order) and the buckets over them. All outlive the sync.
struct ReplicaState {
  const TrainConfig& config;
  RankContext& ctx;
  float* params;
  float* grads;
  std::size_t n;
  const std::vector<Bucket>& buckets;
};
using MakeReplicaSync = std::function<std::unique_ptr<ReplicaSync>(const ReplicaState&)>;

// DDP's worker loop with `make_sync`'s gradient handling: every rank reads its
// DistributedSampler shard, starts from rank 0's parameters, broadcasts BatchNorm buffers from
// rank 0 every step, and runs forward, backward (buckets as DDP assigns them), then the sync.
// The config must have passed the strategy's validation. Throws Error if a rank fails.
RunResult train_replicas(const TrainConfig& config, const TrainData& data, const MakeReplicaSync& make_sync);


}  // namespace dpbench
