#include "workloads/cnn.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

void syncbn_pack_stats(const double* sum, const double* sumsq, double count, std::size_t K, float* row) {
  for (std::size_t c = 0; c < K; ++c) {
    const double mean = count > 0 ? sum[c] / count : 0.0;
    const double var = count > 0 ? std::max(sumsq[c] / count - mean * mean, 0.0) : 0.0;
    row[c] = static_cast<float>(mean);
    row[K + c] = static_cast<float>(1.0 / std::sqrt(var + Cnn::kBnEps));
  }
  row[2 * K] = static_cast<float>(count);
}

double syncbn_combine_stats(const float* rows, std::size_t p, std::size_t K, double* sum, double* sumsq) {
  std::fill(sum, sum + K, 0.0);
  std::fill(sumsq, sumsq + K, 0.0);
  double count = 0;
  for (std::size_t r = 0; r < p; ++r) {
    const float* rank = rows + r * (2 * K + 1);
    const double nr = rank[2 * K];
    for (std::size_t c = 0; c < K; ++c) {
      const double mean = rank[c], invstd = rank[K + c];
      const double var = nr > 0 ? 1.0 / (invstd * invstd) - Cnn::kBnEps : 0.0;
      sum[c] += nr * mean;
      sumsq[c] += nr * (var + mean * mean);
    }
    count += nr;
  }
  return count;
}

Cnn::Cnn(SampleShape shape, std::size_t c1, std::size_t c2, std::size_t hidden, std::size_t classes)
    : shape_(shape), c1_(c1), c2_(c2), hidden_(hidden), classes_(classes) {
  if (shape.height < 4 || shape.width < 4 || shape.height % 4 != 0 || shape.width % 4 != 0) {
    throw InputError(fmt::format("--input {}x{}x{}: the cnn workload needs height and width divisible "
                                 "by 4 (two 2x2 poolings)",
                                 shape.channels, shape.height, shape.width));
  }
  if (c1 == 0 || c2 == 0 || hidden == 0 || classes < 2) {
    throw InputError("cnn: channels and hidden width must be positive");
  }
  const auto C = static_cast<std::size_t>(shape.channels);
  const auto H = static_cast<std::size_t>(shape.height), W = static_cast<std::size_t>(shape.width);
  flat_ = c2 * (H / 4) * (W / 4);
  std::size_t offset = 0;
  auto add = [&](const std::string& name, std::vector<std::size_t> dims) {
    std::size_t size = 1;
    for (auto d : dims) size *= d;
    views_.push_back({name, std::move(dims), offset, size});
    offset += size;
    return views_.size() - 1;
  };
  b1_.conv = {0, C, H, W, c1, 3, 3, 1};
  b1_.w = add("conv1.weight", {c1, C, 3, 3});
  b1_.gamma = add("bn1.weight", {c1});
  b1_.beta = add("bn1.bias", {c1});
  b1_.running = 0;
  b2_.conv = {0, c1, H / 2, W / 2, c2, 3, 3, 1};
  b2_.w = add("conv2.weight", {c2, c1, 3, 3});
  b2_.gamma = add("bn2.weight", {c2});
  b2_.beta = add("bn2.bias", {c2});
  b2_.running = 2 * c1;
  add("fc1.weight", {hidden, flat_});
  add("fc1.bias", {hidden});
  add("fc2.weight", {classes, hidden});
  add("fc2.bias", {classes});
  num_params_ = offset;
}

