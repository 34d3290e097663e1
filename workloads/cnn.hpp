// The CNN workload: [conv 3x3 (pad 1, no bias) -> BatchNorm -> ReLU -> max-pool 2x2] x 2, then
// linear -> ReLU -> linear, the small ResNet-style stem the data-parallel seeds train with
// SyncBatchNorm. Parameters in the flat buffer: conv1.weight [c1, C, 3, 3], bn1.weight [c1],
// bn1.bias [c1], conv2.weight [c2, c1, 3, 3], bn2.weight, bn2.bias [c2], fc1.weight
// [hidden, c2 * H/4 * W/4], fc1.bias, fc2.weight [classes, hidden], fc2.bias. Buffers: bn1 and
// bn2 running_mean and running_var. Written once for every device over a ModelOps (the kernels of
// workloads/cnn_kernels.hpp on the CPU, cuda/cuda_cnn_kernels.hpp on GPUs). Host round trips
// (ModelOps::download/upload; on a GPU the host waits for the stream) happen only where the
// arithmetic is on the host: evaluation mode (invstd from running_var) and SyncBatchNorm across
// more than one rank (its float exchange format, computed from the double sums).
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

  // shape: C x H x W with H and W divisible by 4; c1, c2 conv channels; hidden fc width. Throws
  // InputError otherwise.
  Cnn(SampleShape shape, std::size_t c1, std::size_t c2, std::size_t hidden, std::size_t classes);

  std::string name() const override { return "cnn"; }
  const std::vector<ParamView>& params() const override { return views_; }
  std::size_t num_params() const override { return num_params_; }
  std::size_t input_features() const override { return shape_.features(); }
  std::size_t num_classes() const override { return classes_; }

  using Model::reserve;
  void reserve(std::size_t max_batch, std::shared_ptr<ModelOps<float>> ops) override;
  // Per block: pre- and post-BatchNorm maps, pooled map and arg-max, its statistics; the widest
  // conv workspace; the hidden layer and flattened gradient; backward's block-sized scratch.
  std::size_t activation_bytes(std::size_t max_batch) const override;
  // Convolutions and linear layers: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch's defaults);
  // BatchNorm weight 1, bias 0.
  void init_params(float* params, std::uint64_t seed) const override;
  // Throws Error for a batch beyond reserve()'s.
  void forward(const float* params, const float* x, std::size_t batch, float* logits) override;
  void backward(const float* params, const float* x, const float* dlogits, std::size_t batch, float* grads,
                const std::function<void(std::size_t)>& on_grad_ready) override;

  std::size_t num_buffers() const override { return 2 * (c1_ + c2_); }
  float* buffers() override { return buffers_.data(); }
  std::vector<ParamView> buffer_views() const override;
  std::vector<float> initial_buffers() const override;
  void set_training(bool training) override { training_ = training; }
  void set_batchnorm_sync(BatchNormSync* sync) override { sync_ = sync; }

 private:
  // One conv -> BN -> ReLU -> pool block: its conv shape (N is set per call), the indices of
  // conv.weight, bn.weight and bn.bias in params(), the offset of bn.running_mean in buffers()
  // (running_var follows, [K] each), and its saved state (device memory).
  struct Block {
    cpu::ConvShape conv{};
    std::size_t w = 0, gamma = 0, beta = 0;
    std::size_t running = 0;
    ModelBuffer<float> z, y;    // conv output, BN+ReLU output [N, K, P, Q]
    ModelBuffer<float> pooled;  // [N, K, P/2, Q/2]
    ModelBuffer<std::int32_t> argmax;
    ModelBuffer<float> mean, invstd;  // [K], of the last forward
    double count = 0;                 // values per channel the statistics came from (all ranks)
  };
  void block_forward(Block& b, const float* params, const float* x, std::size_t n);
  // dy_pooled -> gradients of the block's parameters and, if dx is not null, of its input.
  void block_backward(Block& b, const float* params, const float* x, const float* dpooled, float* dx, float* grads,
                      std::size_t n);
  bool synced() const { return sync_ != nullptr && sync_->world_size() > 1; }
  // SyncBatchNorm forward: this rank's sums in sum_a_/sum_b_ [K] -> (mean, invstd, count) rows,
  // all-gathered, combined back into the totals over all ranks there. Returns the total count.
  double sync_forward_stats(std::size_t K, double count);
  // SyncBatchNorm backward: sum_dy, sum_dy_xmu [K] in sum_a_/sum_b_ -> floats, all-reduced over
  // the ranks, back to doubles there.
  void sync_backward_sums(std::size_t K);
  // At least `count` device floats for the SyncBatchNorm exchange (grows with world_size).
  float* sync_buffer(std::size_t count);

  SampleShape shape_;
  std::size_t c1_, c2_, hidden_, classes_, flat_;
  std::vector<ParamView> views_;
  std::size_t num_params_ = 0;
  std::size_t max_batch_ = 0;
  bool training_ = true;
  BatchNormSync* sync_ = nullptr;
  std::shared_ptr<ModelOps<float>> ops_;
  Block b1_, b2_;
  ModelBuffer<float> buffers_;  // running statistics (parameters category)
  ModelBuffer<float> col_, h_;  // conv workspace (chunked, workloads/conv_layout.hpp); fc1 output [N, hidden]
  ModelBuffer<float> dh_, dflat_, dy_, dz_, dpool1_;  // backward scratch
  ModelBuffer<double> sum_a_, sum_b_;                 // [max K]: sum/sumsq forward, sum_dy/sum_dy_xmu backward
  ModelBuffer<float> sync_buf_;                       // SyncBatchNorm exchange, grown on first use
  std::vector<float> host_f_;                         // host staging ([2K + 1] or [world_size * (2K + 1)])
  std::vector<double> host_sum_, host_sumsq_;         // [K] host staging
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
