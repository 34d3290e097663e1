// CUDA kernels of the CNN workload: the GPU side of workloads/cnn_kernels.hpp (NCHW 3x3-style
// convolution over the whole batch as im2col + one cuBLAS GEMM per chunk of samples + col2im,
// with the layout and index math of workloads/conv_layout.hpp, 2x2 max-pooling with arg-max,
// in-place ReLU, and BatchNorm split into the stages of PyTorch's SyncBatchNorm). Each launcher
// keeps its cpu:: counterpart's argument order and semantics, plus a cuBLAS handle (convolution
// only, first), a reduction workspace where it reduces per channel, and a trailing stream, so
// one test compares the two. float only. At the end, ModelLaunchers:
// these launchers and cuda/cuda_kernels.hpp's behind workloads/model_ops.hpp's interface (what
// the workloads' models call), bound to one cuBLAS handle and its stream.
// Not for: memory management, multi-GPU code (a caller combines the BatchNorm sums across ranks
// between the stages), or fast convolutions (no implicit GEMM, Winograd or cuDNN).
//
// Every pointer here is a DEVICE pointer, the double sums of the BatchNorm stages included (a
// SyncBatchNorm caller copies them to the host, or all-reduces them on the device, between
// stages). Every `void* stream` is a cudaStream_t passed as void* (nullptr: the default stream).
// Launchers only enqueue work: nothing is synchronised, so a fault inside a kernel surfaces at
// the caller's next synchronising call. Launchers throw dpbench::Error("cuda: <launcher>: <cause>
// at <file>:<line>") when a launch or a cuBLAS call is refused, and InputError where the cpu::
// version throws it (a kernel that does not fit, odd pooling input, count <= 0).
//
// Every kernel here is deterministic: reductions add in a fixed order and col2im / maxpool
// backward gather instead of scattering with atomics, so two runs give the same bits.
//
// This header includes no CUDA header, so plain C++ files of the CUDA target can include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/caching_allocator.hpp"
#include "workloads/cnn_kernels.hpp"
#include "workloads/model_ops.hpp"
#include "cuda/cuda_kernels.hpp"

namespace dpbench::cuda {

// ---- per-channel reductions ----------------------------------------------------------------

// Blocks per channel of the per-channel reductions (BatchNorm's sums, the conv bias gradient): a
// 2-D grid of C x slices blocks, slices <= kReduceMaxSlices, then a second pass that adds each
// channel's partial sums in a fixed order.
inline constexpr std::size_t kReduceMaxSlices = 64;
// Doubles of the workspace (`partials`) of a reduction over C channels.
constexpr std::size_t reduce_partials_size(std::size_t C) { return 2 * C * kReduceMaxSlices; }

// ---- convolution (stride 1, zero padding), as cpu::conv2d_forward / conv2d_backward ---------

// y[N, K, P, Q] = conv(x[N, C, H, W], w[K, C, R, S]) + b[K] (b may be null), over the whole batch
// in chunks of s.chunk() samples with the layout of workloads/conv_layout.hpp. ws: workspace of
// s.workspace_size() floats. Per chunk three launches, however many samples it holds: im2col,
// one GEMM on blas (rebound to stream) and the permute into NCHW (adding b). Throws InputError
// as cpu::conv2d_forward for a kernel that does not fit the padded input or GEMM dimensions
// beyond int.
void conv2d_forward(Blas& blas, const float* x, const float* w, const float* b, float* y, const cpu::ConvShape& s,
                    float* ws, void* stream);

// Backward of conv2d_forward, as cpu::conv2d_backward: given dy[N, K, P, Q], overwrites
// dw[K, C, R, S], db[K] (if not null) and, if dx is not null, dx[N, C, H, W]. ws: workspace of
// s.workspace_size() floats; partials: reduce_partials_size(K) doubles when db is not null (may
// be null otherwise). Per chunk: im2col, dy permuted, one GEMM for dw (k = n*P*Q, accumulated
// over chunks in cuBLAS), and if dx: one GEMM for the column gradient and one gathering col2im
// (no atomics). db: the 2-D reduction in double, rounded once to float as on the CPU.
void conv2d_backward(Blas& blas, const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                     const cpu::ConvShape& s, float* ws, double* partials, void* stream);

// ---- pooling and activation -------------------------------------------------------------------

// 2x2 max-pooling, stride 2: x [N, C, H, W] (H, W even, else InputError) -> y [N, C, H/2, W/2];
// argmax (int32, device) holds the flat index within x of each maximum (first maximum in the
// window's row-major order on ties). As cpu::maxpool2x2_forward, bit for bit.
void maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                        std::size_t W, void* stream);

// dx [N, C, H, W] = 0 except dx[argmax[i]] = dy[i], as cpu::maxpool2x2_backward for an argmax
// written by maxpool2x2_forward (each index inside its own window: the kernel writes each
// window's four elements, so no atomics and no separate zeroing). H, W even, else InputError.
void maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N, std::size_t C,
                         std::size_t H, std::size_t W, void* stream);

// In place y = max(y, 0) over n elements, as cpu::relu_inplace (bit for bit; NaN stays NaN).
// Its backward is cuda::relu_backward_inplace (cuda/cuda_kernels.hpp).
void relu_inplace(float* y, std::size_t n, void* stream);

// ---- BatchNorm over x [N, C, HW], the stages of PyTorch's SyncBatchNorm -----------------------

