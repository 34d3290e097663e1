// SyncBatchNorm's collectives in the allreduce mode (CPU and GPU trainers): a BatchNormSync over
// the rank's communicator, blocking, and in order with the gradient buckets. When the buckets
// run on a communication thread (CommStream) the collective is queued behind them there and
// waited for; otherwise (MPI, NCCL: the backend orders its own operations) it runs directly.
// Pointers are whatever the communicator moves: host memory on CPU, device memory on GPUs.
#pragma once

#include <cstddef>
#include <functional>

#include "core/comm.hpp"
#include "core/comm_stream.hpp"
#include "workloads/model.hpp"

namespace dpbench {

class CommBatchNormSync final : public BatchNormSync {
 public:
  // stream: the rank's communication thread, or null when collectives run on this thread.
  CommBatchNormSync(Communicator& comm, CommStream* stream) : comm_(comm), stream_(stream) {}
  int world_size() const override { return comm_.world_size(); }
  void allgather(const float* send, float* recv, std::size_t n) override {
    run([&] { comm_.allgather(send, recv, n); });
  }
  void allreduce_sum(float* buf, std::size_t n) override {
    run([&] { comm_.allreduce_sum(buf, n); });
  }

 private:
  void run(const std::function<void()>& op) {
    if (stream_ == nullptr) return op();
    stream_->enqueue(op);
    stream_->synchronize();
  }
  Communicator& comm_;
  CommStream* stream_;
};

}  // namespace dpbench
