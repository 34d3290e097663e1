// CUDA kernels of the CNN workload (cuda/cuda_cnn_kernels.hpp), laid out as llm.c lays out
// a layer: the kernels first, then the launchers, which pick the grid, launch on the caller's
// stream and check cudaGetLastError(). The convolution is per-sample im2col + a cuBLAS GEMM on
// row-major data (derivation at gemm() below) + a gathering col2im; BatchNorm's reductions are
// one block per channel in double. Where the CPU rounds each float or double operation on its
// own, the kernels use the _rn intrinsics so that nvcc fuses nothing into an FMA and the result
// is the CPU's bit for bit (given the same inputs).
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

namespace dpbench::cuda {

namespace {

constexpr int kBlock = 256;                // threads per block, element-wise kernels
constexpr int kReduceBlock = 256;          // threads per block, per-channel reductions (2^k)
constexpr std::size_t kMaxBlocks = 65536;  // element-wise grids stop here and grid-stride

// ---------------------------------------------------------------------------------------------
// Error checks. A failure throws Error("cuda: <launcher>: <cause> at <file>:<line>").

using namespace detail;  // fail, check_cuda, check_cublas, check_launch, as_stream, to_int

// Blocks for a grid-stride loop over n elements (n > 0).
unsigned grid_for(std::size_t n) {
  return static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxBlocks));
}

// One block per channel (channels > 0); the grid's x dimension holds 2^31-1.
unsigned grid_for_channels(std::size_t channels, const char* launcher) {
  if (channels > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("cuda: {}: {} channels need more blocks than a grid holds", launcher,
                            channels));
  }
  return static_cast<unsigned>(channels);
}

// As cpu::conv2d's check_shape: InputError when the kernel does not fit the padded input or a
// GEMM dimension exceeds cuBLAS's int arguments.
void check_conv_shape(const cpu::ConvShape& s, const char* launcher) {
  if (s.R == 0 || s.S == 0 || s.H + 2 * s.pad < s.R || s.W + 2 * s.pad < s.S) {
    throw InputError(fmt::format("cuda: {}: kernel {}x{} does not fit input {}x{} with padding {}",
                                 launcher, s.R, s.S, s.H, s.W, s.pad));
  }
  const std::size_t crs = s.C * s.R * s.S, pq = s.P() * s.Q();
  if (crs > INT_MAX || pq > INT_MAX || s.K > INT_MAX) {
    throw InputError(fmt::format("cuda: {}: GEMM dimensions K={} CRS={} PQ={} exceed int range",
                                 launcher, s.K, crs, pq));
  }
}

void check_pool_shape(std::size_t N, std::size_t C, std::size_t H, std::size_t W,
                      const char* launcher) {
  if (H % 2 != 0 || W % 2 != 0) {
    throw InputError(fmt::format("cuda: {}: input {}x{} is not even in both dimensions", launcher,
                                 H, W));
  }
  if (N * C * H * W > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("cuda: {}: {} elements exceed int32 argmax indices", launcher,
                                 N * C * H * W));
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
__device__ std::size_t global_index() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
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

// One sample: col [C*R*S, P*Q] with row (c, r, t), column (p, q) = x[c, p + r - pad, q + t - pad],
// or 0 in the padding. One thread per element of col (consecutive threads, consecutive q).
// Unsigned arithmetic as in cpu::im2col: h = p + r - pad is tested as p + r against pad.
__global__ void im2col_kernel(const float* x, float* col, std::size_t C, std::size_t H,
                              std::size_t W, std::size_t R, std::size_t S, std::size_t pad,
                              std::size_t P, std::size_t Q) {
  const std::size_t pq = P * Q;
  const std::size_t total = C * R * S * pq;
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    const std::size_t q = i % Q;
    const std::size_t p = (i / Q) % P;
    const std::size_t row = i / pq;  // (c * R + r) * S + t
    const std::size_t t = row % S;
    const std::size_t r = (row / S) % R;
    const std::size_t c = row / (R * S);
    const std::size_t h_plus_pad = p + r;
    const std::size_t w_plus_pad = q + t;
    float v = 0.0f;
    if (h_plus_pad >= pad && h_plus_pad - pad < H && w_plus_pad >= pad && w_plus_pad - pad < W) {
      v = x[(c * H + (h_plus_pad - pad)) * W + (w_plus_pad - pad)];
    }
    col[i] = v;
  }
}

