// GradBucketSync: what happens to a gradient bucket once it is ready (train/buckets.hpp), the
// role PyTorch DDP's `Reducer` (torch/csrc/distributed/c10d/reducer.cpp) plays for a bucket's
// communication: a communication hook
// (PyTorch torch/csrc/distributed/c10d/default_comm_hooks.cpp; the all-reduce of
// AllReduceCommHook by default, the sharded parameter server's reduce-scatter otherwise), started as soon as the bucket's gradients have been written and joined
// before the optimizer reads them. Written once for every device over the rank's context:
//   - backends with nonblocking collectives (MPI_Iallreduce; ncclAllReduce on NCCL's stream):
//     the communicator's stream waits for the bucket's event, then the all-reduce is started;
//     join() makes the compute stream wait for all of them;
//   - blocking backends (local): a communication thread with an in-order queue waits for the
//     bucket's event on the host, then runs the all-reduce; join() waits for the queue.
// Not for: which parameters form a bucket, or when one is ready (train/buckets.hpp).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "core/comm_stream.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

class GradBucketSync {
 public:
  // ctx: the rank's context, which must outlive this object; num_buckets: the buckets of one
  // backward (each gets its readiness event).
  GradBucketSync(RankContext& ctx, std::size_t num_buckets);
  ~GradBucketSync();
  GradBucketSync(const GradBucketSync&) = delete;
  GradBucketSync& operator=(const GradBucketSync&) = delete;

  // Bucket b's gradients grads[0, n) have been enqueued on the compute stream: start their
  // in-place sum over all ranks once they are written. Buckets start in bucket order.
  void start(std::size_t bucket, float* grads, std::size_t n);
  // The same for any collective: op(comm, nonblocking) starts it (nonblocking: the backend's
  // *_start form, completed by wait_all()) or runs it (blocking, on the communication thread).
  using BucketOp = std::function<void(Communicator& comm, bool nonblocking)>;
  void start(std::size_t bucket, BucketOp op);
  // Lets started nonblocking operations advance (MPI progresses only inside library calls).
  void progress();
  // The compute stream waits until every started bucket is reduced (the host may wait too).
  void join();
  // After the step's compute has used the buckets: completes the backend's bookkeeping of the
  // started operations and reports their asynchronous errors (NCCL).
  void finish_step();

  // The communication thread, for collectives that must run in order with the buckets
  // (SyncBatchNorm); null when the backend orders its own operations.
  CommStream* thread() { return thread_ ? &*thread_ : nullptr; }

 private:
  RankContext& ctx_;
  bool native_async_;
  std::vector<std::unique_ptr<Event>> ready_;
  std::optional<CommStream> thread_;
};

}  // namespace dpbench
