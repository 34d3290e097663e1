#include "cuda/cuda_mlp.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "train/models.hpp"
#include "cuda/cuda_cnn.hpp"

namespace dpbench {

CudaMlp::CudaMlp(std::vector<std::size_t> dims, cuda::Blas& blas)
    : cpu_(dims), dims_(std::move(dims)), blas_(&blas) {}

void CudaMlp::reserve(std::size_t max_batch, DeviceAllocator& allocator) {
  max_batch_ = max_batch;
  acts_.clear();
  std::size_t widest = 0;
  for (std::size_t l = 0; l + 1 < layers(); ++l) {
    acts_.emplace_back(allocator, MemoryCategory::activations, max_batch * dims_[l + 1]);
    widest = std::max(widest, dims_[l + 1]);
  }
  for (auto& d : dact_) d = DeviceBuffer<float>(allocator, MemoryCategory::activations, max_batch * widest);
}

void CudaMlp::forward(const float* params, const float* x, std::size_t batch, float* logits) {
  if (batch > max_batch_) {
    throw Error(fmt::format("mlp: batch {} exceeds reserved {}", batch, max_batch_));
  }
  const auto& views = cpu_.params();
  const float* in = x;
  for (std::size_t l = 0; l < layers(); ++l) {
    const bool last = l + 1 == layers();
    float* out = last ? logits : acts_[l].data();
    cuda::linear_forward(*blas_, in, params + views[2 * l].offset, params + views[2 * l + 1].offset,
                         out, batch, dims_[l], dims_[l + 1], !last, blas_->stream());
    in = out;
  }
}

void CudaMlp::backward(const float* params, const float* x, const float* dlogits, std::size_t batch,
                       float* grads, const std::function<void(std::size_t)>& on_grad_ready) {
  const auto& views = cpu_.params();
  const float* dy = dlogits;
  for (std::size_t l = layers(); l-- > 0;) {
    const float* layer_in = l == 0 ? x : acts_[l - 1].data();
    float* dx = l == 0 ? nullptr : dact_[l % 2].data();
    const ParamView& w = views[2 * l];
    const ParamView& b = views[2 * l + 1];
    cuda::linear_backward(*blas_, layer_in, params + w.offset, dy, dx, grads + w.offset,
                          grads + b.offset, batch, dims_[l], dims_[l + 1], blas_->stream());
    if (on_grad_ready) {
      on_grad_ready(2 * l + 1);
      on_grad_ready(2 * l);
    }
    if (dx != nullptr) {
      cuda::relu_backward_inplace(acts_[l - 1].data(), dx, batch * dims_[l], blas_->stream());
      dy = dx;
    }
  }
}

void CudaModel::reserve(std::size_t, MemoryTracker&) {
  throw Error(fmt::format("{}: a GPU model reserves device memory through a DeviceAllocator", name()));
}

std::unique_ptr<CudaModel> make_cuda_model(const TrainConfig& config, const SampleShape& shape,
                                           std::size_t num_classes, cuda::Blas& blas) {
  if (config.workload == "cnn") return make_cuda_cnn(config.channels, config.hidden, shape, num_classes, blas);
  // The CPU factory checks the workload name and widths with the same messages.
  const auto cpu = make_model(config, shape, num_classes);
  const auto* mlp = dynamic_cast<const Mlp<float>*>(cpu.get());
  if (mlp == nullptr) throw InputError(fmt::format("--workload {}: no GPU version", config.workload));
  return std::make_unique<CudaMlp>(mlp->dims(), blas);
}

}  // namespace dpbench
