// CUDA kernels of the CNN workload (cuda/cuda_cnn_kernels.hpp), laid out as llm.c lays out
// a layer: the kernels first, then the launchers, which pick the grid, launch on the caller's
// stream and check cudaGetLastError(). The convolution runs over chunks of samples
// (workloads/conv_layout.hpp): im2col + one cuBLAS GEMM on row-major data (derivation at gemm()
// below) + a permute, and a gathering col2im; BatchNorm's and the bias gradient's reductions are
// a 2-D grid (channels x slices) in double with a fixed-order second pass. Where the CPU rounds
// each float or double operation on its own, the kernels use the _rn intrinsics so that nvcc
// fuses nothing into an FMA and the result is the CPU's bit for bit (given the same inputs).
#include "cuda/cuda_cnn_kernels.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/error_location.hpp"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_gemm.cuh"
#include "workloads/conv_layout.hpp"

namespace dpbench::cuda {

namespace {

constexpr int kBlock = 256;                           // threads per block, element-wise kernels
constexpr int kReduceBlock = 256;                     // threads per block, per-channel reductions (2^k)
constexpr std::size_t kMaxBlocks = 65536;             // element-wise grids stop here and grid-stride
constexpr std::size_t kMaxSlices = kReduceMaxSlices;  // blocks per channel, reductions

// ---------------------------------------------------------------------------------------------
// Error checks. A failure throws Error("cuda: <launcher>: <cause> at <file>:<line>").

using namespace detail;  // fail, check_cuda, check_cublas, check_launch, as_stream, to_int

// Blocks for a grid-stride loop over n elements (n > 0).
unsigned grid_for(std::size_t n) { return static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxBlocks)); }

// A reduction's grid: one row of `slices` blocks per channel (channels > 0); the grid's x
// dimension holds 2^31-1.
dim3 grid_for_channels(std::size_t channels, std::size_t slices, const char* launcher) {
  if (channels > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("cuda: {}: {} channels need more blocks than a grid holds", launcher, channels));
  }
  return dim3(static_cast<unsigned>(channels), static_cast<unsigned>(slices));
}

// Slices per channel for m = N*HW values: about 4 values per thread, at least 1, at most
// kMaxSlices.
std::size_t reduce_slices(std::size_t m) {
  const std::size_t per_block = 4 * static_cast<std::size_t>(kReduceBlock);
  return std::clamp<std::size_t>((m + per_block - 1) / per_block, 1, kMaxSlices);
}

// As cpu::conv2d's check_shape: InputError when the kernel does not fit the padded input or a
// GEMM dimension exceeds cuBLAS's int arguments.
void check_conv_shape(const cpu::ConvShape& s, const char* launcher) {
  if (s.R == 0 || s.S == 0 || s.H + 2 * s.pad < s.R || s.W + 2 * s.pad < s.S) {
    throw InputError(fmt::format("cuda: {}: kernel {}x{} does not fit input {}x{} with padding {}", launcher, s.R, s.S,
                                 s.H, s.W, s.pad));
  }
  const std::size_t crs = s.C * s.R * s.S, pq = s.P() * s.Q();
  if (crs > INT_MAX || pq > INT_MAX || s.K > INT_MAX) {
    throw InputError(
        fmt::format("cuda: {}: GEMM dimensions K={} CRS={} PQ={} exceed int range", launcher, s.K, crs, pq));
  }
}

void check_pool_shape(std::size_t N, std::size_t C, std::size_t H, std::size_t W, const char* launcher) {
  if (H % 2 != 0 || W % 2 != 0) {
    throw InputError(fmt::format("cuda: {}: input {}x{} is not even in both dimensions", launcher, H, W));
  }
  if (N * C * H * W > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("cuda: {}: {} elements exceed int32 argmax indices", launcher, N * C * H * W));
  }
}

