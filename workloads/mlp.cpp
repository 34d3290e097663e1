#include "workloads/mlp.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

template <typename T>
Mlp<T>::Mlp(std::vector<std::size_t> dims) : dims_(std::move(dims)) {
  if (dims_.size() < 2) throw InputError("mlp: needs at least an input and an output width");
  for (std::size_t d : dims_) {
    if (d == 0) throw InputError("mlp: layer widths must be positive");
  }
  std::size_t offset = 0;
  for (std::size_t l = 0; l < layers(); ++l) {
    const std::size_t in = dims_[l], out = dims_[l + 1];
    views_.push_back({fmt::format("fc{}.weight", l + 1), {out, in}, offset, out * in});
    offset += out * in;
    views_.push_back({fmt::format("fc{}.bias", l + 1), {out}, offset, out});
    offset += out;
  }
  num_params_ = offset;
}

template <typename T>
void Mlp<T>::reserve(std::size_t max_batch, std::shared_ptr<ModelOps<T>> ops) {
  acts_.clear();
  for (auto& d : dact_) d = ModelBuffer<T>();
  ops_ = std::move(ops);
  max_batch_ = max_batch;
  std::size_t widest = 0;
  for (std::size_t l = 0; l + 1 < layers(); ++l) {
    acts_.emplace_back(ops_, MemoryCategory::activations, max_batch * dims_[l + 1]);
    widest = std::max(widest, dims_[l + 1]);
  }
  for (auto& d : dact_) d = ModelBuffer<T>(ops_, MemoryCategory::activations, max_batch * widest);
}

template <typename T>
std::size_t Mlp<T>::activation_bytes(std::size_t max_batch) const {
  std::size_t per_sample = 0, widest = 0;
  for (std::size_t l = 0; l + 1 < layers(); ++l) {
    per_sample += dims_[l + 1];
    widest = std::max(widest, dims_[l + 1]);
  }
  return max_batch * (per_sample + 2 * widest) * sizeof(T);
}

template <typename T>
void Mlp<T>::init_params(T* params, std::uint64_t seed) const {
  std::mt19937_64 rng(seed);
  for (std::size_t l = 0; l < layers(); ++l) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(dims_[l]));
    for (std::size_t v = 2 * l; v < 2 * l + 2; ++v) {
      const ParamView& view = views_[v];
      for (std::size_t i = 0; i < view.size; ++i) {
        // 53 random bits -> [0, 1), then [-bound, bound).
        const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
        params[view.offset + i] = static_cast<T>((2.0 * u - 1.0) * bound);
      }
    }
  }
}

template <typename T>
void Mlp<T>::forward(const T* params, const T* x, std::size_t batch, T* logits) {
  if (batch > max_batch_) {
    throw Error(fmt::format("mlp: batch {} exceeds reserved {}", batch, max_batch_));
  }
  const T* in = x;
  for (std::size_t l = 0; l < layers(); ++l) {
    const bool last = l + 1 == layers();
    T* out = last ? logits : acts_[l].data();
    ops_->linear_forward(in, params + views_[2 * l].offset, params + views_[2 * l + 1].offset, out, batch, dims_[l],
                         dims_[l + 1], !last);
    in = out;
  }
}

template <typename T>
void Mlp<T>::backward(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads,
                      const std::function<void(std::size_t)>& on_grad_ready) {
  backward_to(params, x, dlogits, batch, grads, nullptr, on_grad_ready);
}

template <typename T>
void Mlp<T>::backward_to(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads, T* dx_input,
                         const std::function<void(std::size_t)>& on_grad_ready) {
  const T* dy = dlogits;
  for (std::size_t l = layers(); l-- > 0;) {
    const T* layer_in = l == 0 ? x : acts_[l - 1].data();
    T* dx = l == 0 ? dx_input : dact_[l % 2].data();
    const ParamView& w = views_[2 * l];
    const ParamView& b = views_[2 * l + 1];
    ops_->linear_backward(layer_in, params + w.offset, dy, dx, grads + w.offset, grads + b.offset, batch, dims_[l],
                          dims_[l + 1]);
    if (on_grad_ready) {
      on_grad_ready(2 * l + 1);
      on_grad_ready(2 * l);
    }
    if (dx != nullptr && l > 0) {
      ops_->relu_backward_inplace(acts_[l - 1].data(), dx, batch * dims_[l]);
      dy = dx;
    }
  }
}

template class Mlp<float>;
template class Mlp<double>;

}  // namespace dpbench
