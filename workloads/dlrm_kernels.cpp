#include "workloads/dlrm_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench::cpu {

namespace {
// Index `l` of table `t` in a sample's row; throws Error when it is not a row of the table.
template <typename T>
std::size_t bag_index(const T* row, std::size_t t, std::size_t l, const BagShape& s, std::size_t sample) {
  const T v = row[s.dense + t * s.lookups + l];
  if (!(v >= T(0)) || v >= static_cast<T>(s.rows) || std::floor(v) != v) {
    throw Error(fmt::format("embedding bag: sample {} table {} index {} is not a row of a {}-row table", sample, t,
                            static_cast<double>(v), s.rows));
  }
  return static_cast<std::size_t>(v);
}
}  // namespace

template <typename T>
void embedding_bag_sum_forward(const T* tables, const T* x, T* out, std::size_t batch, const BagShape& s) {
  for (std::size_t b = 0; b < batch; ++b) {
    const T* row = x + b * s.row_stride();
    for (std::size_t t = 0; t < s.tables; ++t) {
      T* o = out + (b * s.tables + t) * s.dim;
      std::fill(o, o + s.dim, T(0));
      const T* table = tables + t * s.rows * s.dim;
      for (std::size_t l = 0; l < s.lookups; ++l) {
        const T* e = table + bag_index(row, t, l, s, b) * s.dim;
        for (std::size_t c = 0; c < s.dim; ++c) o[c] += e[c];
      }
    }
  }
}

template <typename T>
void embedding_bag_sum_backward(const T* x, const T* d_out, T* dtables, std::size_t batch, const BagShape& s) {
  std::memset(dtables, 0, s.tables * s.rows * s.dim * sizeof(T));
  for (std::size_t b = 0; b < batch; ++b) {
    const T* row = x + b * s.row_stride();
    for (std::size_t t = 0; t < s.tables; ++t) {
      const T* g = d_out + (b * s.tables + t) * s.dim;
      T* table = dtables + t * s.rows * s.dim;
      for (std::size_t l = 0; l < s.lookups; ++l) {
        T* e = table + bag_index(row, t, l, s, b) * s.dim;
        for (std::size_t c = 0; c < s.dim; ++c) e[c] += g[c];
      }
    }
  }
}

namespace {
// Feature i (0: z, 1..K: the bags) of sample b.
template <typename T>
const T* feature(const T* z, const T* bags, std::size_t b, std::size_t i, std::size_t tables, std::size_t dim) {
  return i == 0 ? z + b * dim : bags + (b * tables + i - 1) * dim;
}
template <typename T>
T dot(const T* a, const T* b, std::size_t n) {
  T acc = 0;
  for (std::size_t c = 0; c < n; ++c) acc += a[c] * b[c];
  return acc;
}
}  // namespace

template <typename T>
void dot_interaction_forward(const T* z, const T* bags, T* r, std::size_t batch, std::size_t tables, std::size_t dim) {
  const std::size_t width = dim + tables * (tables + 1) / 2;
  for (std::size_t b = 0; b < batch; ++b) {
    T* out = r + b * width;
    std::copy(z + b * dim, z + (b + 1) * dim, out);
    std::size_t p = dim;
    for (std::size_t i = 1; i <= tables; ++i) {
      const T* fi = feature(z, bags, b, i, tables, dim);
      for (std::size_t j = 0; j < i; ++j) out[p++] = dot(fi, feature(z, bags, b, j, tables, dim), dim);
    }
  }
}

template <typename T>
void dot_interaction_backward(const T* z, const T* bags, const T* dr, T* dz, T* dbags, std::size_t batch,
                              std::size_t tables, std::size_t dim) {
  const std::size_t width = dim + tables * (tables + 1) / 2;
  std::fill(dbags, dbags + batch * tables * dim, T(0));
  for (std::size_t b = 0; b < batch; ++b) {
    const T* g = dr + b * width;
    std::copy(g, g + dim, dz + b * dim);
    const auto grad_of = [&](std::size_t i) { return i == 0 ? dz + b * dim : dbags + (b * tables + i - 1) * dim; };
    std::size_t p = dim;
    for (std::size_t i = 1; i <= tables; ++i) {
      const T* fi = feature(z, bags, b, i, tables, dim);
      for (std::size_t j = 0; j < i; ++j, ++p) {
        const T* fj = feature(z, bags, b, j, tables, dim);
        T* gi = grad_of(i);
        T* gj = grad_of(j);
        for (std::size_t c = 0; c < dim; ++c) {
          gi[c] += g[p] * fj[c];
          gj[c] += g[p] * fi[c];
        }
      }
    }
  }
}

template <typename T>
void copy_columns(const T* src, std::size_t src_stride, T* dst, std::size_t width, std::size_t rows) {
  for (std::size_t r = 0; r < rows; ++r) std::copy(src + r * src_stride, src + r * src_stride + width, dst + r * width);
}

#define DPBENCH_DLRM_KERNELS(T)                                                                             \
  template void embedding_bag_sum_forward<T>(const T*, const T*, T*, std::size_t, const BagShape&);         \
  template void embedding_bag_sum_backward<T>(const T*, const T*, T*, std::size_t, const BagShape&);        \
  template void dot_interaction_forward<T>(const T*, const T*, T*, std::size_t, std::size_t, std::size_t);  \
  template void dot_interaction_backward<T>(const T*, const T*, const T*, T*, T*, std::size_t, std::size_t, \
                                            std::size_t);                                                   \
  template void copy_columns<T>(const T*, std::size_t, T*, std::size_t, std::size_t);
DPBENCH_DLRM_KERNELS(float)
DPBENCH_DLRM_KERNELS(double)
#undef DPBENCH_DLRM_KERNELS

}  // namespace dpbench::cpu
