// CPU kernels of the CNN workload, NCHW layout as PyTorch: 2-D convolution (im2col + OpenBLAS
// GEMM), 2x2 max-pooling, in-place ReLU, and BatchNorm split into the same stages as PyTorch's
// SyncBatchNorm (torch/nn/modules/_functions.py: batch_norm_stats, gather, normalise,
// backward_reduce, backward_elemt), so that statistics and gradient sums can be combined across
// ranks between the stages. T is float (training) or double (finite-difference checks).
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpbench::cpu {

// Shape of a convolution: input [N, C, H, W], weight [K, C, R, S], output [N, K, P, Q] with
// P = H + 2*pad - R + 1, Q = W + 2*pad - S + 1 (stride 1).
struct ConvShape {
  std::size_t N, C, H, W, K, R, S, pad;
  std::size_t P() const { return H + 2 * pad - R + 1; }
  std::size_t Q() const { return W + 2 * pad - S + 1; }
  // Floats of the im2col workspace for one sample: [C*R*S, P*Q].
  std::size_t col_size() const { return C * R * S * P() * Q(); }
};

// y = conv(x, w) + b (b may be null). col: workspace of s.col_size() elements.
template <typename T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvShape& s, T* col);

// Backward of conv2d_forward: overwrites dw [K,C,R,S] and db [K] (if not null) and, if dx is not
// null, dx [N,C,H,W]. col: workspace of s.col_size() elements.
template <typename T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvShape& s,
                     T* col);

// 2x2 max-pooling, stride 2: x [N, C, H, W] (H, W even) -> y [N, C, H/2, W/2]; argmax [N, C,
// H/2, W/2] holds the flat index within x of each maximum (first maximum on ties).
template <typename T>
void maxpool2x2_forward(const T* x, T* y, std::int32_t* argmax, std::size_t N, std::size_t C,
                        std::size_t H, std::size_t W);
// dx [N, C, H, W] = 0 except dx[argmax[i]] += dy[i].
template <typename T>
void maxpool2x2_backward(const T* dy, const std::int32_t* argmax, T* dx, std::size_t N,
                         std::size_t C, std::size_t H, std::size_t W);

// In place y = max(y, 0) over n elements.
template <typename T>
void relu_inplace(T* y, std::size_t n);

// ---- BatchNorm over x [N, C, HW] (per channel c, over the N*HW values) ------------------------
// Stage 1 (per rank): sum[C] and sum of squares sumsq[C] of this rank's values.
template <typename T>
void batchnorm_local_sums(const T* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                          double* sumsq);
// Stage 2 (after combining the sums of every rank): mean and 1/sqrt(var + eps) from totals over
// `count` values (biased variance, as used to normalise), and the running statistics update
// running = (1 - momentum) * running + momentum * batch (unbiased variance for running_var).
// running_mean / running_var may be null (no update).
template <typename T>
void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C,
                              T eps, T momentum, T* mean, T* invstd, T* running_mean, T* running_var);
// Stage 3: y = gamma * (x - mean) * invstd + beta.
template <typename T>
void batchnorm_normalize(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta,
                         T* y, std::size_t N, std::size_t C, std::size_t HW);
// Backward stage 1 (per rank): sum_dy[C] = sum dy, sum_dy_xmu[C] = sum dy * (x - mean);
// dgamma = sum_dy_xmu * invstd and dbeta = sum_dy (of this rank's values; overwritten).
template <typename T>
void batchnorm_backward_reduce(const T* dy, const T* x, const T* mean, const T* invstd,
                               std::size_t N, std::size_t C, std::size_t HW, double* sum_dy,
                               double* sum_dy_xmu, T* dgamma, T* dbeta);
// Backward stage 2 (with sums combined over all ranks, `count` values in all):
// dx = gamma * invstd * (dy - sum_dy/count - (x - mean) * invstd^2 * sum_dy_xmu/count).
template <typename T>
void batchnorm_backward_elemt(const T* dy, const T* x, const T* mean, const T* invstd,
                              const T* gamma, const double* sum_dy, const double* sum_dy_xmu,
                              double count, T* dx, std::size_t N, std::size_t C, std::size_t HW);

}  // namespace dpbench::cpu
