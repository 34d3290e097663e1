// The CNN workload: [conv 3x3 (pad 1, no bias) -> BatchNorm -> ReLU -> max-pool 2x2] x 2, then
// linear -> ReLU -> linear, the small ResNet-style stem the data-parallel seeds train with
// SyncBatchNorm. Parameters in the flat buffer: conv1.weight [c1, C, 3, 3], bn1.weight [c1],
// bn1.bias [c1], conv2.weight [c2, c1, 3, 3], bn2.weight, bn2.bias [c2], fc1.weight
// [hidden, c2 * H/4 * W/4], fc1.bias, fc2.weight [classes, hidden], fc2.bias. Buffers: bn1 and
// bn2 running_mean and running_var. Kernels: workloads/cnn_kernels.hpp.
#pragma once

#include <memory>
#include <vector>

#include "workloads/cnn_kernels.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

class Cnn final : public Model {
 public:
  // BatchNorm's epsilon and running-statistics momentum (nn.BatchNorm2d's defaults).
  static constexpr float kBnEps = 1e-5f;
  static constexpr float kBnMomentum = 0.1f;
  // Where one conv -> BN -> ReLU -> pool block's parameters and buffers are: its conv shape (N
  // is set per call), the indices of conv.weight, bn.weight and bn.bias in params(), and the
  // offset of bn.running_mean in buffers() (running_var follows, [K] each).
  struct BlockLayout {
    cpu::ConvShape conv{};
    std::size_t w = 0, gamma = 0, beta = 0;
    std::size_t running = 0;
  };

  // shape: C x H x W with H and W divisible by 4; c1, c2 conv channels; hidden fc width. Throws
  // InputError otherwise.
  Cnn(SampleShape shape, std::size_t c1, std::size_t c2, std::size_t hidden, std::size_t classes);

  std::string name() const override { return "cnn"; }
  const std::vector<ParamView>& params() const override { return views_; }
  std::size_t num_params() const override { return num_params_; }
  std::size_t input_features() const override { return shape_.features(); }
  std::size_t num_classes() const override { return classes_; }

  void reserve(std::size_t max_batch, MemoryTracker& tracker) override;
  // Convolutions and linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's defaults);
  // BatchNorm weight 1, bias 0.
  void init_params(float* params, std::uint64_t seed) const override;
  void forward(const float* params, const float* x, std::size_t batch, float* logits) override;
  void backward(const float* params, const float* x, const float* dlogits, std::size_t batch,
                float* grads, const std::function<void(std::size_t)>& on_grad_ready) override;

  std::size_t num_buffers() const override { return 2 * (c1_ + c2_); }
  float* buffers() override { return buffers_.data(); }
  void set_training(bool training) override { training_ = training; }
  void set_batchnorm_sync(BatchNormSync* sync) override { sync_ = sync; }

  // Block 0 (conv1, bn1) or 1 (conv2, bn2).
  const BlockLayout& block_layout(int i) const { return i == 0 ? b1_ : b2_; }

 private:
  // One conv -> BN -> ReLU -> pool block's layout and saved state.
  struct Block : BlockLayout {
    TrackedBuffer<float> z, y;    // conv output, BN+ReLU output [N, K, P, Q]
    TrackedBuffer<float> pooled;  // [N, K, P/2, Q/2]
    TrackedBuffer<std::int32_t> argmax;
    TrackedBuffer<float> mean, invstd;  // [K], of the last forward
    double count = 0;                   // values per channel the statistics came from (all ranks)
  };
  void block_forward(Block& b, const float* params, const float* x, std::size_t n);
  // dy_pooled -> gradients of the block's parameters and, if dx is not null, of its input.
  void block_backward(Block& b, const float* params, const float* x, const float* dpooled, float* dx,
                      float* grads, std::size_t n);

  SampleShape shape_;
  std::size_t c1_, c2_, hidden_, classes_, flat_;
  std::vector<ParamView> views_;
  std::size_t num_params_ = 0;
  std::size_t max_batch_ = 0;
  bool training_ = true;
  BatchNormSync* sync_ = nullptr;
  Block b1_, b2_;
  TrackedBuffer<float> buffers_;
  TrackedBuffer<float> col_, h_;                    // im2col workspace; fc1 output [N, hidden]
  TrackedBuffer<float> dh_, dflat_, dy_, dz_, dpool1_;  // backward scratch
};

// SyncBatchNorm forward's exchange (PyTorch torch/nn/modules/_functions.py), shared by the CPU
// and GPU models. pack: this rank's per-channel sum and sumsq [K] over `count` values -> row
// [2K + 1] floats (mean [K], invstd [K], count). combine: every rank's row, all-gathered into
// rows [p, 2K + 1] -> the sum and sumsq [K] over all ranks; returns the total count.
void syncbn_pack_stats(const double* sum, const double* sumsq, double count, std::size_t K, float* row);
double syncbn_combine_stats(const float* rows, std::size_t p, std::size_t K, double* sum, double* sumsq);

// The cnn workload for make_model: channels {c1, c2}, hidden {h, ...} (first value used).
std::unique_ptr<Model> make_cnn(const std::vector<int>& channels, const std::vector<int>& hidden,
                                const SampleShape& shape, std::size_t classes);

}  // namespace dpbench