void check_count(double count, const char* launcher) {
  if (!(count > 0)) {
    throw InputError(fmt::format("cuda: {}: count {} must be positive", launcher, count));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Kernels

namespace {

// First index of a grid-stride loop, and its stride.
__device__ std::size_t global_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// Sums a and b over the block (blockDim.x == kReduceBlock) by a fixed tree in shared memory, so
// the result does not depend on scheduling; every thread gets the totals. Every thread of the
// block must call it (it synchronises).
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kReduceBlock];
  __shared__ double sb[kReduceBlock];
  const int t = threadIdx.x;
  sa[t] = a;
  sb[t] = b;
  __syncthreads();
  for (int stride = kReduceBlock / 2; stride > 0; stride /= 2) {
    if (t < stride) {
      sa[t] += sa[t + stride];
      sb[t] += sb[t + stride];
    }
    __syncthreads();
  }
  a = sa[0];
  b = sb[0];
  __syncthreads();  // everyone has read the totals before a next call overwrites sa / sb
}

// A chunk of n samples (workloads/conv_layout.hpp): one thread per element of col
// [C*R*S, n*P*Q] (consecutive threads, consecutive q), the index math of conv::im2col_source.
__global__ void im2col_kernel(const float* x, float* col, cpu::ConvShape s, std::size_t n) {
  const std::size_t total = s.crs() * n * s.pq();
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    std::size_t src = 0;
    col[i] = conv::im2col_source(s, n, i, &src) ? x[src] : 0.0f;
  }
}

// A chunk of n samples: the adjoint of im2col as a gather, one thread per element of dx
// [n, C, H, W], conv::col2im_gather (the CPU's addition order, so the CPU's result bit for bit
// for the same col); dx is overwritten (no zeroing, no atomics).
__global__ void col2im_kernel(const float* col, float* dx, cpu::ConvShape s, std::size_t n) {
  const std::size_t total = n * s.C * s.H * s.W;
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    dx[i] = conv::col2im_gather(col, s, n, i);
  }
}

// The forward GEMM's out [K, n*P*Q] permuted into the chunk's y [n, K, P, Q], adding b[k] when b
// is not null (one float addition, as the CPU).
__global__ void out_to_nchw_kernel(const float* out, const float* b, float* y, cpu::ConvShape s, std::size_t n) {
  const std::size_t total = s.K * n * s.pq(), cols = n * s.pq();
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    y[conv::nchw_of_out(s, n, i)] = b != nullptr ? __fadd_rn(out[i], b[i / cols]) : out[i];
  }
}

// The chunk's dy [n, K, P, Q] permuted into out [K, n*P*Q] for the backward GEMMs.
__global__ void nchw_to_out_kernel(const float* dy, float* out, cpu::ConvShape s, std::size_t n) {
  const std::size_t total = s.K * n * s.pq();
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    out[i] = dy[conv::nchw_of_out(s, n, i)];
  }
}

// ---- per-channel reductions over x [N, C, HW]: a 2-D grid, then a fixed-order second pass -----
// Block (c, slice) adds Term's two double terms over slice `slice` of channel c's N*HW values
// (contiguous ranges of equal length, the last shorter) by a fixed tree and writes them to
// partials[c * slices + slice] and partials[(C + c) * slices + slice]; a second kernel adds a
// channel's partials in slice order. The slices depend on N*HW only, so the result does not
// depend on scheduling: two runs give the same bits.

template <typename Term>
__global__ void channel_partials_kernel(Term term, std::size_t N, std::size_t C, std::size_t HW, std::size_t slices,
                                        double* partials) {
  const std::size_t c = blockIdx.x, slice = blockIdx.y;
  const std::size_t m = N * HW, len = (m + slices - 1) / slices;
  const std::size_t lo = slice * len, hi = lo + len < m ? lo + len : m;
  double a = 0.0, b = 0.0;
  for (std::size_t j = lo + threadIdx.x; j < hi; j += kReduceBlock) {
    const std::size_t n = j / HW, i = j - n * HW;
    term(c, (n * C + c) * HW + i, a, b);
  }
  block_sum2(a, b);
  if (threadIdx.x == 0) {
    partials[c * slices + slice] = a;
    partials[(C + c) * slices + slice] = b;
  }
}