// One sample: the adjoint of im2col as a gather. One thread per dx[c, h, w] adds the column
// gradient of every (r, t) whose window reads (h, w): col[(c, r, t), (p, q)] with
// p = h + pad - r, q = w + pad - t inside [0, P) x [0, Q). The additions run in (r, t) order
// from 0, the order in which cpu::col2im adds into a zeroed dx, so the result is the CPU's bit
// for bit for the same col; dx is overwritten (no zeroing, no atomics).
__global__ void col2im_kernel(const float* col, float* dx, std::size_t C, std::size_t H,
                              std::size_t W, std::size_t R, std::size_t S, std::size_t pad,
                              std::size_t P, std::size_t Q) {
  const std::size_t pq = P * Q;
  const std::size_t total = C * H * W;
  for (std::size_t i = global_index(); i < total; i += grid_stride()) {
    const std::size_t w = i % W;
    const std::size_t h = (i / W) % H;
    const std::size_t c = i / (H * W);
    float acc = 0.0f;
    for (std::size_t r = 0; r < R; ++r) {
      if (h + pad < r) continue;
      const std::size_t p = h + pad - r;
      if (p >= P) continue;
      for (std::size_t t = 0; t < S; ++t) {
        if (w + pad < t) continue;
        const std::size_t q = w + pad - t;
        if (q >= Q) continue;
        acc += col[((c * R + r) * S + t) * pq + p * Q + q];
      }
    }
    dx[i] = acc;
  }
}

// y[N, K, PQ] += b[K] broadcast over samples and positions (one float addition, as the CPU).
__global__ void conv_bias_kernel(float* y, const float* b, std::size_t n, std::size_t K,
                                 std::size_t pq) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) y[i] += b[(i / pq) % K];
}

// db[k] = sum over samples n of float(sum over PQ of dy[n, k, :] in double), one block per k:
// per sample a fixed-order block sum in double, then thread 0 rounds it to float and adds it to
// a float running total, as cpu::conv2d_backward does.
__global__ void conv_bias_grad_kernel(const float* dy, float* db, std::size_t N, std::size_t K,
                                      std::size_t pq) {
  const std::size_t k = blockIdx.x;
  float total = 0.0f;
  for (std::size_t n = 0; n < N; ++n) {
    const float* dyk = dy + (n * K + k) * pq;
    double s = 0.0;
    double unused = 0.0;
    for (std::size_t i = threadIdx.x; i < pq; i += kReduceBlock) s += static_cast<double>(dyk[i]);
    block_sum2(s, unused);
    total += static_cast<float>(s);
  }
  if (threadIdx.x == 0) db[k] = total;
}

// One thread per output of 2x2 / stride-2 pooling over x [NC, H, W]: the window is scanned in
// row-major order and strict > keeps the first maximum, as cpu::maxpool2x2_forward.
__global__ void maxpool2x2_forward_kernel(const float* x, float* y, std::int32_t* argmax,
                                          std::size_t n_out, std::size_t H, std::size_t W) {
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
__global__ void maxpool2x2_backward_kernel(const float* dy, const std::int32_t* argmax, float* dx,
                                           std::size_t n_out, std::size_t H, std::size_t W) {
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

// One block per channel c of x [N, C, HW]: sum and sum of squares of its N*HW values in double.
__global__ void batchnorm_local_sums_kernel(const float* x, std::size_t N, std::size_t C,
                                            std::size_t HW, double* sum, double* sumsq) {
  const std::size_t c = blockIdx.x;
  const std::size_t m = N * HW;
  double s = 0.0, sq = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += kReduceBlock) {
    const std::size_t n = j / HW, i = j - n * HW;
    const double v = static_cast<double>(x[(n * C + c) * HW + i]);
    s += v;
    sq += v * v;  // exact in double (a float squared has at most 48 significant bits)
  }
  block_sum2(s, sq);
  if (threadIdx.x == 0) {
    sum[c] = s;
    sumsq[c] = sq;
  }
}

// One thread per channel; the arithmetic of cpu::batchnorm_finalize_stats, each double
// operation rounded on its own (sqrt and division are IEEE-exact in CUDA's double).
__global__ void batchnorm_finalize_stats_kernel(const double* sum, const double* sumsq,
                                                double count, std::size_t C, float eps,
                                                float momentum, float* mean, float* invstd,
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
      running_mean[c] = static_cast<float>(__dadd_rn(
          __dmul_rn(__dsub_rn(1.0, m), static_cast<double>(running_mean[c])), __dmul_rn(m, mu)));
    }
    if (running_var != nullptr) {
      const double unbiased =
          count > 1 ? __ddiv_rn(__dmul_rn(var, count), __dsub_rn(count, 1.0)) : var;
      running_var[c] = static_cast<float>(
          __dadd_rn(__dmul_rn(__dsub_rn(1.0, m), static_cast<double>(running_var[c])),
                    __dmul_rn(m, unbiased)));
    }
  }
}

