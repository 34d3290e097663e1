// CPU kernels of the CNN workload (see cnn_kernels.hpp): convolution as im2col + one OpenBLAS
// GEMM per chunk of samples (layout: workloads/conv_layout.hpp), 2x2 max-pooling, ReLU and the
// stages of PyTorch's SyncBatchNorm. Plain loops and cblas only; not threaded beyond what
// OpenBLAS does inside a GEMM, and not meant to be fast for shapes where a direct or Winograd
// convolution would win.
#include "workloads/cnn_kernels.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/blas_gemm.hpp"

namespace dpbench::cpu {

namespace {

using detail::gemm;

// Throws InputError when the kernel does not fit the padded input or a GEMM dimension exceeds
// what cblas's int arguments can hold.
void check_shape(const ConvShape& s) {
  if (s.R == 0 || s.S == 0 || s.H + 2 * s.pad < s.R || s.W + 2 * s.pad < s.S) {
    throw InputError(
        fmt::format("conv2d: kernel {}x{} does not fit input {}x{} with padding {}", s.R, s.S, s.H, s.W, s.pad));
  }
  const std::size_t crs = s.C * s.R * s.S, pq = s.P() * s.Q();
  if (crs > INT_MAX || pq > INT_MAX || s.K > INT_MAX) {
    throw InputError(fmt::format("conv2d: GEMM dimensions K={} CRS={} PQ={} exceed int range", s.K, crs, pq));
  }
}

// Two sums over i in [0, m) of the terms add(i, a, b) adds, in four interleaved chains (i mod 4
// for the first m - m % 4 terms, the rest in the first chain) added pairwise at the end: four
// independent dependency chains instead of one, the same order on every run.
struct Sums4 {
  double a, b;
};
template <typename Add>
Sums4 sums4(std::size_t m, const Add& add) {
  double a0 = 0, a1 = 0, a2 = 0, a3 = 0, b0 = 0, b1 = 0, b2 = 0, b3 = 0;
  std::size_t i = 0;
  for (; i + 4 <= m; i += 4) {
    add(i, a0, b0);
    add(i + 1, a1, b1);
    add(i + 2, a2, b2);
    add(i + 3, a3, b3);
  }
  for (; i < m; ++i) add(i, a0, b0);
  return {(a0 + a1) + (a2 + a3), (b0 + b1) + (b2 + b3)};
}

}  // namespace

template <typename T>
void im2col(const T* x, T* col, const ConvShape& s, std::size_t n) {
  const std::size_t P = s.P(), Q = s.Q(), pq = P * Q, cols = n * pq, chw = s.C * s.H * s.W;
  for (std::size_t c = 0; c < s.C; ++c) {
    for (std::size_t r = 0; r < s.R; ++r) {
      for (std::size_t t = 0; t < s.S; ++t) {
        T* row = col + ((c * s.R + r) * s.S + t) * cols;
        // Output columns q whose input column w = q + t - pad lies in [0, W).
        const std::size_t q_lo = s.pad > t ? s.pad - t : 0;
        const std::size_t q_hi = t > s.W + s.pad ? 0 : std::min(Q, s.W + s.pad - t);  // exclusive
        // Output rows p whose input row h = p + r - pad lies in [0, H).
        const std::size_t p_lo = s.pad > r ? s.pad - r : 0;
        const std::size_t p_hi = r > s.H + s.pad ? 0 : std::min(P, s.H + s.pad - r);  // exclusive
        for (std::size_t j = 0; j < n; ++j) {
          const T* xc = x + j * chw + c * s.H * s.W;
          T* out = row + j * pq;
          if (p_lo >= p_hi || q_lo >= q_hi) {
            std::fill(out, out + pq, T(0));
            continue;
          }
          std::fill(out, out + p_lo * Q, T(0));
          std::fill(out + p_hi * Q, out + pq, T(0));
          // x[p_lo + r - pad, q_lo + t - pad]: what out[p_lo, q_lo] copies (q_lo + t >= pad).
          const T* in = xc + (p_lo + r - s.pad) * s.W + (q_lo + t - s.pad);
          if (Q == s.W) {
            // Rows of out and x have the same stride ("same" padding): one copy for all valid
            // rows, from (p_lo, q_lo) to (p_hi - 1, q_hi - 1), then the columns outside
            // [q_lo, q_hi), which picked up the neighbouring row's edge, zeroed.
            std::copy(in, in + (p_hi - 1 - p_lo) * Q + (q_hi - q_lo), out + p_lo * Q + q_lo);
            for (std::size_t p = p_lo; p < p_hi; ++p) {
              std::fill(out + p * Q, out + p * Q + q_lo, T(0));
              std::fill(out + p * Q + q_hi, out + (p + 1) * Q, T(0));
            }
            continue;
          }
          for (std::size_t p = p_lo; p < p_hi; ++p, in += s.W) {
            std::fill(out + p * Q, out + p * Q + q_lo, T(0));
            std::copy(in, in + (q_hi - q_lo), out + p * Q + q_lo);
            std::fill(out + p * Q + q_hi, out + (p + 1) * Q, T(0));
          }
        }
      }
    }
  }
}

template <typename T>
void col2im(const T* col, T* dx, const ConvShape& s, std::size_t n) {
  const std::size_t P = s.P(), Q = s.Q(), pq = P * Q, cols = n * pq, chw = s.C * s.H * s.W;
  std::fill(dx, dx + n * chw, T(0));
  for (std::size_t c = 0; c < s.C; ++c) {
    for (std::size_t r = 0; r < s.R; ++r) {
      for (std::size_t t = 0; t < s.S; ++t) {
        const T* row = col + ((c * s.R + r) * s.S + t) * cols;
        const std::size_t q_lo = s.pad > t ? s.pad - t : 0;
        const std::size_t q_hi = t > s.W + s.pad ? 0 : std::min(Q, s.W + s.pad - t);
        if (q_lo >= q_hi) continue;
        for (std::size_t j = 0; j < n; ++j) {
          T* dxc = dx + j * chw + c * s.H * s.W;
          for (std::size_t p = 0; p < P; ++p) {
            const std::size_t h_plus_pad = p + r;
            if (h_plus_pad < s.pad || h_plus_pad - s.pad >= s.H) continue;
            const T* in = row + j * pq + p * Q;
            T* out = dxc + (h_plus_pad - s.pad) * s.W;
            for (std::size_t q = q_lo; q < q_hi; ++q) out[q + t - s.pad] += in[q];  // q + t >= pad
          }
        }
      }
    }
  }
}

template <typename T>
void conv2d_forward(const T* x, const T* w, const T* b, T* y, const ConvShape& s, T* ws) {
  check_shape(s);
  const std::size_t crs = s.crs(), pq = s.pq(), chw = s.C * s.H * s.W, chunk = s.chunk();
  for (std::size_t n0 = 0; n0 < s.N; n0 += chunk) {
    const std::size_t n = std::min(chunk, s.N - n0), cols = n * pq;
    T* col = ws;
    T* out = ws + crs * cols;
    im2col(x + n0 * chw, col, s, n);
    // out[K, n*PQ] = w[K, CRS] . col[CRS, n*PQ], then permuted into y[n0 + j, k, :].
    gemm(CblasNoTrans, CblasNoTrans, s.K, cols, crs, w, crs, col, cols, T(0), out, cols);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t k = 0; k < s.K; ++k) {
        const T* src = out + k * cols + j * pq;
        T* dst = y + ((n0 + j) * s.K + k) * pq;
        if (b == nullptr) {
          std::copy(src, src + pq, dst);
        } else {
          for (std::size_t i = 0; i < pq; ++i) dst[i] = src[i] + b[k];
        }
      }
    }
  }
}

