// What a strategy needs to write one training step as messages (core/schedule.hpp): the run's
// configuration, the engine whose collective algorithms carry the messages, the gradient buckets
// in the order backward readies them, the sample and logit sizes, and each rank's compute phases
// (measured on an emulated run, or modelled for a projection). Each strategy's schedule lives in
// its folder, beside its trainer (ps/ps_strategy.cpp, ...), and is registered as its `schedule`
// trait (train/strategy.hpp).
#pragma once

#include <cstddef>
#include <string>
#include <functional>
#include <vector>

#include "core/schedule.hpp"
#include "train/training.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// Seconds one rank spends per step outside communication.
struct RankCompute {
  double data = 0;     // waiting for the DataLoader and staging the batch
  double forward = 0;  // forward with the loss
  double backward = 0;
  double optimizer = 0;
};

// DDP's buckets over `model`'s parameters in its gradient-ready order (config.allreduce's
// first_bucket_mb and bucket_cap_mb: torch/nn/parallel/distributed.py's bucketing), each ready
// when its last gradient is (the model's gradient-ready times, where it has them).
std::vector<ScheduleBucket> model_schedule_buckets(const Model& model, const TrainConfig& config);

struct ScheduleInputs {
  TrainConfig config;  // mode, transport, world_size, global_batch, rank_batches, sharded_ps.servers, ps.coalesce_mb
  Backend engine = Backend::gloo;       // whose collectives: local, mpi, gloo (core/schedule.hpp)
  std::size_t num_params = 0;           // floats
  std::vector<ScheduleBucket> buckets;  // in the order backward readies them
  std::size_t input_floats = 0;         // per sample
  std::size_t classes = 0;              // logits per sample
  std::vector<RankCompute> compute;     // [world_size]
  // Bytes a rank sent per step, the ranks' mean, as measured: --sparse-grad's schedules size the
  // messages that follow the data (the rows a batch touched) from it. 0: not measured.
  double measured_bytes_sent = 0;
  // > 0: DDP's all-reduce as NCCL's tree over nodes of this many ranks (Collectives::
  // tree_allreduce); 0: the engine's ring.
  int tree_ranks_per_node = 0;
  // What the host's reductions cost (core/reduction.hpp): each strategy's schedule sets it on its
  // StepSchedule, so that the collectives that sum (and the roots and servers of p2p pushes) pay
  // for their adds. Empty: the adds cost nothing.
  ReductionCost reduction;
};

// The schedule's compute of rank r's backward, cut at each bucket's ready point (its
// backward_share, else in proportion to its size), each cut followed by record(event of that bucket) on `stream`; returns the events.
std::vector<int> backward_with_bucket_events(StepSchedule& s, const ScheduleInputs& in, int rank, int stream);

// --sparse-grad (train/sparse_grad.hpp): the dense layers' floats (the parameters after the tables).
std::size_t sparse_dense_floats(const ScheduleInputs& in);
// The rows of the tables each rank exchanges with each other rank per step, on average, for a
// sparse schedule whose ranks send, besides the dense layers' all-reduce, `fixed` + rows x
// `per_row` bytes to each peer, to send in.measured_bytes_sent per rank. 0 when nothing was
// measured or the dense all-reduce alone sends as much.
double sparse_rows_per_peer(const ScheduleInputs& in, double fixed, double per_row);
// The rows per rank for which `messages(comm, rows)` (a sparse step's messages, affine in rows)
// sends in.measured_bytes_sent per rank on the ranks' mean; 0 when nothing was measured, the world
// is one rank or the rows send nothing.
double sparse_rows_from_bytes(const ScheduleInputs& in,
                              const std::function<void(Collectives& comm, double rows)>& messages);
// The sparse step's compute around its messages, on stream 0 of every rank: `before_forward` is
// data's phase (then the caller's pull), forward and backward; `after_backward` the optimizer.
void sparse_before_forward(StepSchedule& s, const ScheduleInputs& in);
void sparse_forward_backward(StepSchedule& s, const ScheduleInputs& in);
void sparse_optimizer(StepSchedule& s, const ScheduleInputs& in);

// A replica's step up to its gradients, as DDP runs it (and sharded_ps's collective push): on
// stream 0 of every rank its data, forward and backward, each bucket's ready event recorded;
// `done` is the event the communication stream (1) records when its last bucket is through.
struct BucketEvents {
  std::vector<int> ready;  // [buckets]
  int done = -1;
};
std::vector<BucketEvents> replica_forward_backward(StepSchedule& s, const ScheduleInputs& in);
// Then, on every rank: stream 1 records `done`, stream 0 waits for it and runs the optimizer.
void replica_optimizer_after_buckets(StepSchedule& s, const ScheduleInputs& in,
                                     const std::vector<BucketEvents>& events);

}  // namespace dpbench
