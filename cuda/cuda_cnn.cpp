// The cnn workload as a CudaModel: workloads/cnn.cpp's forward and backward, step for step, on
// the launchers of cuda/cuda_cnn_kernels.hpp and cuda/cuda_kernels.hpp. Parameter views,
// initialisation and InputError checks come from a CPU Cnn built alongside (it allocates nothing).
// Plain C++: no CUDA header, so every build compiles it; without CUDA the launchers throw.
// Not for: speed beyond what the launchers give (no fused kernels, no cuDNN).
//
// Host round trips happen only where the CPU model has host arithmetic the kernels do not
// cover: evaluation mode (invstd from running_var) and SyncBatchNorm across more than one rank
// (SyncBatchNorm's float exchange format, computed from the double sums exactly as on the CPU).
// Each one records an event on the compute stream and waits for it.
#include "cuda/cuda_cnn.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "cuda/cuda_runtime.hpp"
#include "core/error.hpp"
#include "workloads/cnn.hpp"
#include "cuda/cuda_cnn_kernels.hpp"

namespace dpbench {

namespace {

class CudaCnn final : public CudaModel {
 public:
  using CudaModel::reserve;
  // cpu: the CPU Cnn of the same shapes (views, block layouts, initialisation); c1, c2, hidden,
  // classes as its.
  CudaCnn(std::unique_ptr<Cnn> cpu, SampleShape shape, std::size_t c1, std::size_t c2,
          std::size_t hidden, std::size_t classes, cuda::Blas& blas)
      : cpu_(std::move(cpu)), shape_(shape), c1_(c1), c2_(c2), hidden_(hidden),
        classes_(classes), flat_(c2 * (static_cast<std::size_t>(shape.height) / 4) *
                                 (static_cast<std::size_t>(shape.width) / 4)),
        blas_(&blas) {
    static_cast<Cnn::BlockLayout&>(b1_) = cpu_->block_layout(0);
    static_cast<Cnn::BlockLayout&>(b2_) = cpu_->block_layout(1);
  }

  std::string name() const override { return "cnn"; }
  const std::vector<ParamView>& params() const override { return cpu_->params(); }
  std::size_t num_params() const override { return cpu_->num_params(); }
  std::size_t input_features() const override { return shape_.features(); }
  std::size_t num_classes() const override { return classes_; }
  std::size_t num_buffers() const override { return 2 * (c1_ + c2_); }
  float* buffers() override { return buffers_.data(); }
  void set_training(bool training) override { training_ = training; }
  void set_batchnorm_sync(BatchNormSync* sync) override { sync_ = sync; }

  void init_params(float* host_params, std::uint64_t seed) const override {
    cpu_->init_params(host_params, seed);
  }

  void reserve(std::size_t n, DeviceAllocator& allocator) override {
    void* stream = blas_->stream();
    const auto act = MemoryCategory::activations;
    // Zeroed on the compute stream, so ordered before every later kernel of this model.
    auto floats = [&](std::size_t count) {
      return DeviceBuffer<float>(allocator, act, count, stream);
    };
    for (Block* b : {&b1_, &b2_}) {
      const std::size_t out = n * b->conv.K * b->conv.P() * b->conv.Q();
      b->z = floats(out);
      b->y = floats(out);
      b->pooled = floats(out / 4);
      b->argmax = DeviceBuffer<std::int32_t>(allocator, act, out / 4, stream);
      b->mean = floats(b->conv.K);
      b->invstd = floats(b->conv.K);
    }
    if (buffers_.size() != num_buffers()) {
      buffers_ = DeviceBuffer<float>(allocator, MemoryCategory::parameters, num_buffers(), stream);
      // bn1.running_mean 0, bn1.running_var 1, bn2.running_mean 0, bn2.running_var 1.
      host_f_.assign(num_buffers(), 0.0f);
      std::fill(host_f_.begin() + c1_, host_f_.begin() + 2 * c1_, 1.0f);
      std::fill(host_f_.begin() + 2 * c1_ + c2_, host_f_.end(), 1.0f);
      cuda::memcpy_async(buffers_.data(), host_f_.data(), host_f_.size() * sizeof(float), stream);
      wait_for_stream();  // host_f_ is reused as staging below
    }
    col_ = floats(std::max(b1_.conv.col_size(), b2_.conv.col_size()));
    h_ = floats(n * hidden_);
    dh_ = floats(n * hidden_);
    dflat_ = floats(n * flat_);
    const std::size_t block_out = std::max(b1_.y.size(), b2_.y.size());
    dy_ = floats(block_out);
    dz_ = floats(block_out);
    dpool1_ = floats(b1_.pooled.size());
    const std::size_t max_k = std::max(c1_, c2_);
    sum_a_ = DeviceBuffer<double>(allocator, act, max_k, stream);
    sum_b_ = DeviceBuffer<double>(allocator, act, max_k, stream);
    allocator_ = &allocator;
    max_batch_ = n;
  }

