// CUDA kernels of the DLRM workload (cuda/cuda_dlrm_kernels.hpp), laid out as the CNN's: the
// kernels first, then the launchers, which pick the grid, launch on the caller's stream and
// check the launch. Element-wise grids with grid-stride loops; the additions use __fadd_rn and
// __fmul_rn so that nvcc fuses nothing and each output is the CPU loop's, bit for bit.
#include "cuda/cuda_dlrm_kernels.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_cnn_kernels.hpp"

namespace dpbench::cuda {

namespace {

using namespace detail;  // check_cuda, as_stream, kernel_launched

constexpr int kBlock = 256;
constexpr std::size_t kMaxBlocks = 65536;

unsigned grid_for(std::size_t n) { return static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxBlocks)); }

// The row of table t that lookup l of the sample at `row` names; `rows` (an impossible row)
// when the float is not an integer in [0, rows).
__device__ std::size_t bag_row(const float* row, std::size_t t, std::size_t l, const cpu::BagShape s) {
  const float v = row[s.dense + t * s.lookups + l];
  if (!(v >= 0.0f) || v >= static_cast<float>(s.rows) || floorf(v) != v) return s.rows;
  return static_cast<std::size_t>(v);
}

__global__ void embedding_bag_forward_kernel(const float* tables, const float* x, float* out, std::size_t n,
                                             const cpu::BagShape s) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t c = i % s.dim, t = i / s.dim % s.tables, b = i / s.dim / s.tables;
    const float* row = x + b * (s.dense + s.tables * s.lookups);
    const float* table = tables + t * s.rows * s.dim;
    float acc = 0.0f;
    for (std::size_t l = 0; l < s.lookups; ++l) {
      const std::size_t r = bag_row(row, t, l, s);
      acc = r == s.rows ? nanf("") : __fadd_rn(acc, table[r * s.dim + c]);
    }
    out[i] = acc;
  }
}

// One thread per (sample, table, lookup, column): that lookup's gradient float added to its row.
__global__ void embedding_bag_backward_kernel(const float* x, const float* d_out, float* dtables, std::size_t n,
                                              const cpu::BagShape s) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t c = i % s.dim, l = i / s.dim % s.lookups, t = i / s.dim / s.lookups % s.tables,
                      b = i / s.dim / s.lookups / s.tables;
    const std::size_t r = bag_row(x + b * (s.dense + s.tables * s.lookups), t, l, s);
    if (r == s.rows) continue;
    atomicAdd(dtables + (t * s.rows + r) * s.dim + c, d_out[(b * s.tables + t) * s.dim + c]);
  }
}

// Feature i (0: z, 1..K: the bags) of sample b.
__device__ const float* feature(const float* z, const float* bags, std::size_t b, std::size_t i, std::size_t tables,
                                std::size_t dim) {
  return i == 0 ? z + b * dim : bags + (b * tables + i - 1) * dim;
}

// The pair (i, j), j < i, at position q of the lower triangle read row by row.
__device__ void pair_at(std::size_t q, std::size_t& i, std::size_t& j) {
  i = 1;
  while (q >= i) q -= i++;
  j = q;
}

__global__ void dot_interaction_forward_kernel(const float* z, const float* bags, float* r, std::size_t n,
                                               std::size_t tables, std::size_t dim) {
  const std::size_t width = dim + tables * (tables + 1) / 2;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t b = k / width, p = k % width;
    if (p < dim) {
      r[k] = z[b * dim + p];
      continue;
    }
    std::size_t i = 0, j = 0;
    pair_at(p - dim, i, j);
    const float* fi = feature(z, bags, b, i, tables, dim);
    const float* fj = feature(z, bags, b, j, tables, dim);
    float acc = 0.0f;
    for (std::size_t c = 0; c < dim; ++c) acc = __fadd_rn(acc, __fmul_rn(fi[c], fj[c]));
    r[k] = acc;
  }
}

// Feature k's gradient at column c of sample b: z's starts from dr's copy, a bag's from 0; then
// the pairs (k, j) for j < k and (i, k) for i > k in the order of their positions p, as the CPU
// loop adds them.
__global__ void dot_interaction_backward_kernel(const float* z, const float* bags, const float* dr, float* dz,
                                                float* dbags, std::size_t n, std::size_t tables, std::size_t dim) {
  const std::size_t width = dim + tables * (tables + 1) / 2;
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t c = k % dim, f = k / dim % (tables + 1), b = k / dim / (tables + 1);
    const float* g = dr + b * width;
    float acc = f == 0 ? g[c] : 0.0f;
    for (std::size_t j = 0; j < f; ++j) {  // pair (f, j) at p = dim + f(f-1)/2 + j
      acc = __fadd_rn(acc, __fmul_rn(g[dim + f * (f - 1) / 2 + j], feature(z, bags, b, j, tables, dim)[c]));
    }
    for (std::size_t i = f + 1; i <= tables; ++i) {  // pair (i, f) at p = dim + i(i-1)/2 + f
      acc = __fadd_rn(acc, __fmul_rn(g[dim + i * (i - 1) / 2 + f], feature(z, bags, b, i, tables, dim)[c]));
    }
    if (f == 0) {
      dz[b * dim + c] = acc;
    } else {
      dbags[(b * tables + f - 1) * dim + c] = acc;
    }
  }
}

