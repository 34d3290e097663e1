#include "workloads/replay_model.hpp"

#include <algorithm>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {
namespace {

constexpr std::size_t kTile = 1 << 16;  // elements of the gradient pattern, tiled over each tensor

// A value in [-1, 1) from an index (splitmix64's finaliser).
float unit_hash(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return static_cast<float>(static_cast<double>(x >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

}  // namespace

ReplayModel::ReplayModel(std::shared_ptr<const ModelDescription> description, double time_scale)
    : d_(std::move(description)), time_scale_(time_scale) {
  if (!(time_scale_ > 0)) throw InputError(fmt::format("replay time scale {}: must be positive", time_scale_));
  if (d_->output_features() > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw InputError(fmt::format("{}: {} outputs per sample exceed the label space of {}", d_->origin,
                                 d_->output_features(), std::numeric_limits<int>::max()));
  }
  // Registration order for the views; offsets in reverse gradient-ready order.
  views_.resize(d_->params.size());
  const std::vector<std::size_t> ready = d_->grad_ready_order();
  std::size_t offset = 0;
  for (auto it = ready.rbegin(); it != ready.rend(); ++it) {
    const DescribedParam& p = d_->params[*it];
    views_[*it] = ParamView{p.name, p.shape, offset, p.size};
    offset += p.size;
  }
  num_params_ = offset;
  pattern_.resize(kTile);
  for (std::size_t i = 0; i < kTile; ++i) pattern_[i] = 1e-3f * unit_hash(i);
  scratch_.resize(kTile);
}

std::size_t ReplayModel::input_features() const { return (d_->input_bytes + sizeof(float) - 1) / sizeof(float); }

std::chrono::duration<double> ReplayModel::per_sample(double us) const {
  return std::chrono::duration<double>(us * 1e-6 * time_scale_);
}

std::vector<double> ReplayModel::grad_ready_times() const {
  std::vector<double> ready(d_->params.size(), 1.0);
  const double total = d_->backward_us();
  double at = 0;
  for (const BackwardStep& step : d_->backward) {
    at += d_->layers[step.layer].backward_us;
    for (std::size_t p : step.grads_ready) ready[p] = total > 0 ? std::min(1.0, at / total) : 1.0;
  }
  return ready;
}

void ReplayModel::reserve(std::size_t max_batch, std::shared_ptr<ModelOps<float>> ops) {
  ops_ = std::move(ops);
  activations_ = ModelBuffer<float>();
  const std::size_t floats = (activation_bytes(max_batch) + sizeof(float) - 1) / sizeof(float);
  if (floats > 0) activations_ = ModelBuffer<float>(ops_, MemoryCategory::activations, floats);
  zeros_.assign(num_classes(), 0.0f);
}

void ReplayModel::init_params(float* params, std::uint64_t seed) const {
  const float base = unit_hash(seed);
  for (std::size_t i = 0; i < num_params_; ++i) params[i] = 0.01f * (pattern_[i % kTile] + base);
}

void ReplayModel::forward(const float*, const float*, std::size_t batch, float* logits) {
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t b = 0; b < batch; ++b) ops_->upload(logits + b * num_classes(), zeros_.data(), zeros_.size() * 4);
  std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                            per_sample(d_->forward_us()) * static_cast<double>(batch)));
}

void ReplayModel::write_grads(std::size_t param, float scale, float* grads) {
  const ParamView& v = views_[param];
  for (std::size_t at = 0; at < v.size; at += kTile) {
    const std::size_t n = std::min(kTile, v.size - at);
    for (std::size_t i = 0; i < n; ++i) scratch_[i] = scale * pattern_[(i + param) % kTile];
    ops_->upload(grads + v.offset + at, scratch_.data(), n * sizeof(float));
  }
}

void ReplayModel::backward(const float*, const float*, const float* dlogits, std::size_t batch, float* grads,
                           const std::function<void(std::size_t)>& on_grad_ready) {
  auto deadline = std::chrono::steady_clock::now();
  // The gradient scales with the batch's output gradient (its first column's sum): linear in each
  // sample's share of the loss, as a real model's gradient is.
  float scale = 0;
  for (std::size_t b = 0; b < batch; ++b) {
    float v = 0;
    ops_->download(&v, dlogits + b * num_classes(), sizeof(float));
    scale += v;
  }
  const double n = static_cast<double>(batch);
  std::vector<char> reached(d_->layers.size(), 0);
  for (const BackwardStep& step : d_->backward) {
    reached[step.layer] = 1;
    deadline += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        per_sample(d_->layers[step.layer].backward_us) * n);
    for (std::size_t p : step.grads_ready) write_grads(p, scale, grads);
    std::this_thread::sleep_until(deadline);
    if (on_grad_ready) {
      for (std::size_t p : step.grads_ready) on_grad_ready(p);
    }
  }
  double rest = 0;  // layers backward never reached (none in a describer's output)
  for (std::size_t l = 0; l < d_->layers.size(); ++l) rest += reached[l] ? 0.0 : d_->layers[l].backward_us;
  std::this_thread::sleep_until(deadline +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(per_sample(rest) * n));
}

}  // namespace dpbench