  void forward(const float* params, const float* x, std::size_t n, float* logits) override {
    if (n > max_batch_) {
      throw Error(fmt::format("cuda cnn: batch {} exceeds reserved {}", n, max_batch_));
    }
    void* stream = blas_->stream();
    const auto& v = cpu_->params();
    block_forward(b1_, params, x, n);
    block_forward(b2_, params, b1_.pooled.data(), n);
    cuda::linear_forward(*blas_, b2_.pooled.data(), params + v[6].offset, params + v[7].offset,
                         h_.data(), n, flat_, hidden_, true, stream);
    cuda::linear_forward(*blas_, h_.data(), params + v[8].offset, params + v[9].offset, logits, n,
                         hidden_, classes_, false, stream);
  }

  void backward(const float* params, const float* x, const float* dlogits, std::size_t n,
                float* grads, const std::function<void(std::size_t)>& on_grad_ready) override {
    if (n > max_batch_) {
      throw Error(fmt::format("cuda cnn: batch {} exceeds reserved {}", n, max_batch_));
    }
    void* stream = blas_->stream();
    const auto& v = cpu_->params();
    auto ready = [&](std::initializer_list<std::size_t> ids) {
      if (on_grad_ready) {
        for (std::size_t id : ids) on_grad_ready(id);
      }
    };
    cuda::linear_backward(*blas_, h_.data(), params + v[8].offset, dlogits, dh_.data(),
                          grads + v[8].offset, grads + v[9].offset, n, hidden_, classes_, stream);
    ready({9, 8});
    cuda::relu_backward_inplace(h_.data(), dh_.data(), n * hidden_, stream);
    cuda::linear_backward(*blas_, b2_.pooled.data(), params + v[6].offset, dh_.data(),
                          dflat_.data(), grads + v[6].offset, grads + v[7].offset, n, flat_,
                          hidden_, stream);
    ready({7, 6});
    block_backward(b2_, params, b1_.pooled.data(), dflat_.data(), dpool1_.data(), grads, n);
    ready({b2_.beta, b2_.gamma, b2_.w});
    block_backward(b1_, params, x, dpool1_.data(), nullptr, grads, n);
    ready({b1_.beta, b1_.gamma, b1_.w});
  }

 private:
  // One conv -> BN -> ReLU -> pool block's layout (the CPU Cnn's) and saved state (device).
  struct Block : Cnn::BlockLayout {
    DeviceBuffer<float> z, y;    // conv output, BN+ReLU output [N, K, P, Q]
    DeviceBuffer<float> pooled;  // [N, K, P/2, Q/2]
    DeviceBuffer<std::int32_t> argmax;
    DeviceBuffer<float> mean, invstd;  // [K], of the last forward
    double count = 0;                  // values per channel the statistics came from (all ranks)
  };

  bool synced() const { return sync_ != nullptr && sync_->world_size() > 1; }

  // Blocks the host until everything enqueued on the compute stream so far has finished.
  void wait_for_stream() {
    if (!event_) event_.emplace();
    event_->record(blas_->stream());
    event_->synchronize();
  }
  // Copies `count` T between host and device on the compute stream (ordered with the kernels).
  template <typename T>
  void copy(T* dst, const T* src, std::size_t count) {
    cuda::memcpy_async(dst, src, count * sizeof(T), blas_->stream());
  }