// Channel c's totals of channel_partials_kernel, added in slice order.
__device__ void channel_totals(const double* partials, std::size_t C, std::size_t slices, std::size_t c, double& a,
                               double& b) {
  a = 0.0;
  b = 0.0;
  for (std::size_t k = 0; k < slices; ++k) {
    a += partials[c * slices + k];
    b += partials[(C + c) * slices + k];
  }
}

// Terms: x (sum) and x^2 (sum of squares; exact in double, a float squared has at most 48
// significant bits).
struct SumAndSquares {
  const float* x;
  __device__ void operator()(std::size_t, std::size_t i, double& a, double& b) const {
    const double v = static_cast<double>(x[i]);
    a += v;
    b += v * v;
  }
};

// Terms: x, and nothing.
struct Sum {
  const float* x;
  __device__ void operator()(std::size_t, std::size_t i, double& a, double&) const { a += static_cast<double>(x[i]); }
};

// Terms: dy and dy * (x - mean[c]).
struct DyAndDyXmu {
  const float* dy;
  const float* x;
  const float* mean;
  __device__ void operator()(std::size_t c, std::size_t i, double& a, double& b) const {
    const double g = static_cast<double>(dy[i]);
    a += g;
    b += g * (static_cast<double>(x[i]) - static_cast<double>(mean[c]));
  }
};

// sum[c], sumsq[c] = the totals (batchnorm_local_sums), one thread per channel.
__global__ void sums_from_partials_kernel(const double* partials, std::size_t C, std::size_t slices, double* sum,
                                          double* sumsq) {
  for (std::size_t c = global_index(); c < C; c += grid_stride()) {
    channel_totals(partials, C, slices, c, sum[c], sumsq[c]);
  }
}

// sum_dy, sum_dy_xmu and dgamma = sum_dy_xmu * invstd, dbeta = sum_dy
// (batchnorm_backward_reduce), one thread per channel.
__global__ void backward_sums_from_partials_kernel(const double* partials, std::size_t C, std::size_t slices,
                                                   const float* invstd, double* sum_dy, double* sum_dy_xmu,
                                                   float* dgamma, float* dbeta) {
  for (std::size_t c = global_index(); c < C; c += grid_stride()) {
    double s = 0.0, sx = 0.0;
    channel_totals(partials, C, slices, c, s, sx);
    sum_dy[c] = s;
    sum_dy_xmu[c] = sx;
    dgamma[c] = static_cast<float>(__dmul_rn(sx, static_cast<double>(invstd[c])));
    dbeta[c] = static_cast<float>(s);
  }
}

// db[k] = float(the total of dy over N*P*Q), rounded once as on the CPU.
__global__ void bias_grad_from_partials_kernel(const double* partials, std::size_t K, std::size_t slices, float* db) {
  for (std::size_t k = global_index(); k < K; k += grid_stride()) {
    double s = 0.0, unused = 0.0;
    channel_totals(partials, K, slices, k, s, unused);
    db[k] = static_cast<float>(s);
  }
}

// One thread per output of 2x2 / stride-2 pooling over x [NC, H, W]: the window is scanned in
// row-major order and strict > keeps the first maximum, as cpu::maxpool2x2_forward.
__global__ void maxpool2x2_forward_kernel(const float* x, float* y, std::int32_t* argmax, std::size_t n_out,
                                          std::size_t H, std::size_t W) {
  const std::size_t Ho = H / 2, Wo = W / 2;
  for (std::size_t o = global_index(); o < n_out; o += grid_stride()) {
    const std::size_t j = o % Wo;
    const std::size_t i = (o / Wo) % Ho;
    const std::size_t nc = o / (Ho * Wo);
    std::size_t best = nc * H * W + 2 * i * W + 2 * j;
    const std::size_t cand[3] = {best + 1, best + W, best + W + 1};
    for (int k = 0; k < 3; ++k) {
      if (x[cand[k]] > x[best]) best = cand[k];
    }
    y[o] = x[best];
    argmax[o] = static_cast<std::int32_t>(best);
  }
}

