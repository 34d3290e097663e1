// CUDA training kernels (cuda/cuda_kernels.hpp), laid out as llm.c lays out a layer: the
// kernels first, then the launchers, which pick the grid, launch on the caller's stream and
// check cudaGetLastError(). The Linear layers are cuBLAS GEMMs on row-major data (derivation
// at gemm() below) followed by small kernels for the bias, ReLU and bias gradient.
#include "cuda/cuda_kernels.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/error_location.hpp"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_gemm.cuh"

namespace dpbench::cuda {

namespace {

constexpr int kBlock = 256;                          // threads per block, element-wise kernels
constexpr int kWarp = 32;                            // threads per warp
constexpr int kRowsPerBlock = kBlock / kWarp;        // softmax / arg-max: one warp per row
constexpr unsigned kFullMask = 0xffffffffu;          // all lanes of a warp take part in a shuffle
constexpr std::size_t kMaxBlocks = 65536;            // element-wise grids stop here and grid-stride
constexpr int kColTile = 32;                         // column sum: columns per block (one warp wide)
constexpr int kRowLanes = 16;                        // column sum: threads down the rows per column
constexpr unsigned long long kNoIndex = ULLONG_MAX;  // arg-max: lane has seen no element

// ---------------------------------------------------------------------------------------------
// Error checks. A failure throws Error("cuda: <launcher>: <cause> at <file>:<line>").

using namespace detail;  // fail, check_cuda, check_cublas, check_launch, as_stream, to_int

// Blocks for a grid-stride loop over n elements (n > 0).
unsigned grid_for(std::size_t n) { return static_cast<unsigned>(std::min((n + kBlock - 1) / kBlock, kMaxBlocks)); }

// Blocks for one warp per row over `rows` rows (rows > 0); the grid's x dimension holds 2^31-1.
unsigned grid_for_rows(std::size_t rows, const char* launcher) {
  const std::size_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (blocks > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("cuda: {}: {} rows need more blocks than a grid holds", launcher, rows));
  }
  return static_cast<unsigned>(blocks);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Kernels

namespace {

// First index of a grid-stride loop, and its stride.
__device__ std::size_t global_index() { return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

// y[batch, out] += b[out] broadcast over rows; then y = max(y, 0) if relu. The comparison is
// written as std::max(v, 0) evaluates it, so a ReLU output matches the CPU's bit for bit.
__global__ void bias_relu_kernel(float* y, const float* b, std::size_t n, std::size_t out, bool relu) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float v = y[i] + b[i % out];
    y[i] = (relu && v < 0.0f) ? 0.0f : v;
  }
}

// db[out] = sum over rows of dy[batch, out]. Block (kColTile, kRowLanes): threadIdx.x picks a
// column (consecutive threads read consecutive addresses), threadIdx.y strides down the rows;
// the kRowLanes partial sums are added in a fixed order, so the result is deterministic.
__global__ void column_sum_kernel(const float* dy, float* db, std::size_t batch, std::size_t out) {
  __shared__ float partial[kRowLanes][kColTile + 1];  // +1: no shared-memory bank conflicts
  const std::size_t col = static_cast<std::size_t>(blockIdx.x) * kColTile + threadIdx.x;
  float sum = 0.0f;
  if (col < out) {
    for (std::size_t r = threadIdx.y; r < batch; r += kRowLanes) sum += dy[r * out + col];
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < out) {
    float total = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) total += partial[k][threadIdx.x];
    db[col] = total;
  }
}

__global__ void relu_backward_kernel(const float* y, float* dy, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    if (y[i] <= 0.0f) dy[i] = 0.0f;
  }
}

__device__ float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

