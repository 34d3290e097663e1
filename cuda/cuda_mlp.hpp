// The mlp workload on the GPU: workloads/mlp.hpp's Mlp (same layers, parameter views and
// initialisation) as a CudaModel. Each Linear is one cuBLAS GEMM plus a fused bias (+ ReLU)
// kernel forward, two GEMMs, a bias reduction and a ReLU-mask kernel backward
// (cuda/cuda_kernels.hpp), all on the compute stream of the cuda::Blas it was built with.
#pragma once

#include <vector>

#include "cuda/cuda_model.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {

class CudaMlp final : public CudaModel {
 public:
  using CudaModel::reserve;
  // dims: {input_features, hidden..., num_classes}, as Mlp (InputError otherwise). blas: the
  // handle (stream, precision) every layer computes with; it must outlive the model.
  CudaMlp(std::vector<std::size_t> dims, cuda::Blas& blas);

  std::string name() const override { return "mlp"; }
  const std::vector<ParamView>& params() const override { return cpu_.params(); }
  std::size_t num_params() const override { return cpu_.num_params(); }
  std::size_t input_features() const override { return cpu_.input_features(); }
  std::size_t num_classes() const override { return cpu_.num_classes(); }

  void reserve(std::size_t max_batch, DeviceAllocator& allocator) override;
  void init_params(float* host_params, std::uint64_t seed) const override {
    cpu_.init_params(host_params, seed);
  }
  void forward(const float* params, const float* x, std::size_t batch, float* logits) override;
  void backward(const float* params, const float* x, const float* dlogits, std::size_t batch,
                float* grads, const std::function<void(std::size_t)>& on_grad_ready) override;

 private:
  std::size_t layers() const { return dims_.size() - 1; }
  Mlp<float> cpu_;  // shapes, views and initialisation; its reserve() is never called
  std::vector<std::size_t> dims_;
  cuda::Blas* blas_;
  std::size_t max_batch_ = 0;
  std::vector<DeviceBuffer<float>> acts_;  // hidden layer l after ReLU: [max_batch, dims_[l+1]]
  DeviceBuffer<float> dact_[2];           // gradient scratch, ping-ponged
};

}  // namespace dpbench