template <typename T>
void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const ConvShape& s, T* ws) {
  check_shape(s);
  const std::size_t crs = s.crs(), pq = s.pq(), chw = s.C * s.H * s.W, chunk = s.chunk();
  if (s.N == 0) std::fill(dw, dw + s.K * crs, T(0));  // an empty sum
  for (std::size_t n0 = 0; n0 < s.N; n0 += chunk) {
    const std::size_t n = std::min(chunk, s.N - n0), cols = n * pq;
    T* col = ws;
    T* dyt = ws + crs * cols;
    im2col(x + n0 * chw, col, s, n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t k = 0; k < s.K; ++k) {
        const T* src = dy + ((n0 + j) * s.K + k) * pq;
        std::copy(src, src + pq, dyt + k * cols + j * pq);
      }
    }
    // dw[K, CRS] (+)= dyt[K, n*PQ] . col[CRS, n*PQ]^T: the first chunk overwrites dw.
    gemm(CblasNoTrans, CblasTrans, s.K, crs, cols, dyt, cols, col, cols, n0 == 0 ? T(0) : T(1), dw, crs);
    if (dx != nullptr) {
      // dcol[CRS, n*PQ] = w^T[CRS, K] . dyt[K, n*PQ] over col, then gathered back onto dx.
      gemm(CblasTrans, CblasNoTrans, crs, cols, s.K, w, crs, dyt, cols, T(0), col, cols);
      col2im(col, dx + n0 * chw, s, n);
    }
  }
  if (db != nullptr) {
    for (std::size_t k = 0; k < s.K; ++k) {
      double acc = 0.0;
      for (std::size_t j = 0; j < s.N; ++j) {
        const T* dyk = dy + (j * s.K + k) * pq;
        for (std::size_t i = 0; i < pq; ++i) acc += static_cast<double>(dyk[i]);
      }
      db[k] = static_cast<T>(acc);
    }
  }
}