void Cnn::reserve(std::size_t n, std::shared_ptr<ModelOps<float>> ops) {
  const bool same_ops = ops_ == ops;
  ops_ = std::move(ops);
  const std::shared_ptr<ModelMemory> m = ops_;
  const auto act = MemoryCategory::activations;
  auto floats = [&](std::size_t count) { return ModelBuffer<float>(m, act, count); };
  for (Block* b : {&b1_, &b2_}) {
    const std::size_t out = n * b->conv.K * b->conv.P() * b->conv.Q();
    b->z = floats(out);
    b->y = floats(out);
    b->pooled = floats(out / 4);
    b->argmax = ModelBuffer<std::int32_t>(m, act, out / 4);
    b->mean = floats(b->conv.K);
    b->invstd = floats(b->conv.K);
  }
  if (!same_ops || buffers_.size() != num_buffers()) {
    buffers_ = ModelBuffer<float>(m, MemoryCategory::parameters, num_buffers());
    const std::vector<float> init = initial_buffers();
    ops_->upload(buffers_.data(), init.data(), init.size() * sizeof(float));
  }
  // One convolution's workspace at a time, for batches up to n: chunks of samples under
  // conv::kWorkspaceCap (workloads/conv_layout.hpp).
  std::size_t workspace = 0;
  for (const Block* b : {&b1_, &b2_}) {
    cpu::ConvShape s = b->conv;
    s.N = n;
    workspace = std::max(workspace, s.workspace_size());
  }
  col_ = floats(workspace);
  h_ = floats(n * hidden_);
  dh_ = floats(n * hidden_);
  dflat_ = floats(n * flat_);
  const std::size_t block_out = std::max(b1_.y.size(), b2_.y.size());
  dy_ = floats(block_out);
  dz_ = floats(block_out);
  dpool1_ = floats(b1_.pooled.size());
  const std::size_t max_k = std::max(c1_, c2_);
  sum_a_ = ModelBuffer<double>(m, act, max_k);
  sum_b_ = ModelBuffer<double>(m, act, max_k);
  max_batch_ = n;
}

std::size_t Cnn::activation_bytes(std::size_t n) const {
  std::size_t floats = 0, ints = 0, workspace = 0, block_out = 0;
  for (const Block* b : {&b1_, &b2_}) {
    const std::size_t out = n * b->conv.K * b->conv.P() * b->conv.Q();
    floats += 2 * out + out / 4 + 2 * b->conv.K;
    ints += out / 4;
    cpu::ConvShape s = b->conv;
    s.N = n;
    workspace = std::max(workspace, s.workspace_size());
    block_out = std::max(block_out, out);
  }
  const std::size_t pooled1 = n * b1_.conv.K * b1_.conv.P() * b1_.conv.Q() / 4;
  floats += workspace + 2 * n * hidden_ + n * flat_ + 2 * block_out + pooled1;
  return floats * sizeof(float) + ints * sizeof(std::int32_t) + 2 * std::max(c1_, c2_) * sizeof(double);
}

std::vector<ParamView> Cnn::buffer_views() const {
  return {{"bn1.running_mean", {c1_}, 0, c1_},
          {"bn1.running_var", {c1_}, c1_, c1_},
          {"bn2.running_mean", {c2_}, 2 * c1_, c2_},
          {"bn2.running_var", {c2_}, 2 * c1_ + c2_, c2_}};
}

std::vector<float> Cnn::initial_buffers() const {
  // bn1.running_mean 0, bn1.running_var 1, bn2.running_mean 0, bn2.running_var 1.
  std::vector<float> init(num_buffers(), 0.0f);
  std::fill(init.begin() + static_cast<std::ptrdiff_t>(c1_), init.begin() + static_cast<std::ptrdiff_t>(2 * c1_), 1.0f);
  std::fill(init.begin() + static_cast<std::ptrdiff_t>(2 * c1_ + c2_), init.end(), 1.0f);
  return init;
}

void Cnn::init_params(float* params, std::uint64_t seed) const {
  std::mt19937_64 rng(seed);
  auto uniform = [&](const ParamView& v, double bound) {
    for (std::size_t i = 0; i < v.size; ++i) {
      const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
      params[v.offset + i] = static_cast<float>((2.0 * u - 1.0) * bound);
    }
  };
  for (const Block* b : {&b1_, &b2_}) {
    uniform(views_[b->w], 1.0 / std::sqrt(static_cast<double>(b->conv.C * 9)));
    std::fill_n(params + views_[b->gamma].offset, views_[b->gamma].size, 1.0f);
    std::fill_n(params + views_[b->beta].offset, views_[b->beta].size, 0.0f);
  }
  for (std::size_t v = 6; v < 10; ++v) {
    const std::size_t fan_in = v < 8 ? flat_ : hidden_;
    uniform(views_[v], 1.0 / std::sqrt(static_cast<double>(fan_in)));
  }
}

