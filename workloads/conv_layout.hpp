// The layout of the batched convolution, written once for both devices: the shape, the chunking
// of a batch under the workspace cap, and the index math of im2col, col2im and the permutes,
// as inline functions that nvcc compiles as __host__ __device__ (plain inline functions in C++).
// workloads/cnn_kernels.cpp and cuda/cuda_cnn_kernels.cu both follow it, and
// tests/test_cnn_kernels.cpp runs the element-wise functions the CUDA kernels run on the host, so
// the CPU tests cover the GPU's index math. Not for: the GEMMs or anything that allocates.
//
// A chunk of n consecutive samples is convolved with one GEMM over its column matrix:
//   col [C*R*S, n*P*Q]: row (c, r, t) = (c*R + r)*S + t, column j*P*Q + p*Q + q for sample j of
//                       the chunk, holding x[j, c, p + r - pad, q + t - pad] (0 in the padding);
//   out [K, n*P*Q]:     the GEMM's output w[K, C*R*S] . col, or in the backward pass dy of the
//                       chunk permuted into the same layout; out[k, j*P*Q + i] = y[j, k, i].
// The workspace of a chunk is col followed by out: n * P*Q * (C*R*S + K) elements, and a batch
// is cut into chunks of ConvShape::chunk() samples so that it stays within kWorkspaceCap (unless
// one sample alone needs more).
#pragma once

#include <algorithm>
#include <cstddef>

#if defined(__CUDACC__)
#define DPBENCH_HD __host__ __device__
#else
#define DPBENCH_HD
#endif

namespace dpbench {
namespace conv {

// The cap of a convolution's workspace: 16 Mi elements (64 MiB of floats). A single sample whose
// workspace exceeds it still runs, alone in its chunk.
inline constexpr std::size_t kWorkspaceCap = std::size_t{16} << 20;

}  // namespace conv

namespace cpu {

// Shape of a convolution: input [N, C, H, W], weight [K, C, R, S], output [N, K, P, Q] with
// P = H + 2*pad - R + 1, Q = W + 2*pad - S + 1 (stride 1). workspace_cap: elements a chunk's
// workspace may take (conv::kWorkspaceCap unless a test forces smaller chunks).
struct ConvShape {
  std::size_t N, C, H, W, K, R, S, pad;
  std::size_t workspace_cap = conv::kWorkspaceCap;
  DPBENCH_HD std::size_t P() const { return H + 2 * pad - R + 1; }
  DPBENCH_HD std::size_t Q() const { return W + 2 * pad - S + 1; }
  DPBENCH_HD std::size_t crs() const { return C * R * S; }
  DPBENCH_HD std::size_t pq() const { return P() * Q(); }
  // Workspace elements per sample: its P*Q columns of col and of out.
  std::size_t workspace_per_sample() const { return pq() * (crs() + K); }
  // Samples per chunk: as many as fit workspace_cap, at least 1, at most N (0 if N is 0).
  std::size_t chunk() const {
    const std::size_t per = std::max<std::size_t>(workspace_per_sample(), 1);
    return std::min(N, std::max<std::size_t>(workspace_cap / per, 1));
  }
  // Elements of the workspace conv2d_forward / conv2d_backward take: one chunk's col and out.
  std::size_t workspace_size() const { return chunk() * workspace_per_sample(); }
};

}  // namespace cpu

namespace conv {

// Element i of the column matrix col [C*R*S, n*P*Q] of a chunk of n samples: true and *src set to
// the offset of the element it copies within the chunk's input [n, C, H, W], or false where it
// falls in the padding (the element is 0). Unsigned arithmetic: h = p + r - pad is tested as
// p + r against pad.
DPBENCH_HD inline bool im2col_source(const cpu::ConvShape& s, std::size_t n, std::size_t i, std::size_t* src) {
  const std::size_t P = s.P(), Q = s.Q(), pq = P * Q, cols = n * pq;
  const std::size_t row = i / cols, column = i - row * cols;
  const std::size_t j = column / pq, rest = column - j * pq;
  const std::size_t p = rest / Q, q = rest - p * Q;
  const std::size_t t = row % s.S, r = (row / s.S) % s.R, c = row / (s.R * s.S);
  const std::size_t h_plus_pad = p + r, w_plus_pad = q + t;
  if (h_plus_pad < s.pad || h_plus_pad - s.pad >= s.H || w_plus_pad < s.pad || w_plus_pad - s.pad >= s.W) {
    return false;
  }
  *src = ((j * s.C + c) * s.H + (h_plus_pad - s.pad)) * s.W + (w_plus_pad - s.pad);
  return true;
}

// Element i of a chunk's input gradient dx [n, C, H, W] from its column gradient col
// [C*R*S, n*P*Q] (the adjoint of im2col, as a gather): the sum of col[(c, r, t), j*P*Q + p*Q + q]
// over every (r, t) whose window reads (h, w), p = h + pad - r and q = w + pad - t, added from 0
// in (r, t) order, the order in which the CPU's scattering col2im adds, so the two agree bit for
// bit.
template <typename T>
DPBENCH_HD inline T col2im_gather(const T* col, const cpu::ConvShape& s, std::size_t n, std::size_t i) {
  const std::size_t P = s.P(), Q = s.Q(), pq = P * Q, cols = n * pq;
  const std::size_t w = i % s.W, h = (i / s.W) % s.H, c = (i / (s.H * s.W)) % s.C;
  const std::size_t j = i / (s.C * s.H * s.W);
  T acc = T(0);
  for (std::size_t r = 0; r < s.R; ++r) {
    if (h + s.pad < r || h + s.pad - r >= P) continue;
    const std::size_t p = h + s.pad - r;
    for (std::size_t t = 0; t < s.S; ++t) {
      if (w + s.pad < t || w + s.pad - t >= Q) continue;
      const std::size_t q = w + s.pad - t;
      acc += col[((c * s.R + r) * s.S + t) * cols + j * pq + p * Q + q];
    }
  }
  return acc;
}

// Element i of out [K, n*P*Q] is element nchw_of_out(s, n, i) of the chunk's output [n, K, P, Q]
// (out[k, j*P*Q + e] = y[j, k, e]): the permute after the forward GEMM and, read the other way,
// the one of dy before the backward GEMMs.
DPBENCH_HD inline std::size_t nchw_of_out(const cpu::ConvShape& s, std::size_t n, std::size_t i) {
  const std::size_t pq = s.P() * s.Q(), cols = n * pq;
  const std::size_t k = i / cols, column = i - k * cols;
  const std::size_t j = column / pq, e = column - j * pq;
  return (j * s.K + k) * pq + e;
}

}  // namespace conv
}  // namespace dpbench
