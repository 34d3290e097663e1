// The `allreduce` mode: DistributedDataParallel semantics (PyTorch torch/nn/parallel/
// distributed.py and torch/csrc/distributed/c10d/reducer.cpp). Every rank holds a full replica
// and its own optimizer state, reads its own shard through DistributedSampler, and all-reduces
// gradient buckets on its communication stream as soon as each bucket's gradients are ready,
// overlapping the rest of backward. Gradients are scaled by local_batch / global_batch before
// the sum (DDP's division by world size when batches are equal), so every rank applies the
// gradient of the mean loss over the global batch, then the same SGD step.
#pragma once

#include "train/replica_rank.hpp"
#include "train/step_schedule.hpp"
#include "train/strategy.hpp"
#include "train/training.hpp"

namespace dpbench {

// Throws InputError on a config this mode cannot run with this data: validate_replicas.
void validate_allreduce(const TrainConfig& config, const Dataset& train);

// Trains on config.device (every device a launcher is registered for, train/rank_context.hpp).
// Throws as validate_allreduce does, and Error if a rank fails.
RunResult train_allreduce(const TrainConfig& config, const TrainData& data);

// The collectives of an allreduce step (Strategy::probed_collectives): the all-reduce; with
// --sparse-grad also kSparseProbeRounds / 2 all-gathers (the rows').
std::vector<CollectiveKind> allreduce_probed_collectives(const TrainConfig& config);

// DDP's buckets over the model's parameters in its gradient-ready order (config's bucket caps) as a step schedule takes them
// (train/step_schedule.hpp), each with PowerSGD's three all-reduces under --comm-hook powersgd:R.
std::vector<ScheduleBucket> ddp_schedule_buckets(const Model& model, const TrainConfig& config);

// The strategy's registry entry: trainer and traits (allreduce/allreduce_strategy.cpp).
const Strategy& allreduce_strategy();

}  // namespace dpbench