__device__ double warp_sum(double v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// One warp per row of logits[batch, classes]; kRowsPerBlock rows per block. The arithmetic
// follows cpu::softmax_cross_entropy step by step: zmax in float, z - zmax in float, the
// exponentials, their sum and its logarithm in double, the gradient rounded to float last.
// Each block adds its rows' losses (in double) to *loss_sum with one atomicAdd.
__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, std::size_t batch,
                                             std::size_t classes, float* dlogits, float grad_scale, float* loss_sum) {
  __shared__ double row_loss[kRowsPerBlock];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * kRowsPerBlock + warp;
  double loss = 0.0;
  if (row < batch) {  // the same for all 32 lanes of a warp, so the shuffles see a full warp
    const float* z = logits + row * classes;
    const std::int32_t label = labels[row];
    const bool valid = label >= 0 && static_cast<std::size_t>(label) < classes;

    float zmax = -CUDART_INF_F;
    for (std::size_t c = lane; c < classes; c += kWarp) zmax = fmaxf(zmax, z[c]);
    zmax = warp_max(zmax);

    double sum = 0.0;
    for (std::size_t c = lane; c < classes; c += kWarp) {
      sum += exp(static_cast<double>(z[c] - zmax));
    }
    const double log_sum = log(warp_sum(sum));

    if (valid) {
      loss = log_sum - static_cast<double>(z[label] - zmax);
    } else {
      loss = CUDART_NAN;
    }
    if (dlogits != nullptr) {
      float* d = dlogits + row * classes;
      for (std::size_t c = lane; c < classes; c += kWarp) {
        const double p = exp(static_cast<double>(z[c] - zmax) - log_sum);
        const double target = (valid && c == static_cast<std::size_t>(label)) ? 1.0 : 0.0;
        d[c] = valid ? static_cast<float>((p - target) * static_cast<double>(grad_scale)) : CUDART_NAN_F;
      }
    }
  }
  if (lane == 0) row_loss[warp] = loss;  // 0 for rows past the batch
  __syncthreads();
  if (threadIdx.x == 0) {
    double block_loss = 0.0;
    for (int w = 0; w < kRowsPerBlock; ++w) block_loss += row_loss[w];
    atomicAdd(loss_sum, static_cast<float>(block_loss));
  }
}

// One warp per row: the arg-max of logits[row, :] (lowest index among equal maxima, as
// std::max_element) against the label; each block adds its count to *correct.
__global__ void count_correct_kernel(const float* logits, const std::int32_t* labels, std::size_t batch,
                                     std::size_t classes, int* correct) {
  __shared__ int row_hit[kRowsPerBlock];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const std::size_t row = static_cast<std::size_t>(blockIdx.x) * kRowsPerBlock + warp;
  int hit = 0;
  if (row < batch) {
    const float* z = logits + row * classes;
    // This lane's maximum over columns lane, lane + 32, ...: strict '<' keeps the first.
    float best = -CUDART_INF_F;
    unsigned long long best_index = kNoIndex;
    for (std::size_t c = lane; c < classes; c += kWarp) {
      if (best_index == kNoIndex || best < z[c]) {
        best = z[c];
        best_index = c;
      }
    }
    // Across lanes: the larger value wins; equal values go to the lower index.
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(kFullMask, best, offset);
      const unsigned long long other_index = __shfl_xor_sync(kFullMask, best_index, offset);
      const bool take = other_index != kNoIndex &&
                        (best_index == kNoIndex || best < other || (best == other && other_index < best_index));
      if (take) {
        best = other;
        best_index = other_index;
      }
    }
    const std::int32_t label = labels[row];
    hit = (label >= 0 && best_index == static_cast<unsigned long long>(label)) ? 1 : 0;
  }
  if (lane == 0) row_hit[warp] = hit;
  __syncthreads();
  if (threadIdx.x == 0) {
    int block_hits = 0;
    for (int w = 0; w < kRowsPerBlock; ++w) block_hits += row_hit[w];
    if (block_hits > 0) atomicAdd(correct, block_hits);
  }
}

// PyTorch SGD with momentum. The _rn intrinsics round each product and sum on its own: nvcc
// would otherwise fuse a * b + c into one FMA and the result would differ from the CPU's in
// the last bit.
__global__ void sgd_momentum_kernel(float* params, const float* grads, float* velocity, std::size_t n, float lr,
                                    float momentum, float weight_decay) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    const float p = params[i];
    const float d = __fadd_rn(grads[i], __fmul_rn(weight_decay, p));
    const float v = __fadd_rn(__fmul_rn(momentum, velocity[i]), d);
    velocity[i] = v;
    params[i] = __fsub_rn(p, __fmul_rn(lr, v));
  }
}

__global__ void adam_kernel(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                            cpu::AdamScalars s) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) {
    float p = params[i];
    if (s.decay != 1.0f) p = __fmul_rn(s.decay, p);
    float g = grads[i];
    if (s.weight_decay != 0.0f) g = __fadd_rn(g, __fmul_rn(s.weight_decay, p));
    const float m = __fadd_rn(__fmul_rn(s.beta1, exp_avg[i]), __fmul_rn(s.one_minus_beta1, g));
    const float v = __fadd_rn(__fmul_rn(s.beta2, exp_avg_sq[i]), __fmul_rn(s.one_minus_beta2, __fmul_rn(g, g)));
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), s.bias_correction2_sqrt), s.eps);
    params[i] = __fsub_rn(p, __fmul_rn(s.step_size, __fdiv_rn(m, denom)));
  }
}

