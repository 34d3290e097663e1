#include "train/grad_bucket_sync.hpp"

namespace dpbench {

GradBucketSync::GradBucketSync(RankContext& ctx, std::size_t num_buckets)
    : ctx_(ctx), native_async_(ctx.comm().supports_async()) {
  ready_.reserve(num_buckets);
  for (std::size_t b = 0; b < num_buckets; ++b) ready_.push_back(ctx.make_event());
  if (!native_async_) {
    thread_.emplace();
    thread_->enqueue([&ctx] { ctx.bind_thread(); });
  }
}

GradBucketSync::~GradBucketSync() {
  // Nothing queued may outlive the buckets' events; errors were reported by join() already.
  if (thread_) {
    try {
      thread_->synchronize();
    } catch (const std::exception&) {
    }
  }
}

void GradBucketSync::start(std::size_t bucket, float* grads, std::size_t n) {
  start(bucket, [grads, n](Communicator& comm, bool nonblocking) {
    if (nonblocking) {
      comm.allreduce_sum_start(grads, n);
    } else {
      comm.allreduce_sum(grads, n);
    }
  });
}

void GradBucketSync::start(std::size_t bucket, BucketOp op) {
  Event& ready = *ready_.at(bucket);
  ready.record();
  Communicator& comm = ctx_.comm();
  if (native_async_) {
    ctx_.comm_stream_wait(ready);
    op(comm, true);
  } else {
    thread_->enqueue([&ready, &comm, op = std::move(op)] {
      ready.host_wait();
      op(comm, false);
    });
  }
}

void GradBucketSync::progress() {
  if (native_async_) ctx_.comm().progress();
}

void GradBucketSync::join() {
  // The thread's collectives are blocking host calls: complete when it is drained. The compute
  // stream still waits for the communicator's stream (GPU ranks on the local backend copy on a
  // stream of their own), as it does for the nonblocking backends.
  if (thread_) thread_->synchronize();
  ctx_.compute_wait_comm();
}

void GradBucketSync::finish_step() {
  if (native_async_) ctx_.comm().wait_all();
}

}  // namespace dpbench