// One thread per output: writes the four elements of its window, dy[o] at argmax[o] and 0
// elsewhere. The windows tile dx (H, W even), so every element is written exactly once.
// 0.0f + dy[o] is what the CPU's zero fill then += gives (it turns -0 into +0).
__global__ void maxpool2x2_backward_kernel(const float* dy, const std::int32_t* argmax, float* dx, std::size_t n_out,
                                           std::size_t H, std::size_t W) {
  const std::size_t Ho = H / 2, Wo = W / 2;
  for (std::size_t o = global_index(); o < n_out; o += grid_stride()) {
    const std::size_t j = o % Wo;
    const std::size_t i = (o / Wo) % Ho;
    const std::size_t nc = o / (Ho * Wo);
    const std::size_t base = nc * H * W + 2 * i * W + 2 * j;
    const std::size_t window[4] = {base, base + 1, base + W, base + W + 1};
    const std::size_t target = static_cast<std::size_t>(argmax[o]);
    const float v = __fadd_rn(0.0f, dy[o]);
    for (int k = 0; k < 4; ++k) dx[window[k]] = window[k] == target ? v : 0.0f;
  }
}

// As std::max(v, 0.0f): (v < 0) ? 0 : v, so NaN and -0 pass through unchanged.
__global__ void relu_kernel(float* y, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float v = y[i];
    y[i] = v < 0.0f ? 0.0f : v;
  }
}

// One thread per channel; the arithmetic of cpu::batchnorm_finalize_stats, each double
// operation rounded on its own (sqrt and division are IEEE-exact in CUDA's double).
__global__ void batchnorm_finalize_stats_kernel(const double* sum, const double* sumsq, double count, std::size_t C,
                                                float eps, float momentum, float* mean, float* invstd,
                                                float* running_mean, float* running_var) {
  const double m = static_cast<double>(momentum);
  for (std::size_t c = global_index(); c < C; c += grid_stride()) {
    const double mu = __ddiv_rn(sum[c], count);
    // Biased variance; clamped because E[x^2] - E[x]^2 can round below zero.
    // Written as std::max(d, 0.0) evaluates it: (d < 0) ? 0 : d.
    const double d = __dsub_rn(__ddiv_rn(sumsq[c], count), __dmul_rn(mu, mu));
    const double var = d < 0.0 ? 0.0 : d;
    mean[c] = static_cast<float>(mu);
    invstd[c] = static_cast<float>(__ddiv_rn(1.0, sqrt(__dadd_rn(var, static_cast<double>(eps)))));
    if (running_mean != nullptr) {
      running_mean[c] = static_cast<float>(
          __dadd_rn(__dmul_rn(__dsub_rn(1.0, m), static_cast<double>(running_mean[c])), __dmul_rn(m, mu)));
    }
    if (running_var != nullptr) {
      const double unbiased = count > 1 ? __ddiv_rn(__dmul_rn(var, count), __dsub_rn(count, 1.0)) : var;
      running_var[c] = static_cast<float>(
          __dadd_rn(__dmul_rn(__dsub_rn(1.0, m), static_cast<double>(running_var[c])), __dmul_rn(m, unbiased)));
    }
  }
}

// y = (x - mean) * (gamma * invstd) + beta, one thread per element of [N, C, HW].
__global__ void batchnorm_normalize_kernel(const float* x, const float* mean, const float* invstd, const float* gamma,
                                           const float* beta, float* y, std::size_t n, std::size_t C, std::size_t HW) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const std::size_t c = (i / HW) % C;
    const float scale = __fmul_rn(gamma[c], invstd[c]);
    y[i] = __fadd_rn(__fmul_rn(__fsub_rn(x[i], mean[c]), scale), beta[c]);
  }
}