__global__ void copy_columns_kernel(const float* src, std::size_t src_stride, float* dst, std::size_t width,
                                    std::size_t n) {
  for (std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dst[k] = src[k / width * src_stride + k % width];
  }
}

}  // namespace

void embedding_bag_sum_forward(const float* tables, const float* x, float* out, std::size_t batch,
                               const cpu::BagShape& s, void* stream) {
  const std::size_t n = batch * s.tables * s.dim;
  if (n == 0) return;
  embedding_bag_forward_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(tables, x, out, n, s);
  DPBENCH_CUDA_CHECK("embedding_bag_sum_forward", kernel_launched());
}

void embedding_bag_sum_backward(const float* x, const float* d_out, float* dtables, std::size_t batch,
                                const cpu::BagShape& s, void* stream) {
  constexpr const char* kLauncher = "embedding_bag_sum_backward";
  const std::size_t table_floats = s.tables * s.rows * s.dim;
  if (table_floats == 0) return;
  DPBENCH_CUDA_CHECK(kLauncher, cudaMemsetAsync(dtables, 0, sizeof(float) * table_floats, as_stream(stream)));
  const std::size_t n = batch * s.tables * s.lookups * s.dim;
  if (n == 0) return;
  embedding_bag_backward_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(x, d_out, dtables, n, s);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void dot_interaction_forward(const float* z, const float* bags, float* r, std::size_t batch, std::size_t tables,
                             std::size_t dim, void* stream) {
  const std::size_t n = batch * (dim + tables * (tables + 1) / 2);
  if (n == 0) return;
  dot_interaction_forward_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(z, bags, r, n, tables, dim);
  DPBENCH_CUDA_CHECK("dot_interaction_forward", kernel_launched());
}

void dot_interaction_backward(const float* z, const float* bags, const float* dr, float* dz, float* dbags,
                              std::size_t batch, std::size_t tables, std::size_t dim, void* stream) {
  const std::size_t n = batch * (tables + 1) * dim;
  if (n == 0) return;
  dot_interaction_backward_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(z, bags, dr, dz, dbags, n, tables,
                                                                                 dim);
  DPBENCH_CUDA_CHECK("dot_interaction_backward", kernel_launched());
}

void copy_columns(const float* src, std::size_t src_stride, float* dst, std::size_t width, std::size_t rows,
                  void* stream) {
  const std::size_t n = width * rows;
  if (n == 0) return;
  copy_columns_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(src, src_stride, dst, width, n);
  DPBENCH_CUDA_CHECK("copy_columns", kernel_launched());
}

// ---- ModelLaunchers' DLRM kernels (cuda/cuda_cnn_kernels.hpp) -----------------------------------

void ModelLaunchers::embedding_bag_sum_forward(const float* tables, const float* x, float* out, std::size_t batch,
                                               const cpu::BagShape& s) {
  cuda::embedding_bag_sum_forward(tables, x, out, batch, s, stream());
}
void ModelLaunchers::embedding_bag_sum_backward(const float* x, const float* d_out, float* dtables, std::size_t batch,
                                                const cpu::BagShape& s) {
  cuda::embedding_bag_sum_backward(x, d_out, dtables, batch, s, stream());
}
void ModelLaunchers::dot_interaction_forward(const float* z, const float* bags, float* r, std::size_t batch,
                                             std::size_t tables, std::size_t dim) {
  cuda::dot_interaction_forward(z, bags, r, batch, tables, dim, stream());
}
void ModelLaunchers::dot_interaction_backward(const float* z, const float* bags, const float* dr, float* dz,
                                              float* dbags, std::size_t batch, std::size_t tables, std::size_t dim) {
  cuda::dot_interaction_backward(z, bags, dr, dz, dbags, batch, tables, dim, stream());
}
void ModelLaunchers::copy_columns(const float* src, std::size_t src_stride, float* dst, std::size_t width,
                                  std::size_t rows) {
  cuda::copy_columns(src, src_stride, dst, width, rows, stream());
}

}  // namespace dpbench::cuda