// y = (x - mean) * (gamma * invstd) + beta, one thread per element of [N, C, HW].
__global__ void batchnorm_normalize_kernel(const float* x, const float* mean, const float* invstd,
                                           const float* gamma, const float* beta, float* y,
                                           std::size_t n, std::size_t C, std::size_t HW) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const std::size_t c = (i / HW) % C;
    const float scale = __fmul_rn(gamma[c], invstd[c]);
    y[i] = __fadd_rn(__fmul_rn(__fsub_rn(x[i], mean[c]), scale), beta[c]);
  }
}

// One block per channel: sum dy and sum dy * (x - mean) in double over the N*HW values, then
// dgamma = sum_dy_xmu * invstd and dbeta = sum_dy, as cpu::batchnorm_backward_reduce.
__global__ void batchnorm_backward_reduce_kernel(const float* dy, const float* x,
                                                 const float* mean, const float* invstd,
                                                 std::size_t N, std::size_t C, std::size_t HW,
                                                 double* sum_dy, double* sum_dy_xmu,
                                                 float* dgamma, float* dbeta) {
  const std::size_t c = blockIdx.x;
  const std::size_t m = N * HW;
  const double mu = static_cast<double>(mean[c]);
  double s = 0.0, sx = 0.0;
  for (std::size_t j = threadIdx.x; j < m; j += kReduceBlock) {
    const std::size_t n = j / HW, i = j - n * HW;
    const std::size_t off = (n * C + c) * HW + i;
    const double g = static_cast<double>(dy[off]);
    s += g;
    sx += g * (static_cast<double>(x[off]) - mu);
  }
  block_sum2(s, sx);
  if (threadIdx.x == 0) {
    sum_dy[c] = s;
    sum_dy_xmu[c] = sx;
    dgamma[c] = static_cast<float>(__dmul_rn(sx, static_cast<double>(invstd[c])));
    dbeta[c] = static_cast<float>(s);
  }
}