template <typename T>
void maxpool2x2_forward(const T* x, T* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                        std::size_t W) {
  if (H % 2 != 0 || W % 2 != 0) {
    throw InputError(fmt::format("maxpool2x2: input {}x{} is not even in both dimensions", H, W));
  }
  if (N * C * H * W > static_cast<std::size_t>(INT32_MAX)) {
    throw InputError(fmt::format("maxpool2x2: {} elements exceed int32 argmax indices", N * C * H * W));
  }
  const std::size_t Ho = H / 2, Wo = W / 2;
  for (std::size_t nc = 0; nc < N * C; ++nc) {
    for (std::size_t i = 0; i < Ho; ++i) {
      const std::size_t top = nc * H * W + 2 * i * W;  // flat index of the window row's start
      const T* r0 = x + top;
      const T* r1 = r0 + W;
      T* yo = y + (nc * Ho + i) * Wo;
      std::int32_t* ao = argmax + (nc * Ho + i) * Wo;
      for (std::size_t j = 0; j < Wo; ++j) {
        // Row-major scan of the window; strict > keeps the first maximum. Without branches
        // (the comparisons are data-dependent, so branches would mispredict): std::max(best, c)
        // is (best < c) ? c : best, and the index is chosen by a mask.
        T best = r0[2 * j];
        std::size_t at = top + 2 * j;
        const T cand[3] = {r0[2 * j + 1], r1[2 * j], r1[2 * j + 1]};
        const std::size_t where[3] = {at + 1, at + W, at + W + 1};
        for (int k = 0; k < 3; ++k) {
          const std::size_t take = std::size_t{0} - static_cast<std::size_t>(cand[k] > best);
          at = (where[k] & take) | (at & ~take);
          best = std::max(best, cand[k]);
        }
        yo[j] = best;
        ao[j] = static_cast<std::int32_t>(at);
      }
    }
  }
}

template <typename T>
void maxpool2x2_backward(const T* dy, const std::int32_t* argmax, T* dx, std::size_t N, std::size_t C, std::size_t H,
                         std::size_t W) {
  std::fill(dx, dx + N * C * H * W, T(0));
  const std::size_t out = N * C * (H / 2) * (W / 2);
  for (std::size_t i = 0; i < out; ++i) dx[argmax[i]] += dy[i];
}

template <typename T>
void relu_inplace(T* y, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] = std::max(y[i], T(0));
}

template <typename T>
void batchnorm_local_sums(const T* x, std::size_t N, std::size_t C, std::size_t HW, double* sum, double* sumsq) {
  std::fill(sum, sum + C, 0.0);
  std::fill(sumsq, sumsq + C, 0.0);
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t c = 0; c < C; ++c) {
      const Sums4 t = sums4(HW, [&](std::size_t i, double& a, double& b) {
        const double v = static_cast<double>(x[(n * C + c) * HW + i]);
        a += v;
        b += v * v;
      });
      sum[c] += t.a;
      sumsq[c] += t.b;
    }
  }
}

template <typename T>
void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, T eps, T momentum,
                              T* mean, T* invstd, T* running_mean, T* running_var) {
  if (!(count > 0)) throw InputError(fmt::format("batchnorm: count {} must be positive", count));
  const double m = static_cast<double>(momentum);
  for (std::size_t c = 0; c < C; ++c) {
    const double mu = sum[c] / count;
    // Biased variance; clamped because E[x^2] - E[x]^2 can round below zero.
    const double var = std::max(sumsq[c] / count - mu * mu, 0.0);
    mean[c] = static_cast<T>(mu);
    invstd[c] = static_cast<T>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    if (running_mean != nullptr) {
      running_mean[c] = static_cast<T>((1.0 - m) * static_cast<double>(running_mean[c]) + m * mu);
    }
    if (running_var != nullptr) {
      const double unbiased = count > 1 ? var * count / (count - 1) : var;
      running_var[c] = static_cast<T>((1.0 - m) * static_cast<double>(running_var[c]) + m * unbiased);
    }
  }
}

