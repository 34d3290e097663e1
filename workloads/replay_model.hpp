// A described model replayed (workloads/model_description.hpp): every strategy, engine and
// launcher trains it through the same Model interface as the MLP and CNN, but its compute is a
// wait of the described time. What is real: the parameter, gradient and optimizer buffers of the
// described shapes (so bytes moved and memory are the model's), the activation memory it saved
// per sample, the output and input sizes, and the order gradients become ready, layer by layer.
// What is not: the arithmetic. Forward writes zero logits; backward writes a deterministic
// gradient proportional to the batch's output gradient, so that modes that split the batch
// differently still agree (the sum over ranks of a ps replica's gradient equals the all-reduced
// mean, as with a real model). Losses and accuracy of a replay are not the model's.
//
// The flat buffers are laid out in reverse gradient-ready order (as DDP's bucket views are), so
// every bucket of consecutive ready gradients is one contiguous range.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "workloads/model.hpp"
#include "workloads/model_description.hpp"

namespace dpbench {

class ReplayModel final : public Model {
 public:
  // time_scale (> 0): every described time is multiplied by it (a device profile's ratio, or a
  // time dilation). Throws InputError when the description's output does not fit an int label
  // space or time_scale is not positive.
  ReplayModel(std::shared_ptr<const ModelDescription> description, double time_scale);

  std::string name() const override { return d_->name; }
  const std::vector<ParamView>& params() const override { return views_; }
  std::size_t num_params() const override { return num_params_; }
  // The input's bytes per sample as floats (tokens of int64 take two floats each).
  std::size_t input_features() const override;
  std::size_t num_classes() const override { return d_->output_features(); }
  std::vector<std::size_t> grad_ready_order() const override { return d_->grad_ready_order(); }
  // From the described backward: the layers' cumulative time when each gradient became ready.
  std::vector<double> grad_ready_times() const override;
  const ModelDescription& description() const { return *d_; }

  using Model::reserve;
  // Allocates the described activation bytes for max_batch samples, charged to activations.
  void reserve(std::size_t max_batch, std::shared_ptr<ModelOps<float>> ops) override;
  std::size_t activation_bytes(std::size_t max_batch) const override { return max_batch * d_->activation_bytes; }
  // Small deterministic values from seed (not PyTorch's initialisation: a replay does not learn).
  void init_params(float* params, std::uint64_t seed) const override;
  // Writes zero logits [batch, num_classes()] and waits batch x the described forward time.
  void forward(const float* params, const float* x, std::size_t batch, float* logits) override;
  // Walks the described backward: per step, waits batch x the layer's time, writes the gradients
  // that became ready there and calls on_grad_ready for each, in the described order.
  void backward(const float* params, const float* x, const float* dlogits, std::size_t batch, float* grads,
                const std::function<void(std::size_t)>& on_grad_ready) override;

 private:
  void write_grads(std::size_t param, float scale, float* grads);
  std::chrono::duration<double> per_sample(double us) const;

  std::shared_ptr<const ModelDescription> d_;
  double time_scale_ = 1;
  std::vector<ParamView> views_;
  std::size_t num_params_ = 0;
  std::shared_ptr<ModelOps<float>> ops_;
  ModelBuffer<float> activations_;
  std::vector<float> pattern_;  // host: the gradient's tiled pattern
  std::vector<float> scratch_;  // host: one tile scaled, uploaded piece by piece
  std::vector<float> zeros_;    // host: one row of zero logits
};

}  // namespace dpbench