// dx = (dy - mean_dy - (x - mean) * k) * scale, one thread per element, with (as ATen's
// batch_norm_backward_elemt and cpu::batchnorm_backward_elemt) mean_dy = sum_dy / count and
// k = invstd^2 * sum_dy_xmu / count computed in double and rounded to float, scale = gamma *
// invstd in float.
__global__ void batchnorm_backward_elemt_kernel(const float* dy, const float* x, const float* mean, const float* invstd,
                                                const float* gamma, const double* sum_dy, const double* sum_dy_xmu,
                                                double count, float* dx, std::size_t n, std::size_t C, std::size_t HW) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const std::size_t c = (i / HW) % C;
    const double is = static_cast<double>(invstd[c]);
    const float mean_dy = static_cast<float>(__ddiv_rn(sum_dy[c], count));
    const float k = static_cast<float>(__ddiv_rn(__dmul_rn(__dmul_rn(is, is), sum_dy_xmu[c]), count));
    const float scale = __fmul_rn(gamma[c], invstd[c]);
    const float centred = __fsub_rn(x[i], mean[c]);
    dx[i] = __fmul_rn(__fsub_rn(__fsub_rn(dy[i], mean_dy), __fmul_rn(centred, k)), scale);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Launchers

namespace {

// Row-major GEMMs through column-major cuBLAS, without copies or transposes in memory (the same
// derivation as in cuda/cuda_kernels.cu).
//
// A row-major matrix M with r rows and c columns (leading dimension c) is, read column-major
// with leading dimension c, the matrix M^T (c rows, r columns). So every row-major product is
// computed as its transpose: for C = A . B (row-major), cuBLAS computes C^T = B^T . A^T, whose
// operands are the row-major buffers read column-major as they are. In cuBLAS's terms
// (m, n, k: op(A) is m x k, op(B) is k x n, C is m x n, all column-major), with CRS = C*R*S and
// NPQ = n*P*Q for a chunk of n samples (workloads/conv_layout.hpp: col [CRS, NPQ], out [K, NPQ]):
//
//   forward   out[K, NPQ] = w[K, CRS] . col[CRS, NPQ]
//             out^T (NPQ x K) = col^T (NPQ x CRS) . w^T (CRS x K)
//             col's buffer read column-major is col^T (NPQ x CRS, ld NPQ) -> op N
//             w's buffer read column-major is w^T (CRS x K, ld CRS)       -> op N
//             gemm(N, N, m = NPQ, n = K, k = CRS, A = col, lda = NPQ, B = w, ldb = CRS,
//                  C = out, ldc = NPQ)
//
//   dw        dw[K, CRS] += out[K, NPQ] . col[CRS, NPQ]^T   (out holding dy permuted)
//             dw^T (CRS x K) += col (CRS x NPQ) . out^T (NPQ x K)
//             col's buffer is col^T (NPQ x CRS, ld NPQ) -> op T gives col
//             out's buffer is out^T (NPQ x K, ld NPQ)   -> op N
//             gemm(T, N, m = CRS, n = K, k = NPQ, A = col, lda = NPQ, B = out, ldb = NPQ,
//                  C = dw, ldc = CRS), beta 0 for the first chunk and 1 after
//
//   dcol      dcol[CRS, NPQ] = w^T[CRS, K] . out[K, NPQ]
//             dcol^T (NPQ x CRS) = out^T (NPQ x K) . w (K x CRS)
//             out's buffer is out^T (NPQ x K, ld NPQ) -> op N
//             w's buffer is w^T (CRS x K, ld CRS)     -> op T gives w
//             gemm(N, T, m = NPQ, n = CRS, k = K, A = out, lda = NPQ, B = w, ldb = CRS,
//                  C = dcol, ldc = NPQ)
//
// gemm(): cuda/cuda_gemm.cuh.

// One element-wise kernel over `total` elements (> 0) of a chunk of n samples.
template <typename Kernel, typename... Args>
void launch_chunk_kernel(Kernel kernel, std::size_t total, const char* launcher, void* stream, Args... args) {
  if (total == 0) return;
  kernel<<<grid_for(total), kBlock, 0, as_stream(stream)>>>(args...);
  DPBENCH_CUDA_CHECK(launcher, kernel_launched());
}

// Totals per channel of x [N, C, HW] by a Term: channel_partials_kernel's 2-D grid into
// partials (reduce_partials_size(C) doubles), then `finish` with the slice count (C > 0).
template <typename Term, typename Finish>
void reduce_channels(Term term, std::size_t N, std::size_t C, std::size_t HW, double* partials, const char* launcher,
                     void* stream, Finish finish) {
  const std::size_t slices = reduce_slices(N * HW);
  channel_partials_kernel<<<grid_for_channels(C, slices, launcher), kReduceBlock, 0, as_stream(stream)>>>(
      term, N, C, HW, slices, partials);
  DPBENCH_CUDA_CHECK(launcher, kernel_launched());
  finish(slices);
  DPBENCH_CUDA_CHECK(launcher, kernel_launched());
}

}  // namespace