void Cnn::block_forward(Block& b, const float* params, const float* x, std::size_t n) {
  cpu::ConvShape s = b.conv;
  s.N = n;
  const std::size_t K = s.K, HW = s.P() * s.Q();
  ops_->conv2d_forward(x, params + views_[b.w].offset, nullptr, b.z.data(), s, col_.data());
  float* running_mean = buffers_.data() + b.running;
  float* running_var = running_mean + K;
  if (training_) {
    ops_->batchnorm_local_sums(b.z.data(), n, K, HW, sum_a_.data(), sum_b_.data());
    double count = static_cast<double>(n * HW);
    if (synced()) count = sync_forward_stats(K, count);
    b.count = count;
    ops_->batchnorm_finalize_stats(sum_a_.data(), sum_b_.data(), count, K, kBnEps, kBnMomentum, b.mean.data(),
                                   b.invstd.data(), running_mean, running_var);
  } else {
    // Running statistics -> mean, invstd on the host, in float.
    host_f_.resize(2 * K);
    ops_->download(host_f_.data(), running_mean, 2 * K * sizeof(float));
    for (std::size_t c = 0; c < K; ++c) host_f_[K + c] = 1.0f / std::sqrt(host_f_[K + c] + kBnEps);
    ops_->upload(b.mean.data(), host_f_.data(), K * sizeof(float));
    ops_->upload(b.invstd.data(), host_f_.data() + K, K * sizeof(float));
  }
  ops_->batchnorm_normalize(b.z.data(), b.mean.data(), b.invstd.data(), params + views_[b.gamma].offset,
                            params + views_[b.beta].offset, b.y.data(), n, K, HW);
  ops_->relu_inplace(b.y.data(), n * K * HW);
  ops_->maxpool2x2_forward(b.y.data(), b.pooled.data(), b.argmax.data(), n, K, s.P(), s.Q());
}

double Cnn::sync_forward_stats(std::size_t K, double count) {
  const auto p = static_cast<std::size_t>(sync_->world_size());
  const std::size_t row = 2 * K + 1;
  host_sum_.resize(K);
  host_sumsq_.resize(K);
  ops_->download(host_sum_.data(), sum_a_.data(), K * sizeof(double));
  ops_->download(host_sumsq_.data(), sum_b_.data(), K * sizeof(double));
  host_f_.resize(row);
  syncbn_pack_stats(host_sum_.data(), host_sumsq_.data(), count, K, host_f_.data());
  float* send = sync_buffer(p * row + row);
  float* recv = send + row;
  ops_->upload(send, host_f_.data(), row * sizeof(float));
  sync_->allgather(send, recv, row);
  host_f_.resize(p * row);
  ops_->download(host_f_.data(), recv, p * row * sizeof(float));
  count = syncbn_combine_stats(host_f_.data(), p, K, host_sum_.data(), host_sumsq_.data());
  ops_->upload(sum_a_.data(), host_sum_.data(), K * sizeof(double));
  ops_->upload(sum_b_.data(), host_sumsq_.data(), K * sizeof(double));
  return count;
}

void Cnn::sync_backward_sums(std::size_t K) {
  host_sum_.resize(K);
  host_sumsq_.resize(K);
  ops_->download(host_sum_.data(), sum_a_.data(), K * sizeof(double));
  ops_->download(host_sumsq_.data(), sum_b_.data(), K * sizeof(double));
  host_f_.resize(2 * K);
  for (std::size_t c = 0; c < K; ++c) {
    host_f_[c] = static_cast<float>(host_sum_[c]);
    host_f_[K + c] = static_cast<float>(host_sumsq_[c]);
  }
  float* sums = sync_buffer(2 * K);
  ops_->upload(sums, host_f_.data(), 2 * K * sizeof(float));
  sync_->allreduce_sum(sums, 2 * K);
  ops_->download(host_f_.data(), sums, 2 * K * sizeof(float));
  for (std::size_t c = 0; c < K; ++c) {
    host_sum_[c] = host_f_[c];
    host_sumsq_[c] = host_f_[K + c];
  }
  ops_->upload(sum_a_.data(), host_sum_.data(), K * sizeof(double));
  ops_->upload(sum_b_.data(), host_sumsq_.data(), K * sizeof(double));
}