template <typename T>
void batchnorm_normalize(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, T* y, std::size_t N,
                         std::size_t C, std::size_t HW) {
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t c = 0; c < C; ++c) {
      const std::size_t off = (n * C + c) * HW;
      // y = (x - mean) * (gamma * invstd) + beta
      const T scale = gamma[c] * invstd[c];
      const T mu = mean[c], shift = beta[c];
      for (std::size_t i = 0; i < HW; ++i) y[off + i] = (x[off + i] - mu) * scale + shift;
    }
  }
}

template <typename T>
void batchnorm_backward_reduce(const T* dy, const T* x, const T* mean, const T* invstd, std::size_t N, std::size_t C,
                               std::size_t HW, double* sum_dy, double* sum_dy_xmu, T* dgamma, T* dbeta) {
  std::fill(sum_dy, sum_dy + C, 0.0);
  std::fill(sum_dy_xmu, sum_dy_xmu + C, 0.0);
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t c = 0; c < C; ++c) {
      const std::size_t off = (n * C + c) * HW;
      const double mu = static_cast<double>(mean[c]);
      const Sums4 t = sums4(HW, [&](std::size_t i, double& a, double& b) {
        const double g = static_cast<double>(dy[off + i]);
        a += g;
        b += g * (static_cast<double>(x[off + i]) - mu);
      });
      sum_dy[c] += t.a;
      sum_dy_xmu[c] += t.b;
    }
  }
  for (std::size_t c = 0; c < C; ++c) {
    dgamma[c] = static_cast<T>(sum_dy_xmu[c] * static_cast<double>(invstd[c]));
    dbeta[c] = static_cast<T>(sum_dy[c]);
  }
}

template <typename T>
void batchnorm_backward_elemt(const T* dy, const T* x, const T* mean, const T* invstd, const T* gamma,
                              const double* sum_dy, const double* sum_dy_xmu, double count, T* dx, std::size_t N,
                              std::size_t C, std::size_t HW) {
  if (!(count > 0)) throw InputError(fmt::format("batchnorm: count {} must be positive", count));
  for (std::size_t n = 0; n < N; ++n) {
    for (std::size_t c = 0; c < C; ++c) {
      const std::size_t off = (n * C + c) * HW;
      // As ATen's batch_norm_backward_elemt: dx = (dy - mean_dy - (x - mean) * k) * scale with
      // k = invstd^2 * mean_dy_xmu and scale = gamma * invstd.
      const T mu = mean[c];
      const T mean_dy = static_cast<T>(sum_dy[c] / count);
      const T k = static_cast<T>(static_cast<double>(invstd[c]) * static_cast<double>(invstd[c]) * sum_dy_xmu[c] /
                                 count);
      const T scale = gamma[c] * invstd[c];
      for (std::size_t i = 0; i < HW; ++i) {
        dx[off + i] = (dy[off + i] - mean_dy - (x[off + i] - mu) * k) * scale;
      }
    }
  }
}

#define DPBENCH_INSTANTIATE(T)                                                                                         \
  template void conv2d_forward<T>(const T*, const T*, const T*, T*, const ConvShape&, T*);                             \
  template void conv2d_backward<T>(const T*, const T*, const T*, T*, T*, T*, const ConvShape&, T*);                    \
  template void im2col<T>(const T*, T*, const ConvShape&, std::size_t);                                                \
  template void col2im<T>(const T*, T*, const ConvShape&, std::size_t);                                                \
  template void maxpool2x2_forward<T>(const T*, T*, std::int32_t*, std::size_t, std::size_t, std::size_t,              \
                                      std::size_t);                                                                    \
  template void maxpool2x2_backward<T>(const T*, const std::int32_t*, T*, std::size_t, std::size_t, std::size_t,       \
                                       std::size_t);                                                                   \
  template void relu_inplace<T>(T*, std::size_t);                                                                      \
  template void batchnorm_local_sums<T>(const T*, std::size_t, std::size_t, std::size_t, double*, double*);            \
  template void batchnorm_finalize_stats<T>(const double*, const double*, double, std::size_t, T, T, T*, T*, T*, T*);  \
  template void batchnorm_normalize<T>(const T*, const T*, const T*, const T*, const T*, T*, std::size_t, std::size_t, \
                                       std::size_t);                                                                   \
  template void batchnorm_backward_reduce<T>(const T*, const T*, const T*, const T*, std::size_t, std::size_t,         \
                                             std::size_t, double*, double*, T*, T*);                                   \
  template void batchnorm_backward_elemt<T>(const T*, const T*, const T*, const T*, const T*, const double*,           \
                                            const double*, double, T*, std::size_t, std::size_t, std::size_t);
DPBENCH_INSTANTIATE(float)
DPBENCH_INSTANTIATE(double)
#undef DPBENCH_INSTANTIATE

}  // namespace dpbench::cpu