void conv2d_forward(Blas& blas, const float* x, const float* w, const float* b, float* y, const cpu::ConvShape& s,
                    float* ws, void* stream) {
  constexpr const char* kLauncher = "conv2d_forward";
  check_conv_shape(s, kLauncher);
  const std::size_t crs = s.crs(), pq = s.pq(), chw = s.C * s.H * s.W, chunk = s.chunk();
  for (std::size_t n0 = 0; n0 < s.N; n0 += chunk) {
    const std::size_t n = std::min(chunk, s.N - n0), cols = n * pq;
    float* col = ws;
    float* out = ws + crs * cols;
    launch_chunk_kernel(im2col_kernel, crs * cols, kLauncher, stream, x + n0 * chw, col, s, n);
    gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_N, cols, s.K, crs, col, cols, w, crs, 0.0f, out, cols, stream);
    launch_chunk_kernel(out_to_nchw_kernel, s.K * cols, kLauncher, stream, static_cast<const float*>(out), b,
                        y + n0 * s.K * pq, s, n);
  }
}

void conv2d_backward(Blas& blas, const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const cpu::ConvShape& s, float* ws, double* partials, void* stream) {
  constexpr const char* kLauncher = "conv2d_backward";
  check_conv_shape(s, kLauncher);
  const std::size_t crs = s.crs(), pq = s.pq(), chw = s.C * s.H * s.W, chunk = s.chunk();
  if (s.N == 0 && s.K * crs > 0) {  // an empty sum: zeros, as the CPU's fill
    DPBENCH_CUDA_CHECK(kLauncher, cudaMemsetAsync(dw, 0, sizeof(float) * s.K * crs, as_stream(stream)));
  }
  for (std::size_t n0 = 0; n0 < s.N; n0 += chunk) {
    const std::size_t n = std::min(chunk, s.N - n0), cols = n * pq;
    float* col = ws;
    float* out = ws + crs * cols;
    launch_chunk_kernel(im2col_kernel, crs * cols, kLauncher, stream, x + n0 * chw, col, s, n);
    launch_chunk_kernel(nchw_to_out_kernel, s.K * cols, kLauncher, stream, dy + n0 * s.K * pq, out, s, n);
    // dw[K, CRS] (+)= out[K, NPQ] . col[CRS, NPQ]^T: the first chunk overwrites dw.
    gemm(blas, kLauncher, CUBLAS_OP_T, CUBLAS_OP_N, crs, s.K, cols, col, cols, out, cols, n0 == 0 ? 0.0f : 1.0f, dw,
         crs, stream);
    if (dx != nullptr) {
      // dcol[CRS, NPQ] = w^T . out over col (stream order: after the dw GEMM has read col),
      // then gathered onto the chunk's dx.
      gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_T, cols, crs, s.K, out, cols, w, crs, 0.0f, col, cols, stream);
      launch_chunk_kernel(col2im_kernel, n * chw, kLauncher, stream, static_cast<const float*>(col), dx + n0 * chw, s,
                          n);
    }
  }
  if (db != nullptr && s.K > 0) {
    reduce_channels(Sum{dy}, s.N, s.K, pq, partials, kLauncher, stream, [&](std::size_t slices) {
      bias_grad_from_partials_kernel<<<grid_for(s.K), kBlock, 0, as_stream(stream)>>>(partials, s.K, slices, db);
    });
  }
}

void maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                        std::size_t W, void* stream) {
  constexpr const char* kLauncher = "maxpool2x2_forward";
  check_pool_shape(N, C, H, W, kLauncher);
  const std::size_t n_out = N * C * (H / 2) * (W / 2);
  if (n_out == 0) return;
  maxpool2x2_forward_kernel<<<grid_for(n_out), kBlock, 0, as_stream(stream)>>>(x, y, argmax, n_out, H, W);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N, std::size_t C,
                         std::size_t H, std::size_t W, void* stream) {
  constexpr const char* kLauncher = "maxpool2x2_backward";
  check_pool_shape(N, C, H, W, kLauncher);
  const std::size_t n_out = N * C * (H / 2) * (W / 2);
  if (n_out == 0) return;
  maxpool2x2_backward_kernel<<<grid_for(n_out), kBlock, 0, as_stream(stream)>>>(dy, argmax, dx, n_out, H, W);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void relu_inplace(float* y, std::size_t n, void* stream) {
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, n);
  DPBENCH_CUDA_CHECK("relu_inplace", kernel_launched());
}

void batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW, double* sum, double* sumsq,
                          double* partials, void* stream) {
  constexpr const char* kLauncher = "batchnorm_local_sums";
  if (C == 0) return;
  reduce_channels(SumAndSquares{x}, N, C, HW, partials, kLauncher, stream, [&](std::size_t slices) {
    sums_from_partials_kernel<<<grid_for(C), kBlock, 0, as_stream(stream)>>>(partials, C, slices, sum, sumsq);
  });
}