  void block_forward(Block& b, const float* params, const float* x, std::size_t n) {
    void* stream = blas_->stream();
    const auto& v = cpu_->params();
    cpu::ConvShape s = b.conv;
    s.N = n;
    const std::size_t K = s.K, HW = s.P() * s.Q();
    cuda::conv2d_forward(*blas_, x, params + v[b.w].offset, nullptr, b.z.data(), s, col_.data(),
                         stream);
    float* running_mean = buffers_.data() + b.running;
    float* running_var = running_mean + K;
    if (training_) {
      cuda::batchnorm_local_sums(b.z.data(), n, K, HW, sum_a_.data(), sum_b_.data(), stream);
      double count = static_cast<double>(n * HW);
      if (synced()) count = sync_forward_stats(K, count);
      b.count = count;
      cuda::batchnorm_finalize_stats(sum_a_.data(), sum_b_.data(), count, K, Cnn::kBnEps, Cnn::kBnMomentum,
                                     b.mean.data(), b.invstd.data(), running_mean, running_var,
                                     stream);
    } else {
      // Running statistics -> mean, invstd on the host, in float as Cnn does.
      host_f_.resize(2 * K);
      copy(host_f_.data(), running_mean, 2 * K);
      wait_for_stream();
      for (std::size_t c = 0; c < K; ++c) {
        host_f_[K + c] = 1.0f / std::sqrt(host_f_[K + c] + Cnn::kBnEps);
      }
      copy(b.mean.data(), host_f_.data(), K);
      copy(b.invstd.data(), host_f_.data() + K, K);
      wait_for_stream();  // host_f_ is staging reused by the next call
    }
    cuda::batchnorm_normalize(b.z.data(), b.mean.data(), b.invstd.data(),
                              params + v[b.gamma].offset, params + v[b.beta].offset, b.y.data(), n,
                              K, HW, stream);
    cuda::relu_inplace(b.y.data(), n * K * HW, stream);
    cuda::maxpool2x2_forward(b.y.data(), b.pooled.data(), b.argmax.data(), n, K, s.P(), s.Q(),
                             stream);
  }

  // SyncBatchNorm forward, as Cnn::block_forward: this rank's double sums in sum_a_/sum_b_ [K]
  // -> (mean, invstd, count) floats, all-gathered, combined back into the totals over all ranks
  // (written to sum_a_/sum_b_). Returns the total count.
  double sync_forward_stats(std::size_t K, double count) {
    const auto p = static_cast<std::size_t>(sync_->world_size());
    const std::size_t row = 2 * K + 1;
    host_sum_.resize(K);
    host_sumsq_.resize(K);
    copy(host_sum_.data(), sum_a_.data(), K);
    copy(host_sumsq_.data(), sum_b_.data(), K);
    wait_for_stream();
    host_f_.resize(row);
    syncbn_pack_stats(host_sum_.data(), host_sumsq_.data(), count, K, host_f_.data());
    float* send = sync_buffer(p * row + row);
    float* recv = send + row;
    copy(send, host_f_.data(), row);
    wait_for_stream();
    sync_->allgather(send, recv, row);
    host_f_.resize(p * row);
    copy(host_f_.data(), static_cast<const float*>(recv), p * row);
    wait_for_stream();
    count = syncbn_combine_stats(host_f_.data(), p, K, host_sum_.data(), host_sumsq_.data());
    copy(sum_a_.data(), host_sum_.data(), K);
    copy(sum_b_.data(), host_sumsq_.data(), K);
    wait_for_stream();  // host_sum_ / host_sumsq_ are staging reused by the next call
    return count;
  }

  // SyncBatchNorm backward, as Cnn::block_backward: sum_dy, sum_dy_xmu [K] doubles in
  // sum_a_/sum_b_ -> floats, all-reduced over the ranks, back to doubles in sum_a_/sum_b_.
  // The kernels have no double <-> float conversion, so it goes through the host.
  void sync_backward_sums(std::size_t K) {
    host_sum_.resize(K);
    host_sumsq_.resize(K);
    copy(host_sum_.data(), sum_a_.data(), K);
    copy(host_sumsq_.data(), sum_b_.data(), K);
    wait_for_stream();
    host_f_.resize(2 * K);
    for (std::size_t c = 0; c < K; ++c) {
      host_f_[c] = static_cast<float>(host_sum_[c]);
      host_f_[K + c] = static_cast<float>(host_sumsq_[c]);
    }
    float* sums = sync_buffer(2 * K);
    copy(sums, host_f_.data(), 2 * K);
    wait_for_stream();
    sync_->allreduce_sum(sums, 2 * K);
    copy(host_f_.data(), static_cast<const float*>(sums), 2 * K);
    wait_for_stream();
    for (std::size_t c = 0; c < K; ++c) {
      host_sum_[c] = host_f_[c];
      host_sumsq_[c] = host_f_[K + c];
    }
    copy(sum_a_.data(), host_sum_.data(), K);
    copy(sum_b_.data(), host_sumsq_.data(), K);
    wait_for_stream();
  }