// dx = (dy - mean_dy - (x - mean) * k) * scale, one thread per element, with (as ATen's
// batch_norm_backward_elemt and cpu::batchnorm_backward_elemt) mean_dy = sum_dy / count and
// k = invstd^2 * sum_dy_xmu / count computed in double and rounded to float, scale = gamma *
// invstd in float.
__global__ void batchnorm_backward_elemt_kernel(const float* dy, const float* x, const float* mean,
                                                const float* invstd, const float* gamma,
                                                const double* sum_dy, const double* sum_dy_xmu,
                                                double count, float* dx, std::size_t n,
                                                std::size_t C, std::size_t HW) {
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
// (m, n, k: op(A) is m x k, op(B) is k x n, C is m x n, all column-major), with CRS = C*R*S,
// PQ = P*Q, per sample n:
//
//   forward   y_n[K, PQ] = w[K, CRS] . col[CRS, PQ]
//             y_n^T (PQ x K) = col^T (PQ x CRS) . w^T (CRS x K)
//             col's buffer read column-major is col^T (PQ x CRS, ld PQ) -> op N
//             w's buffer read column-major is w^T (CRS x K, ld CRS)     -> op N
//             gemm(N, N, m = PQ, n = K, k = CRS, A = col, lda = PQ, B = w, ldb = CRS,
//                  C = y_n, ldc = PQ)
//
//   dw        dw[K, CRS] += dy_n[K, PQ] . col[CRS, PQ]^T
//             dw^T (CRS x K) += col (CRS x PQ) . dy_n^T (PQ x K)
//             col's buffer is col^T (PQ x CRS, ld PQ) -> op T gives col
//             dy_n's buffer is dy_n^T (PQ x K, ld PQ) -> op N
//             gemm(T, N, m = CRS, n = K, k = PQ, A = col, lda = PQ, B = dy_n, ldb = PQ,
//                  C = dw, ldc = CRS), beta 0 for the first sample and 1 after
//
//   dcol      dcol[CRS, PQ] = w^T[CRS, K] . dy_n[K, PQ]
//             dcol^T (PQ x CRS) = dy_n^T (PQ x K) . w (K x CRS)
//             dy_n's buffer is dy_n^T (PQ x K, ld PQ) -> op N
//             w's buffer is w^T (CRS x K, ld CRS)     -> op T gives w
//             gemm(N, T, m = PQ, n = CRS, k = K, A = dy_n, lda = PQ, B = w, ldb = CRS,
//                  C = dcol, ldc = PQ)
//
// gemm(): cuda/cuda_gemm.cuh.

void im2col(const float* x_n, float* col, const cpu::ConvShape& s, const char* launcher,
            void* stream) {
  const std::size_t total = s.col_size();
  if (total == 0) return;
  im2col_kernel<<<grid_for(total), kBlock, 0, as_stream(stream)>>>(x_n, col, s.C, s.H, s.W, s.R,
                                                                    s.S, s.pad, s.P(), s.Q());
  DPBENCH_LAUNCH_CHECK(launcher);
}

void col2im(const float* col, float* dx_n, const cpu::ConvShape& s, const char* launcher,
            void* stream) {
  const std::size_t total = s.C * s.H * s.W;
  if (total == 0) return;
  col2im_kernel<<<grid_for(total), kBlock, 0, as_stream(stream)>>>(col, dx_n, s.C, s.H, s.W, s.R,
                                                                    s.S, s.pad, s.P(), s.Q());
  DPBENCH_LAUNCH_CHECK(launcher);
}

}  // namespace

void conv2d_forward(Blas& blas, const float* x, const float* w, const float* b, float* y,
                    const cpu::ConvShape& s, float* col, void* stream) {
  constexpr const char* kLauncher = "conv2d_forward";
  check_conv_shape(s, kLauncher);
  const std::size_t crs = s.C * s.R * s.S, pq = s.P() * s.Q(), chw = s.C * s.H * s.W;
  for (std::size_t n = 0; n < s.N; ++n) {
    im2col(x + n * chw, col, s, kLauncher, stream);
    gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_N, pq, s.K, crs, col, pq, w, crs, 0.0f,
         y + n * s.K * pq, pq, stream);
  }
  const std::size_t n_out = s.N * s.K * pq;
  if (b != nullptr && n_out > 0) {
    conv_bias_kernel<<<grid_for(n_out), kBlock, 0, as_stream(stream)>>>(y, b, n_out, s.K, pq);
    DPBENCH_LAUNCH_CHECK(kLauncher);
  }
}

