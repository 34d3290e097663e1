// CPU kernels of the CNN workload, NCHW layout as PyTorch: 2-D convolution over the whole batch
// (im2col + one OpenBLAS GEMM per chunk of samples, layout in workloads/conv_layout.hpp), 2x2
// max-pooling, in-place ReLU, and BatchNorm split into the same stages as PyTorch's SyncBatchNorm
// (torch/nn/modules/_functions.py: batch_norm_stats, gather, normalise, backward_reduce,
// backward_elemt), so that statistics and gradient sums can be combined across ranks between the
// stages. T is float (training) or double (finite-difference checks).
#pragma once

#include <cstddef>
#include <cstdint>

#include "workloads/conv_layout.hpp"

namespace dpbench::cpu {

// y[N, K, P, Q] = conv(x[N, C, H, W], w[K, C, R, S]) + b[K] (b may be null), over the whole batch
// in chunks of s.chunk() samples (workloads/conv_layout.hpp): per chunk im2col into
// col [C*R*S, n*P*Q], one GEMM out[K, n*P*Q] = w . col, and the permute of out into y's NCHW
// layout (adding b). ws: workspace of s.workspace_size() elements. Throws InputError when the
// kernel does not fit the padded input or a GEMM dimension exceeds int.
template <typename T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvShape& s, T* ws);

// Backward of conv2d_forward: given dy [N, K, P, Q], overwrites dw [K, C, R, S], db [K] (if not
// null; per channel the sum over N*P*Q in double, rounded once) and, if dx is not null,
// dx [N, C, H, W]. Per chunk: im2col, dy permuted into out [K, n*P*Q], one GEMM
// dw (+)= out . col^T (k = n*P*Q), one GEMM col = w^T . out, and col2im onto dx.
// ws: workspace of s.workspace_size() elements. Throws as conv2d_forward.
template <typename T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvShape& s, T* ws);

// The column matrix col [C*R*S, n*P*Q] of the n samples x [n, C, H, W] (workloads/conv_layout.hpp),
// by row copies; equal element for element to conv::im2col_source, what the GPU runs.
template <typename T>
void im2col(const T* x, T* col, const ConvShape& s, std::size_t n);

// The adjoint of im2col for n samples: overwrites dx [n, C, H, W] with the sums of the column
// gradient col [C*R*S, n*P*Q] over each element's readers, scattering row by row in the order of
// conv::col2im_gather (bit for bit the same).
template <typename T>
void col2im(const T* col, T* dx, const ConvShape& s, std::size_t n);

// 2x2 max-pooling, stride 2: x [N, C, H, W] (H, W even) -> y [N, C, H/2, W/2]; argmax [N, C,
// H/2, W/2] holds the flat index within x of each maximum (first maximum on ties).
template <typename T>
void maxpool2x2_forward(const T* x, T* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                        std::size_t W);
// dx [N, C, H, W] = 0 except dx[argmax[i]] += dy[i].
template <typename T>
void maxpool2x2_backward(const T* dy, const std::int32_t* argmax, T* dx, std::size_t N, std::size_t C, std::size_t H,
                         std::size_t W);

// In place y = max(y, 0) over n elements.
template <typename T>
void relu_inplace(T* y, std::size_t n);

// ---- BatchNorm over x [N, C, HW] (per channel c, over the N*HW values) ------------------------
// Stage 1 (per rank): sum[C] and sum of squares sumsq[C] of this rank's values.
template <typename T>
void batchnorm_local_sums(const T* x, std::size_t N, std::size_t C, std::size_t HW, double* sum, double* sumsq);
// Stage 2 (after combining the sums of every rank): mean and 1/sqrt(var + eps) from totals over
// `count` values (biased variance, as used to normalise), and the running statistics update
// running = (1 - momentum) * running + momentum * batch (unbiased variance for running_var).
// running_mean / running_var may be null (no update).
template <typename T>
void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, T eps, T momentum,
                              T* mean, T* invstd, T* running_mean, T* running_var);
// Stage 3: y = gamma * (x - mean) * invstd + beta.
template <typename T>
void batchnorm_normalize(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, T* y, std::size_t N,
                         std::size_t C, std::size_t HW);
// Backward stage 1 (per rank): sum_dy[C] = sum dy, sum_dy_xmu[C] = sum dy * (x - mean);
// dgamma = sum_dy_xmu * invstd and dbeta = sum_dy (of this rank's values; overwritten).
template <typename T>
void batchnorm_backward_reduce(const T* dy, const T* x, const T* mean, const T* invstd, std::size_t N, std::size_t C,
                               std::size_t HW, double* sum_dy, double* sum_dy_xmu, T* dgamma, T* dbeta);
// Backward stage 2 (with sums combined over all ranks, `count` values in all):
// dx = gamma * invstd * (dy - sum_dy/count - (x - mean) * invstd^2 * sum_dy_xmu/count).
template <typename T>
void batchnorm_backward_elemt(const T* dy, const T* x, const T* mean, const T* invstd, const T* gamma,
                              const double* sum_dy, const double* sum_dy_xmu, double count, T* dx, std::size_t N,
                              std::size_t C, std::size_t HW);

}  // namespace dpbench::cpu