float* Cnn::sync_buffer(std::size_t count) {
  if (sync_buf_.size() < count) {
    if (!ops_) throw Error("cnn: forward before reserve");
    sync_buf_ = ModelBuffer<float>(ops_, MemoryCategory::activations, count);
  }
  return sync_buf_.data();
}

void Cnn::forward(const float* params, const float* x, std::size_t n, float* logits) {
  if (n > max_batch_) throw Error(fmt::format("cnn: batch {} exceeds reserved {}", n, max_batch_));
  block_forward(b1_, params, x, n);
  block_forward(b2_, params, b1_.pooled.data(), n);
  ops_->linear_forward(b2_.pooled.data(), params + views_[6].offset, params + views_[7].offset, h_.data(), n, flat_,
                       hidden_, true);
  ops_->linear_forward(h_.data(), params + views_[8].offset, params + views_[9].offset, logits, n, hidden_, classes_,
                       false);
}

void Cnn::block_backward(Block& b, const float* params, const float* x, const float* dpooled, float* dx, float* grads,
                         std::size_t n) {
  cpu::ConvShape s = b.conv;
  s.N = n;
  const std::size_t K = s.K, HW = s.P() * s.Q(), size = n * K * HW;
  ops_->maxpool2x2_backward(dpooled, b.argmax.data(), dy_.data(), n, K, s.P(), s.Q());
  ops_->relu_backward_inplace(b.y.data(), dy_.data(), size);
  // BatchNorm backward: local sums, combined over ranks with SyncBatchNorm, then dx.
  ops_->batchnorm_backward_reduce(dy_.data(), b.z.data(), b.mean.data(), b.invstd.data(), n, K, HW, sum_a_.data(),
                                  sum_b_.data(), grads + views_[b.gamma].offset, grads + views_[b.beta].offset);
  if (synced()) sync_backward_sums(K);
  ops_->batchnorm_backward_elemt(dy_.data(), b.z.data(), b.mean.data(), b.invstd.data(),
                                 params + views_[b.gamma].offset, sum_a_.data(), sum_b_.data(), b.count, dz_.data(), n,
                                 K, HW);
  ops_->conv2d_backward(x, params + views_[b.w].offset, dz_.data(), dx, grads + views_[b.w].offset, nullptr, s,
                        col_.data());
}

void Cnn::backward(const float* params, const float* x, const float* dlogits, std::size_t n, float* grads,
                   const std::function<void(std::size_t)>& on_grad_ready) {
  if (n > max_batch_) throw Error(fmt::format("cnn: batch {} exceeds reserved {}", n, max_batch_));
  auto ready = [&](std::initializer_list<std::size_t> ids) {
    if (on_grad_ready) {
      for (std::size_t id : ids) on_grad_ready(id);
    }
  };
  ops_->linear_backward(h_.data(), params + views_[8].offset, dlogits, dh_.data(), grads + views_[8].offset,
                        grads + views_[9].offset, n, hidden_, classes_);
  ready({9, 8});
  ops_->relu_backward_inplace(h_.data(), dh_.data(), n * hidden_);
  ops_->linear_backward(b2_.pooled.data(), params + views_[6].offset, dh_.data(), dflat_.data(),
                        grads + views_[6].offset, grads + views_[7].offset, n, flat_, hidden_);
  ready({7, 6});
  block_backward(b2_, params, b1_.pooled.data(), dflat_.data(), dpool1_.data(), grads, n);
  ready({b2_.beta, b2_.gamma, b2_.w});
  block_backward(b1_, params, x, dpool1_.data(), nullptr, grads, n);
  ready({b1_.beta, b1_.gamma, b1_.w});
}

std::unique_ptr<Model> make_cnn(const std::vector<int>& channels, const std::vector<int>& hidden,
                                const SampleShape& shape, std::size_t classes) {
  if (channels.size() != 2 || channels[0] <= 0 || channels[1] <= 0) {
    throw InputError("--channels: the cnn workload takes two positive conv widths, e.g. 16,32");
  }
  if (hidden.empty() || hidden.front() <= 0) throw InputError("--hidden: the cnn workload needs a positive width");
  return std::make_unique<Cnn>(shape, static_cast<std::size_t>(channels[0]), static_cast<std::size_t>(channels[1]),
                               static_cast<std::size_t>(hidden.front()), classes);
}

}  // namespace dpbench