__global__ void add_inplace_kernel(float* y, const float* x, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) y[i] += x[i];
}

__global__ void add_kernel(float* out, const float* a, const float* b, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) out[i] = a[i] + b[i];
}

__global__ void scale_inplace_kernel(float* y, float alpha, std::size_t n) {
  for (std::size_t i = global_index(); i < n; i += grid_stride()) y[i] *= alpha;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// cuBLAS handle

bool available() { return true; }

Blas::Blas(void* stream, Precision precision) : stream_(stream), precision_(precision) {
  cublasHandle_t handle = nullptr;
  DPBENCH_CUBLAS_CHECK("Blas", cublasCreate(&handle));
  handle_ = handle;
  try {
    DPBENCH_CUBLAS_CHECK("Blas", cublasSetStream(handle_, as_stream(stream)));
    DPBENCH_CUBLAS_CHECK("Blas", cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
    // The GEMMs below name their compute type explicitly; the math mode makes any other cuBLAS
    // call on handle() follow the same precision.
    DPBENCH_CUBLAS_CHECK("Blas", cublasSetMathMode(handle_, precision == Precision::tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                         : CUBLAS_DEFAULT_MATH));
  } catch (...) {
    cublasDestroy(handle_);
    handle_ = nullptr;
    throw;
  }
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(handle_);
}

namespace {
thread_local std::uint64_t launches = 0;  // launch_count() of this thread
}  // namespace

void detail::note_launch() noexcept { ++launches; }

std::uint64_t launch_count() { return launches; }

Blas::Blas(Blas&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), stream_(other.stream_), precision_(other.precision_) {}

Blas& Blas::operator=(Blas&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cublasDestroy(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    stream_ = other.stream_;
    precision_ = other.precision_;
  }
  return *this;
}

void Blas::set_stream(void* stream) {
  // Skipped when already bound: cublasSetStream also resets the handle's workspace. (Whoever
  // rebinds the raw handle() must do it through here, or the record goes stale.)
  if (stream == stream_) return;
  DPBENCH_CUBLAS_CHECK("Blas::set_stream", cublasSetStream(handle_, as_stream(stream)));
  stream_ = stream;
}

void* Blas::bound_stream() const {
  cudaStream_t s = nullptr;
  DPBENCH_CUBLAS_CHECK("Blas::bound_stream", cublasGetStream(handle_, &s));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Launchers

namespace {

// Row-major GEMMs through column-major cuBLAS, without copies or transposes in memory.
//
// A row-major matrix M with r rows and c columns (leading dimension c) is, read column-major
// with leading dimension c, the matrix M^T (c rows, r columns). So every row-major product is
// computed as its transpose: for C = A . B (row-major), cuBLAS computes C^T = B^T . A^T, whose
// operands are the row-major buffers read column-major as they are. In cuBLAS's terms
// (m, n, k: op(A) is m x k, op(B) is k x n, C is m x n, all column-major):
//
//   forward   y[batch, out] = x[batch, in] . W[out, in]^T
//             y^T (out x batch) = W (out x in) . x^T (in x batch)
//             W's buffer read column-major is W^T (in x out, ld in) -> op CUBLAS_OP_T gives W
//             x's buffer read column-major is x^T (in x batch, ld in) -> op CUBLAS_OP_N
//             gemm(T, N, m = out, n = batch, k = in, A = W, lda = in, B = x, ldb = in,
//                  C = y, ldc = out)
//
//   dW        dW[out, in] = dy[batch, out]^T . x[batch, in]
//             dW^T (in x out) = x^T (in x batch) . dy (batch x out)
//             x's buffer is x^T (in x batch, ld in) -> op N
//             dy's buffer is dy^T (out x batch, ld out) -> op T gives dy
//             gemm(N, T, m = in, n = out, k = batch, A = x, lda = in, B = dy, ldb = out,
//                  C = dW, ldc = in)
//
//   dx        dx[batch, in] = dy[batch, out] . W[out, in]
//             dx^T (in x batch) = W^T (in x out) . dy^T (out x batch)
//             W's buffer is W^T (in x out, ld in) -> op N; dy's buffer is dy^T -> op N
//             gemm(N, N, m = in, n = batch, k = out, A = W, lda = in, B = dy, ldb = out,
//                  C = dx, ldc = in)
//
// gemm(): cuda/cuda_gemm.cuh (beta 0 here: every GEMM overwrites its output).

}  // namespace

void linear_forward(Blas& blas, const float* x, const float* W, const float* b, float* y, std::size_t batch,
                    std::size_t in, std::size_t out, bool relu, void* stream) {
  constexpr const char* kLauncher = "linear_forward";
  if (batch == 0 || out == 0) return;
  gemm(blas, kLauncher, CUBLAS_OP_T, CUBLAS_OP_N, out, batch, in, W, in, x, in, 0.0f, y, out, stream);
  const std::size_t n = batch * out;
  bias_relu_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, b, n, out, relu);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void linear_backward(Blas& blas, const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                     std::size_t batch, std::size_t in, std::size_t out, void* stream) {
  constexpr const char* kLauncher = "linear_backward";
  if (batch == 0) {
    DPBENCH_CUDA_CHECK(kLauncher, cudaMemsetAsync(dW, 0, sizeof(float) * out * in, as_stream(stream)));
    DPBENCH_CUDA_CHECK(kLauncher, cudaMemsetAsync(db, 0, sizeof(float) * out, as_stream(stream)));
    return;
  }
  gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_T, in, out, batch, x, in, dy, out, 0.0f, dW, in, stream);
  if (out > 0) {
    const dim3 block(kColTile, kRowLanes);
    const unsigned grid = static_cast<unsigned>((out + kColTile - 1) / kColTile);
    column_sum_kernel<<<grid, block, 0, as_stream(stream)>>>(dy, db, batch, out);
    DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
  }
  // out == 0 makes this an empty sum: gemm() writes zeros to dx, as OpenBLAS does.
  if (dx != nullptr) {
    gemm(blas, kLauncher, CUBLAS_OP_N, CUBLAS_OP_N, in, batch, out, W, in, dy, out, 0.0f, dx, in, stream);
  }
}

void relu_backward_inplace(const float* y, float* dy, std::size_t n, void* stream) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, dy, n);
  DPBENCH_CUDA_CHECK("relu_backward_inplace", kernel_launched());
}