void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, float eps,
                              float momentum, float* mean, float* invstd, float* running_mean, float* running_var,
                              void* stream) {
  constexpr const char* kLauncher = "batchnorm_finalize_stats";
  check_count(count, kLauncher);
  if (C == 0) return;
  batchnorm_finalize_stats_kernel<<<grid_for(C), kBlock, 0, as_stream(stream)>>>(
      sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void batchnorm_normalize(const float* x, const float* mean, const float* invstd, const float* gamma, const float* beta,
                         float* y, std::size_t N, std::size_t C, std::size_t HW, void* stream) {
  const std::size_t n = N * C * HW;
  if (n == 0) return;
  batchnorm_normalize_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(x, mean, invstd, gamma, beta, y, n, C, HW);
  DPBENCH_CUDA_CHECK("batchnorm_normalize", kernel_launched());
}

void batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd, std::size_t N,
                               std::size_t C, std::size_t HW, double* sum_dy, double* sum_dy_xmu, float* dgamma,
                               float* dbeta, double* partials, void* stream) {
  constexpr const char* kLauncher = "batchnorm_backward_reduce";
  if (C == 0) return;
  reduce_channels(DyAndDyXmu{dy, x, mean}, N, C, HW, partials, kLauncher, stream, [&](std::size_t slices) {
    backward_sums_from_partials_kernel<<<grid_for(C), kBlock, 0, as_stream(stream)>>>(
        partials, C, slices, invstd, sum_dy, sum_dy_xmu, dgamma, dbeta);
  });
}

void batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                              const float* gamma, const double* sum_dy, const double* sum_dy_xmu, double count,
                              float* dx, std::size_t N, std::size_t C, std::size_t HW, void* stream) {
  constexpr const char* kLauncher = "batchnorm_backward_elemt";
  check_count(count, kLauncher);
  const std::size_t n = N * C * HW;
  if (n == 0) return;
  batchnorm_backward_elemt_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(dy, x, mean, invstd, gamma, sum_dy,
                                                                                 sum_dy_xmu, count, dx, n, C, HW);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

// ---- ModelLaunchers: each a launcher above (or in cuda_kernels.cu) on blas_'s stream ----------

double* ModelLaunchers::partials(std::size_t channels) {
  const std::size_t need = reduce_partials_size(channels);
  // A smaller block goes back to the cache; only later work on this stream can reuse it.
  if (partials_.size() < need)
    partials_ = CachedBuffer<double>(allocator_, MemoryCategory::activations, need, stream());
  return partials_.data();
}

void ModelLaunchers::linear_forward(const float* x, const float* W, const float* b, float* y, std::size_t batch,
                                    std::size_t in, std::size_t out, bool relu) {
  cuda::linear_forward(blas_, x, W, b, y, batch, in, out, relu, stream());
}
void ModelLaunchers::linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                                     std::size_t batch, std::size_t in, std::size_t out) {
  cuda::linear_backward(blas_, x, W, dy, dx, dW, db, batch, in, out, stream());
}
void ModelLaunchers::relu_inplace(float* y, std::size_t n) { cuda::relu_inplace(y, n, stream()); }
void ModelLaunchers::relu_backward_inplace(const float* y, float* dy, std::size_t n) {
  cuda::relu_backward_inplace(y, dy, n, stream());
}
void ModelLaunchers::conv2d_forward(const float* x, const float* w, const float* b, float* y, const cpu::ConvShape& s,
                                    float* ws) {
  cuda::conv2d_forward(blas_, x, w, b, y, s, ws, stream());
}
void ModelLaunchers::conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                                     const cpu::ConvShape& s, float* ws) {
  cuda::conv2d_backward(blas_, x, w, dy, dx, dw, db, s, ws, db != nullptr ? partials(s.K) : nullptr, stream());
}
void ModelLaunchers::maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N, std::size_t C,
                                        std::size_t H, std::size_t W) {
  cuda::maxpool2x2_forward(x, y, argmax, N, C, H, W, stream());
}
void ModelLaunchers::maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N,
                                         std::size_t C, std::size_t H, std::size_t W) {
  cuda::maxpool2x2_backward(dy, argmax, dx, N, C, H, W, stream());
}
void ModelLaunchers::batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                                          double* sumsq) {
  cuda::batchnorm_local_sums(x, N, C, HW, sum, sumsq, partials(C), stream());
}
void ModelLaunchers::batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C,
                                              float eps, float momentum, float* mean, float* invstd,
                                              float* running_mean, float* running_var) {
  cuda::batchnorm_finalize_stats(sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var,
                                 stream());
}
void ModelLaunchers::batchnorm_normalize(const float* x, const float* mean, const float* invstd, const float* gamma,
                                         const float* beta, float* y, std::size_t N, std::size_t C, std::size_t HW) {
  cuda::batchnorm_normalize(x, mean, invstd, gamma, beta, y, N, C, HW, stream());
}
void ModelLaunchers::batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd,
                                               std::size_t N, std::size_t C, std::size_t HW, double* sum_dy,
                                               double* sum_dy_xmu, float* dgamma, float* dbeta) {
  cuda::batchnorm_backward_reduce(dy, x, mean, invstd, N, C, HW, sum_dy, sum_dy_xmu, dgamma, dbeta, partials(C),
                                  stream());
}
void ModelLaunchers::batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                                              const float* gamma, const double* sum_dy, const double* sum_dy_xmu,
                                              double count, float* dx, std::size_t N, std::size_t C, std::size_t HW) {
  cuda::batchnorm_backward_elemt(dy, x, mean, invstd, gamma, sum_dy, sum_dy_xmu, count, dx, N, C, HW, stream());
}

}  // namespace dpbench::cuda
