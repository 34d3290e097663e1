#include "workloads/dlrm.hpp"

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/hash_stream.hpp"

namespace dpbench {

void check_dlrm_shape(const DlrmShape& s) {
  const auto positive = [](std::size_t v, const char* option) {
    if (v == 0) throw InputError(fmt::format("{} 0: must be at least 1", option));
  };
  positive(s.dense_features, "--dense-features");
  positive(s.tables, "--tables");
  positive(s.rows, "--rows");
  positive(s.dim, "--embedding-dim");
  positive(s.lookups, "--lookups");
  for (std::size_t w : s.bottom) positive(w, "--bottom-mlp width");
  for (std::size_t w : s.top) positive(w, "--top-mlp width");
  if (s.rows > kDlrmMaxRows) {
    throw InputError(fmt::format("--rows {}: at most {} (row indices travel as exact floats)", s.rows, kDlrmMaxRows));
  }
  constexpr std::size_t kMaxInput = std::numeric_limits<std::int32_t>::max();
  if (s.lookups > kMaxInput / s.tables || s.dense_features > kMaxInput - s.tables * s.lookups) {
    throw InputError(fmt::format("--tables {} x --lookups {} + --dense-features {}: more than {} input floats per "
                                 "sample",
                                 s.tables, s.lookups, s.dense_features, kMaxInput));
  }
  if (s.tables > std::numeric_limits<std::size_t>::max() / s.rows / s.dim / sizeof(double)) {
    throw InputError(
        fmt::format("--tables {} x --rows {} x --embedding-dim {}: too many parameters", s.tables, s.rows, s.dim));
  }
}

namespace {
std::vector<std::size_t> widths(std::size_t in, const std::vector<std::size_t>& hidden, std::size_t out) {
  std::vector<std::size_t> dims{in};
  dims.insert(dims.end(), hidden.begin(), hidden.end());
  dims.push_back(out);
  return dims;
}
const DlrmShape& checked(const DlrmShape& s) {
  check_dlrm_shape(s);
  return s;
}
}  // namespace

template <typename T>
Dlrm<T>::Dlrm(DlrmShape shape)
    : shape_(checked(shape)),
      bottom_(widths(shape_.dense_features, shape_.bottom, shape_.dim)),
      top_(widths(shape_.interaction_width(), shape_.top, 2)) {
  std::size_t offset = 0;
  for (std::size_t t = 0; t < shape_.tables; ++t) {
    views_.push_back({fmt::format("emb_l.{}.weight", t), {shape_.rows, shape_.dim}, offset, shape_.rows * shape_.dim});
    offset += shape_.rows * shape_.dim;
  }
  const auto add_mlp = [&](const Mlp<T>& mlp, const char* name, std::size_t& base) {
    base = offset;
    for (std::size_t v = 0; v < mlp.params().size(); ++v) {
      const ParamView& p = mlp.params()[v];
      views_.push_back({fmt::format("{}.{}.{}", name, 2 * (v / 2), v % 2 == 0 ? "weight" : "bias"), p.shape,
                        base + p.offset, p.size});
    }
    offset += mlp.num_params();
  };
  add_mlp(bottom_, "bot_l", bottom_offset_);
  add_mlp(top_, "top_l", top_offset_);
  num_params_ = offset;
}

template <typename T>
void Dlrm<T>::reserve(std::size_t max_batch, std::shared_ptr<ModelOps<T>> ops) {
  ops_ = std::move(ops);
  max_batch_ = max_batch;
  bottom_.reserve(max_batch, ops_);
  top_.reserve(max_batch, ops_);
  const auto buffer = [&](std::size_t per_sample) {
    return ModelBuffer<T>(ops_, MemoryCategory::activations, max_batch * per_sample);
  };
  dense_ = buffer(shape_.dense_features);
  z_ = buffer(shape_.dim);
  dz_ = buffer(shape_.dim);
  bags_ = buffer(shape_.tables * shape_.dim);
  dbags_ = buffer(shape_.tables * shape_.dim);
  r_ = buffer(shape_.interaction_width());
  dr_ = buffer(shape_.interaction_width());
}

template <typename T>
std::size_t Dlrm<T>::activation_bytes(std::size_t max_batch) const {
  const std::size_t per_sample = shape_.dense_features + 2 * shape_.dim + 2 * shape_.tables * shape_.dim +
                                 2 * shape_.interaction_width();
  return bottom_.activation_bytes(max_batch) + top_.activation_bytes(max_batch) + max_batch * per_sample * sizeof(T);
}

namespace {
constexpr std::uint64_t kTableTag = 0x656d625f7461626cull;
constexpr std::uint64_t kBottomTag = 0x626f74746f6d5f6cull;
constexpr std::uint64_t kTopTag = 0x746f705f6d6c705full;
}  // namespace

template <typename T>
void init_table_rows(const DlrmShape& shape, std::uint64_t seed, std::size_t table, std::size_t row_begin,
                     std::size_t row_end, T* out) {
  const double bound = std::sqrt(1.0 / static_cast<double>(shape.rows));
  const std::uint64_t key = hash3(seed, kTableTag, table);
  for (std::size_t r = row_begin; r < row_end; ++r) {
    const std::uint64_t row_key = splitmix64(key ^ (r * 0x9e3779b97f4a7c15ull));
    for (std::size_t c = 0; c < shape.dim; ++c) {
      *out++ = static_cast<T>((2.0 * unit53(splitmix64(row_key + c)) - 1.0) * bound);
    }
  }
}

template <typename T>
void Dlrm<T>::init_params(T* params, std::uint64_t seed) const {
  for (std::size_t t = 0; t < shape_.tables; ++t) {
    init_table_rows(shape_, seed, t, 0, shape_.rows, params + t * shape_.rows * shape_.dim);
  }
  bottom_.init_params(params + bottom_offset_, splitmix64(seed ^ kBottomTag));
  top_.init_params(params + top_offset_, splitmix64(seed ^ kTopTag));
}

template <typename T>
void Dlrm<T>::forward(const T* params, const T* x, std::size_t batch, T* logits) {
  if (batch > max_batch_) throw Error(fmt::format("dlrm: batch {} exceeds reserved {}", batch, max_batch_));
  const cpu::BagShape s = shape_.bags();
  ops_->copy_columns(x, s.row_stride(), dense_.data(), s.dense, batch);
  bottom_.forward(params + bottom_offset_, dense_.data(), batch, z_.data());
  ops_->relu_inplace(z_.data(), batch * s.dim);
  ops_->embedding_bag_sum_forward(params, x, bags_.data(), batch, s);
  ops_->dot_interaction_forward(z_.data(), bags_.data(), r_.data(), batch, s.tables, s.dim);
  top_.forward(params + top_offset_, r_.data(), batch, logits);
}

template <typename T>
void Dlrm<T>::backward(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads,
                       const std::function<void(std::size_t)>& on_grad_ready) {
  const cpu::BagShape s = shape_.bags();
  const auto shifted = [&on_grad_ready](std::size_t first) -> std::function<void(std::size_t)> {
    if (!on_grad_ready) return {};
    return [&on_grad_ready, first](std::size_t i) { on_grad_ready(first + i); };
  };
  const std::size_t bottom_first = shape_.tables, top_first = bottom_first + bottom_.params().size();
  top_.backward_to(params + top_offset_, r_.data(), dlogits, batch, grads + top_offset_, dr_.data(),
                   shifted(top_first));
  ops_->dot_interaction_backward(z_.data(), bags_.data(), dr_.data(), dz_.data(), dbags_.data(), batch, s.tables,
                                 s.dim);
  ops_->relu_backward_inplace(z_.data(), dz_.data(), batch * s.dim);
  bottom_.backward(params + bottom_offset_, dense_.data(), dz_.data(), batch, grads + bottom_offset_,
                   shifted(bottom_first));
  ops_->embedding_bag_sum_backward(x, dbags_.data(), grads, batch, s);
  if (on_grad_ready) {
    for (std::size_t t = shape_.tables; t-- > 0;) on_grad_ready(t);
  }
}

template class Dlrm<float>;
template class Dlrm<double>;
template void init_table_rows<float>(const DlrmShape&, std::uint64_t, std::size_t, std::size_t, std::size_t, float*);
template void init_table_rows<double>(const DlrmShape&, std::uint64_t, std::size_t, std::size_t, std::size_t, double*);

}  // namespace dpbench