void softmax_cross_entropy(const float* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                           float* dlogits, float grad_scale, float* loss_sum, void* stream) {
  constexpr const char* kLauncher = "softmax_cross_entropy";
  if (batch == 0) return;
  if (classes == 0) throw Error(fmt::format("cuda: {}: zero classes", kLauncher));
  softmax_cross_entropy_kernel<<<grid_for_rows(batch, kLauncher), kBlock, 0, as_stream(stream)>>>(
      logits, labels, batch, classes, dlogits, grad_scale, loss_sum);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void count_correct(const float* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                   int* correct, void* stream) {
  constexpr const char* kLauncher = "count_correct";
  if (batch == 0 || classes == 0) return;  // no arg-max, so nothing is correct
  count_correct_kernel<<<grid_for_rows(batch, kLauncher), kBlock, 0, as_stream(stream)>>>(logits, labels, batch,
                                                                                          classes, correct);
  DPBENCH_CUDA_CHECK(kLauncher, kernel_launched());
}

void sgd_momentum(float* params, const float* grads, float* velocity, std::size_t n, float lr, float momentum,
                  float weight_decay, void* stream) {
  if (n == 0) return;
  sgd_momentum_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(params, grads, velocity, n, lr, momentum,
                                                                     weight_decay);
  DPBENCH_CUDA_CHECK("sgd_momentum", kernel_launched());
}

void adam(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
          const cpu::AdamScalars& s, void* stream) {
  if (n == 0) return;
  adam_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(params, grads, exp_avg, exp_avg_sq, n, s);
  DPBENCH_CUDA_CHECK("adam", kernel_launched());
}

void add_inplace(float* y, const float* x, std::size_t n, void* stream) {
  if (n == 0) return;
  add_inplace_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, x, n);
  DPBENCH_CUDA_CHECK("add_inplace", kernel_launched());
}

void add(float* out, const float* a, const float* b, std::size_t n, void* stream) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(out, a, b, n);
  DPBENCH_CUDA_CHECK("add", kernel_launched());
}

void scale_inplace(float* y, float alpha, std::size_t n, void* stream) {
  if (n == 0) return;
  scale_inplace_kernel<<<grid_for(n), kBlock, 0, as_stream(stream)>>>(y, alpha, n);
  DPBENCH_CUDA_CHECK("scale_inplace", kernel_launched());
}

}  // namespace dpbench::cuda
