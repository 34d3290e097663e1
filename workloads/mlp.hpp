// The MLP workload: Linear -> ReLU -> ... -> Linear, the classifier every data-parallel tutorial
// starts from. Layer l has weight [out, in] and bias [out] (nn.Linear layout); the flat
// parameter buffer holds fc1.weight, fc1.bias, fc2.weight, ... in that order. Written once for
// every device over a ModelOps: each Linear is linear_forward (GEMM, bias, fused ReLU) forward
// and linear_backward plus the ReLU mask backward.
#pragma once

#include <memory>
#include <vector>

#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

template <typename T>
class Mlp final : public ModelT<T> {
 public:
  // dims: {input_features, hidden..., num_classes}, at least 2 entries, all positive.
  // Throws InputError otherwise.
  explicit Mlp(std::vector<std::size_t> dims);

  std::string name() const override { return "mlp"; }
  const std::vector<ParamView>& params() const override { return views_; }
  std::size_t num_params() const override { return num_params_; }
  std::size_t input_features() const override { return dims_.front(); }
  std::size_t num_classes() const override { return dims_.back(); }
  const std::vector<std::size_t>& dims() const { return dims_; }

  using ModelT<T>::reserve;
  void reserve(std::size_t max_batch, std::shared_ptr<ModelOps<T>> ops) override;
  // Each hidden layer's output, and two backward buffers of the widest hidden layer, per sample.
  std::size_t activation_bytes(std::size_t max_batch) const override;
  // U(-1/sqrt(in), 1/sqrt(in)) for weights and biases: nn.Linear.reset_parameters().
  void init_params(T* params, std::uint64_t seed) const override;
  void forward(const T* params, const T* x, std::size_t batch, T* logits) override;
  void backward(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads,
                const std::function<void(std::size_t)>& on_grad_ready) override;
  // backward() that also writes the input's gradient dx[batch, input_features()] (not null), for
  // an MLP inside a larger model (DLRM's top MLP).
  void backward_to(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads, T* dx,
                   const std::function<void(std::size_t)>& on_grad_ready);

 private:
  std::size_t layers() const { return dims_.size() - 1; }
  std::vector<std::size_t> dims_;
  std::vector<ParamView> views_;
  std::size_t num_params_ = 0;
  std::size_t max_batch_ = 0;
  std::shared_ptr<ModelOps<T>> ops_;
  // acts_[l]: output of hidden layer l after ReLU, [max_batch, dims_[l+1]] (l < layers()-1).
  std::vector<ModelBuffer<T>> acts_;
  // Two gradient scratch buffers [max_batch, max hidden width], ping-ponged during backward.
  ModelBuffer<T> dact_[2];
};

}  // namespace dpbench