// Stage 1 (per rank): sum[C] and sumsq[C] (device doubles, overwritten) of this rank's N*HW
// values per channel. The 2-D reduction above in double (partials: reduce_partials_size(C)
// doubles), fixed-order tree within a block and fixed-order second pass: deterministic.
void batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW, double* sum, double* sumsq,
                          double* partials, void* stream);

// Stage 2: mean[C] and invstd[C] = 1/sqrt(var + eps) (device floats) from the totals over
// `count` values (biased variance, clamped at 0), and if not null the running statistics
// running = (1 - momentum) * running + momentum * batch (unbiased variance for running_var),
// updated on the device. Arithmetic in double, each operation rounded on its own as on the CPU.
// Throws InputError when count <= 0.
void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, float eps,
                              float momentum, float* mean, float* invstd, float* running_mean, float* running_var,
                              void* stream);

// Stage 3: y = (x - mean) * (gamma * invstd) + beta per channel, as cpu::batchnorm_normalize
// (bit for bit: no fused multiply-add).
void batchnorm_normalize(const float* x, const float* mean, const float* invstd, const float* gamma, const float* beta,
                         float* y, std::size_t N, std::size_t C, std::size_t HW, void* stream);

// Backward stage 1 (per rank): sum_dy[C] = sum dy and sum_dy_xmu[C] = sum dy * (x - mean)
// (device doubles, overwritten; the 2-D reduction as in batchnorm_local_sums, partials:
// reduce_partials_size(C) doubles), and dgamma[C] = sum_dy_xmu * invstd, dbeta[C] = sum_dy of
// this rank's values (device floats).
void batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd, std::size_t N,
                               std::size_t C, std::size_t HW, double* sum_dy, double* sum_dy_xmu, float* dgamma,
                               float* dbeta, double* partials, void* stream);

// Backward stage 2 (sums combined over all ranks, `count` values in all):
// dx = (dy - sum_dy/count - (x - mean) * invstd^2 * sum_dy_xmu/count) * gamma * invstd, as
// cpu::batchnorm_backward_elemt (bit for bit: no fused multiply-add). Throws InputError when
// count <= 0.
void batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                              const float* gamma, const double* sum_dy, const double* sum_dy_xmu, double count,
                              float* dx, std::size_t N, std::size_t C, std::size_t HW, void* stream);

// ---- the launchers behind workloads/model_ops.hpp ----------------------------------------------

// ModelOps<float>'s kernels (what the workloads' models run), each the launcher of the same name
// here or in cuda/cuda_kernels.hpp on `blas` and its stream; nothing but launches, plus the
// reductions' partial sums (reduce_partials_size doubles for the widest layer so far, from
// `allocator`, charged to activations). The memory half of ModelOps (allocation, host copies) is
// cuda/cuda_model_ops.cpp's. blas and allocator must outlive the object.
class ModelLaunchers : public ModelOps<float> {
 public:
  ModelLaunchers(Blas& blas, CachingAllocator& allocator) : blas_(blas), allocator_(allocator) {}
  void linear_forward(const float* x, const float* W, const float* b, float* y, std::size_t batch, std::size_t in,
                      std::size_t out, bool relu) override;
  void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                       std::size_t batch, std::size_t in, std::size_t out) override;
  void relu_inplace(float* y, std::size_t n) override;
  void relu_backward_inplace(const float* y, float* dy, std::size_t n) override;
  void conv2d_forward(const float* x, const float* w, const float* b, float* y, const cpu::ConvShape& s,
                      float* ws) override;
  void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                       const cpu::ConvShape& s, float* ws) override;
  void maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                          std::size_t W) override;
  void maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N, std::size_t C,
                           std::size_t H, std::size_t W) override;
  void batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                            double* sumsq) override;
  void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, float eps,
                                float momentum, float* mean, float* invstd, float* running_mean,
                                float* running_var) override;
  void batchnorm_normalize(const float* x, const float* mean, const float* invstd, const float* gamma,
                           const float* beta, float* y, std::size_t N, std::size_t C, std::size_t HW) override;
  void batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd, std::size_t N,
                                 std::size_t C, std::size_t HW, double* sum_dy, double* sum_dy_xmu, float* dgamma,
                                 float* dbeta) override;
  void batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                                const float* gamma, const double* sum_dy, const double* sum_dy_xmu, double count,
                                float* dx, std::size_t N, std::size_t C, std::size_t HW) override;
  // DLRM's (cuda/cuda_dlrm_kernels.hpp; defined in cuda_dlrm_kernels.cu).
  void embedding_bag_sum_forward(const float* tables, const float* x, float* out, std::size_t batch,
                                 const cpu::BagShape& s) override;
  void embedding_bag_sum_backward(const float* x, const float* d_out, float* dtables, std::size_t batch,
                                  const cpu::BagShape& s) override;
  void dot_interaction_forward(const float* z, const float* bags, float* r, std::size_t batch, std::size_t tables,
                               std::size_t dim) override;
  void dot_interaction_backward(const float* z, const float* bags, const float* dr, float* dz, float* dbags,
                                std::size_t batch, std::size_t tables, std::size_t dim) override;
  void copy_columns(const float* src, std::size_t src_stride, float* dst, std::size_t width, std::size_t rows) override;

 protected:
  void* stream() const { return blas_.stream(); }

 private:
  // The reductions' workspace for `channels` channels, grown on demand.
  double* partials(std::size_t channels);

  Blas& blas_;
  CachingAllocator& allocator_;
  CachedBuffer<double> partials_;
};

}  // namespace dpbench::cuda
