#include "train/cpu_context.hpp"

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <new>

#include "train/models.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/dataloader.hpp"

namespace dpbench {

namespace {

// An event on a stream whose work is complete when it is enqueued: reached when recorded.
// Waiting threads (a communication thread) block until the record() they follow.
class CpuEvent final : public Event {
 public:
  void record() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      reached_ = ++recorded_;
    }
    cv_.notify_all();
  }
  void host_wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return reached_ == recorded_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t recorded_ = 0, reached_ = 0;
};

class CpuStepTimer final : public StepTimer {
 protected:
  void record(Mark m) override {
    if (m >= marks_.size()) marks_.resize(m + 1);
    marks_[m] = std::chrono::steady_clock::now();
  }
  void wait(Mark) override {}
  double elapsed(Mark a, Mark b) const override {
    return std::chrono::duration<double>(marks_.at(b) - marks_.at(a)).count();
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> marks_;
};

// The loader's batch is already host memory: used in place.
class CpuStaging final : public BatchStaging {
 public:
  explicit CpuStaging(std::size_t max_rows) : max_rows_(max_rows) {}
  StagedBatch stage(const Batch& batch, std::size_t rows) override {
    check_rows(batch, rows, max_rows_);
    return {batch.inputs.data(), batch.labels.data()};
  }

 private:
  std::size_t max_rows_;
};

class CpuRankContext final : public RankContext {
 public:
  CpuRankContext(int rank, Communicator& comm, MemoryTracker& tracker) : RankContext(rank, comm, tracker, tracker) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    void* p = ::operator new[](bytes, std::align_val_t{64});
    std::memset(p, 0, bytes);
    tracker().on_alloc(category, bytes);
    return p;
  }
  void release(void* ptr, std::size_t bytes, MemoryCategory category) noexcept override {
    tracker().on_free(category, bytes);
    ::operator delete[](ptr, std::align_val_t{64});
  }

  std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes,
                                    std::size_t max_batch) override {
    auto model = dpbench::make_model(config, shape, num_classes);
    model->reserve(max_batch, tracker());
    return model;
  }

  void sgd_momentum(float* params, const float* grads, float* velocity, std::size_t n, float lr, float momentum,
                    float weight_decay) override {
    cpu::sgd_momentum(params, grads, velocity, n, lr, momentum, weight_decay);
  }
  void adam(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
            const cpu::AdamScalars& scalars) override {
    cpu::adam(params, grads, exp_avg, exp_avg_sq, n, scalars);
  }
  void add_inplace(float* dst, const float* src, std::size_t n) override { cpu::add_inplace(dst, src, n); }
  void copy(float* dst, const float* src, std::size_t n) override {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));
  }
  void fill_zero(float* dst, std::size_t n) override {
    if (n > 0) std::memset(dst, 0, n * sizeof(float));
  }
  void cross_entropy(const float* logits, const std::int32_t* labels, std::size_t rows, std::size_t classes,
                     float* dlogits, float scale, long step) override {
    const double loss = cpu::softmax_cross_entropy(logits, labels, rows, classes, dlogits, scale);
    const auto s = static_cast<std::size_t>(step);
    if (s >= losses_.size()) losses_.resize(s + 1, 0.0);
    losses_[s] += loss;
  }
  std::vector<double> step_losses(long steps) override { return first_steps(losses_, steps); }

  void upload(float* dst, const float* host_src, std::size_t n) override { copy(dst, host_src, n); }
  void download(float* host_dst, const float* src, std::size_t n) override { copy(host_dst, src, n); }
  void synchronize() override {}

  std::unique_ptr<BatchStaging> make_staging(std::size_t max_rows, std::size_t, bool) override {
    return std::make_unique<CpuStaging>(max_rows);
  }
  std::unique_ptr<StepTimer> make_step_timer() override { return std::make_unique<CpuStepTimer>(); }
  std::unique_ptr<Event> make_event() override { return std::make_unique<CpuEvent>(); }
  void comm_stream_wait(Event&) override {}
  void compute_wait_comm() override { comm().wait_all(); }

 private:
  std::vector<double> losses_;  // per step, in double (as the CPU loss is summed)
};

}  // namespace

void run_cpu_rank_contexts(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body) {
  run_ranks(config, ranks, [&](int rank, Communicator& comm, MemoryTracker& tracker) {
    CpuRankContext ctx(rank, comm, tracker);
    body(ctx);
  });
}

}  // namespace dpbench