  // At least `count` device floats for the SyncBatchNorm exchange (grows with world_size).
  float* sync_buffer(std::size_t count) {
    if (sync_buf_.size() < count) {
      if (allocator_ == nullptr) throw Error("cuda cnn: forward before reserve");
      sync_buf_ = DeviceBuffer<float>(*allocator_, MemoryCategory::activations, count,
                                      blas_->stream());
    }
    return sync_buf_.data();
  }

  void block_backward(Block& b, const float* params, const float* x, const float* dpooled,
                      float* dx, float* grads, std::size_t n) {
    void* stream = blas_->stream();
    const auto& v = cpu_->params();
    cpu::ConvShape s = b.conv;
    s.N = n;
    const std::size_t K = s.K, HW = s.P() * s.Q(), size = n * K * HW;
    cuda::maxpool2x2_backward(dpooled, b.argmax.data(), dy_.data(), n, K, s.P(), s.Q(), stream);
    cuda::relu_backward_inplace(b.y.data(), dy_.data(), size, stream);
    cuda::batchnorm_backward_reduce(dy_.data(), b.z.data(), b.mean.data(), b.invstd.data(), n, K,
                                    HW, sum_a_.data(), sum_b_.data(), grads + v[b.gamma].offset,
                                    grads + v[b.beta].offset, stream);
    if (synced()) sync_backward_sums(K);
    cuda::batchnorm_backward_elemt(dy_.data(), b.z.data(), b.mean.data(), b.invstd.data(),
                                   params + v[b.gamma].offset, sum_a_.data(), sum_b_.data(),
                                   b.count, dz_.data(), n, K, HW, stream);
    cuda::conv2d_backward(*blas_, x, params + v[b.w].offset, dz_.data(), dx,
                          grads + v[b.w].offset, nullptr, s, col_.data(), stream);
  }

  std::unique_ptr<Cnn> cpu_;  // the CPU Cnn: views, block layouts, initialisation (never reserved)
  SampleShape shape_;
  std::size_t c1_, c2_, hidden_, classes_, flat_;
  cuda::Blas* blas_;
  DeviceAllocator* allocator_ = nullptr;
  std::size_t max_batch_ = 0;
  bool training_ = true;
  BatchNormSync* sync_ = nullptr;
  Block b1_, b2_;
  DeviceBuffer<float> buffers_;                          // running stats (parameters category)
  DeviceBuffer<float> col_, h_;                          // im2col workspace; fc1 output
  DeviceBuffer<float> dh_, dflat_, dy_, dz_, dpool1_;    // backward scratch
  DeviceBuffer<double> sum_a_, sum_b_;  // [max K]: sum/sumsq forward, sum_dy/sum_dy_xmu backward
  DeviceBuffer<float> sync_buf_;        // SyncBatchNorm exchange, grown on first use
  std::optional<cuda::Event> event_;    // created on first host wait
  std::vector<float> host_f_;           // small host staging ([2K + 1] or [world_size * (2K + 1)])
  std::vector<double> host_sum_, host_sumsq_;  // [K] host staging
};

}  // namespace

std::unique_ptr<CudaModel> make_cuda_cnn(const std::vector<int>& channels,
                                         const std::vector<int>& hidden, const SampleShape& shape,
                                         std::size_t classes, cuda::Blas& blas) {
  // InputError as make_cnn.
  std::unique_ptr<Cnn> cpu(static_cast<Cnn*>(make_cnn(channels, hidden, shape, classes).release()));
  return std::make_unique<CudaCnn>(std::move(cpu), shape, static_cast<std::size_t>(channels[0]),
                                   static_cast<std::size_t>(channels[1]),
                                   static_cast<std::size_t>(hidden.front()), classes, blas);
}

}  // namespace dpbench