void conv2d_backward(Blas& blas, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* db, const cpu::ConvShape& s, float* col, void* stream) {
  constexpr const char* kLauncher = "conv2d_backward";
  check_conv_shape(s, kLauncher);
  const std::size_t crs = s.C * s.R * s.S, pq = s.P() * s.Q(), chw = s.C * s.H * s.W;
  if (s.N == 0) {  // empty sums: zeros, as the CPU's fill
    if (s.K * crs > 0) {
      DPBENCH_CUDA_CHECK(kLauncher,
                         cudaMemsetAsync(dw, 0, sizeof(float) * s.K * crs, as_stream(stream)));
    }
    if (db != nullptr && s.K > 0) {
      DPBENCH_CUDA_CHECK(kLauncher, cudaMemsetAsync(db, 0, sizeof(float) * s.K, as_stream(stream)));
    }
    return;
  }
  for (std::size_t n = 0; n < s.N; ++n) {
    const float* dy_n = dy + n * s.K * pq;
    // dw[K, CRS] (+)= dy_n[K, PQ] . col_n[CRS, PQ]^T: the first sample overwrites dw.
    im2col(x + n * chw, col, s, kLauncher, stream);
    gemm(blas, kLauncher, CUBLAS_OP_T, CUBLAS_OP_N, crs, s.K, pq, col, pq, dy_n, pq,
         n == 0 ? 0.0f : 1.0f, dw, crs, stream);
    if (dx != nullptr) {
      // dcol[CRS, PQ] = w^T . dy_n into the same workspace (stream order: after the dw GEMM has
      // read col), then gathered onto dx_n.
      gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_T, pq, crs, s.K, dy_n, pq, w, crs, 0.0f, col,
           pq, stream);
      col2im(col, dx + n * chw, s, kLauncher, stream);
    }
  }
  if (db != nullptr && s.K > 0) {
    conv_bias_grad_kernel<<<grid_for_channels(s.K, kLauncher), kReduceBlock, 0,
                            as_stream(stream)>>>(dy, db, s.N, s.K, pq);
    DPBENCH_LAUNCH_CHECK(kLauncher);
  }
}

void maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N,
                        std::size_t C, std::size_t H, std::size_t W, void* stream) {
  constexpr const char* kLauncher = "maxpool2x2_forward";
  check_pool_shape(N, C, H, W, kLauncher);
  const std::size_t n_out = N * C * (H / 2) * (W / 2);
  if (n_out == 0) return;
  maxpool2x2_forward_kernel<<<grid_for(n_out), kBlock, 0, as_stream(stream)>>>(x, y, argmax,
                                                                                n_out, H, W);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

void maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N,
                         std::size_t C, std::size_t H, std::size_t W, void* stream) {
  constexpr const char* kLauncher = "maxpool2x2_backward";
  check_pool_shape(N, C, H, W, kLauncher);
  const std::size_t n_out = N * C * (H / 2) * (W / 2);
  if (n_out == 0) return;
  maxpool2x2_backward_kernel<<<grid_for(n_out), kBlock, 0, as_stream(stream)>>>(dy, argmax, dx,
                                                                                 n_out, H, W);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

void relu_inplace(float* y, std::size_t n, void* stream) {
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, n);
  DPBENCH_LAUNCH_CHECK("relu_inplace");
}

void batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW,
                          double* sum, double* sumsq, void* stream) {
  constexpr const char* kLauncher = "batchnorm_local_sums";
  if (C == 0) return;
  batchnorm_local_sums_kernel<<<grid_for_channels(C, kLauncher), kReduceBlock, 0,
                                as_stream(stream)>>>(x, N, C, HW, sum, sumsq);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count,
                              std::size_t C, float eps, float momentum, float* mean,
                              float* invstd, float* running_mean, float* running_var,
                              void* stream) {
  constexpr const char* kLauncher = "batchnorm_finalize_stats";
  check_count(count, kLauncher);
  if (C == 0) return;
  batchnorm_finalize_stats_kernel<<<grid_for(C), kBlock, 0, as_stream(stream)>>>(
      sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

void batchnorm_normalize(const float* x, const float* mean, const float* invstd,
                         const float* gamma, const float* beta, float* y, std::size_t N,
                         std::size_t C, std::size_t HW, void* stream) {
  const std::size_t n = N * C * HW;
  if (n == 0) return;
  batchnorm_normalize_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(x, mean, invstd,
                                                                             gamma, beta, y, n,
                                                                             C, HW);
  DPBENCH_LAUNCH_CHECK("batchnorm_normalize");
}

void batchnorm_backward_reduce(const float* dy, const float* x, const float* mean,
                               const float* invstd, std::size_t N, std::size_t C, std::size_t HW,
                               double* sum_dy, double* sum_dy_xmu, float* dgamma, float* dbeta,
                               void* stream) {
  constexpr const char* kLauncher = "batchnorm_backward_reduce";
  if (C == 0) return;
  batchnorm_backward_reduce_kernel<<<grid_for_channels(C, kLauncher), kReduceBlock, 0,
                                     as_stream(stream)>>>(dy, x, mean, invstd, N, C, HW, sum_dy,
                                                          sum_dy_xmu, dgamma, dbeta);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

void batchnorm_backward_elemt(const float* dy, const float* x, const float* mean,
                              const float* invstd, const float* gamma, const double* sum_dy,
                              const double* sum_dy_xmu, double count, float* dx, std::size_t N,
                              std::size_t C, std::size_t HW, void* stream) {
  constexpr const char* kLauncher = "batchnorm_backward_elemt";
  check_count(count, kLauncher);
  const std::size_t n = N * C * HW;
  if (n == 0) return;
  batchnorm_backward_elemt_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(
      dy, x, mean, invstd, gamma, sum_dy, sum_dy_xmu, count, dx, n, C, HW);
  DPBENCH_LAUNCH_CHECK(kLauncher);
}

// ---- ModelLaunchers: each a launcher above (or in cuda_kernels.cu) on blas_'s stream ----------

void ModelLaunchers::linear_forward(const float* x, const float* W, const float* b, float* y, std::size_t batch,
                                    std::size_t in, std::size_t out, bool relu) {
  cuda::linear_forward(blas_, x, W, b, y, batch, in, out, relu, stream());
}
void ModelLaunchers::linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                                     float* db, std::size_t batch, std::size_t in, std::size_t out) {
  cuda::linear_backward(blas_, x, W, dy, dx, dW, db, batch, in, out, stream());
}
void ModelLaunchers::relu_inplace(float* y, std::size_t n) { cuda::relu_inplace(y, n, stream()); }
void ModelLaunchers::relu_backward_inplace(const float* y, float* dy, std::size_t n) {
  cuda::relu_backward_inplace(y, dy, n, stream());
}
void ModelLaunchers::conv2d_forward(const float* x, const float* w, const float* b, float* y,
                                    const cpu::ConvShape& s, float* col) {
  cuda::conv2d_forward(blas_, x, w, b, y, s, col, stream());
}
void ModelLaunchers::conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw,
                                     float* db, const cpu::ConvShape& s, float* col) {
  cuda::conv2d_backward(blas_, x, w, dy, dx, dw, db, s, col, stream());
}
void ModelLaunchers::maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N,
                                        std::size_t C, std::size_t H, std::size_t W) {
  cuda::maxpool2x2_forward(x, y, argmax, N, C, H, W, stream());
}
void ModelLaunchers::maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N,
                                         std::size_t C, std::size_t H, std::size_t W) {
  cuda::maxpool2x2_backward(dy, argmax, dx, N, C, H, W, stream());
}
void ModelLaunchers::batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW,
                                          double* sum, double* sumsq) {
  cuda::batchnorm_local_sums(x, N, C, HW, sum, sumsq, stream());
}
void ModelLaunchers::batchnorm_finalize_stats(const double* sum, const double* sumsq, double count,
                                              std::size_t C, float eps, float momentum, float* mean,
                                              float* invstd, float* running_mean, float* running_var) {
  cuda::batchnorm_finalize_stats(sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var,
                                 stream());
}
void ModelLaunchers::batchnorm_normalize(const float* x, const float* mean, const float* invstd,
                                         const float* gamma, const float* beta, float* y, std::size_t N,
                                         std::size_t C, std::size_t HW) {
  cuda::batchnorm_normalize(x, mean, invstd, gamma, beta, y, N, C, HW, stream());
}
void ModelLaunchers::batchnorm_backward_reduce(const float* dy, const float* x, const float* mean,
                                               const float* invstd, std::size_t N, std::size_t C,
                                               std::size_t HW, double* sum_dy, double* sum_dy_xmu,
                                               float* dgamma, float* dbeta) {
  cuda::batchnorm_backward_reduce(dy, x, mean, invstd, N, C, HW, sum_dy, sum_dy_xmu, dgamma, dbeta, stream());
}
void ModelLaunchers::batchnorm_backward_elemt(const float* dy, const float* x, const float* mean,
                                              const float* invstd, const float* gamma, const double* sum_dy,
                                              const double* sum_dy_xmu, double count, float* dx, std::size_t N,
                                              std::size_t C, std::size_t HW) {
  cuda::batchnorm_backward_elemt(dy, x, mean, invstd, gamma, sum_dy, sum_dy_xmu, count, dx, N, C, HW, stream());
}

}  // namespace dpbench::cuda
