// Tests of the CUDA CNN kernels (cuda/cuda_cnn_kernels.hpp) against their CPU counterparts
// (workloads/cnn_kernels.hpp): the same random inputs of odd shapes (N=3, C=5, H=10, W=6, K=7,
// 3x3 kernel, padding 1: no dimension a multiple of a warp or a GEMM tile) go through both, and
// each output is compared with a stated tolerance: GEMM-based outputs relative to their largest
// element, selections (ReLU, max-pooling) bit for bit. The BatchNorm stages are driven as a
// SyncBatchNorm caller drives them (two "ranks", sums copied to the host, combined, copied back).
// Then one CNN block (conv -> BatchNorm -> ReLU -> max-pool) forward + backward on the GPU
// against the same on the CPU.
// Built with the CUDA target only; without a usable GPU every test is skipped with the reason.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"
#include "tests/cuda_test_util.hpp"
#include "core/error.hpp"
#include "workloads/cnn_kernels.hpp"
#include "workloads/cpu_kernels.hpp"
#include "cuda/cuda_cnn_kernels.hpp"
#include "cuda/cuda_kernels.hpp"

#include <cuda_runtime.h>

namespace dpbench {
namespace {

// ---------------------------------------------------------------------------------------------
// Tolerances (relative error = max |gpu - cpu| / max |cpu| over the tensor).

// fp32 GEMM: cuBLAS and OpenBLAS add the same fp32 products in different orders. Each addition
// rounds to 2^-24 (6e-8) relative, so over k <= 180 terms (CRS = 45, N*PQ = 180, K = 7) with
// random signs the two differ by ~1e-6 of the largest output; 1e-5 leaves a margin and still catches any
// wrong index (error ~1).
constexpr double kFp32Tolerance = 1e-5;
// tf32 GEMM: both inputs are rounded to a 10-bit mantissa (~5e-4 relative each, so ~1e-3 per
// product), products accumulated in fp32; random-sign errors grow like sqrt(k) as the outputs
// do, so they stay near 1e-3 of the typical output, below 5e-3 of the largest.
constexpr double kTf32Tolerance = 5e-3;
// Double sums over 180 values per channel in another order: each addition rounds to 2^-53
// (1.1e-16), so the two differ by ~1e-14 of the sum; 1e-9 catches any missing or doubled value.
constexpr double kDoubleSumTolerance = 1e-9;

double gemm_tolerance(Precision precision) { return precision == Precision::tf32 ? kTf32Tolerance : kFp32Tolerance; }

using testing::cuda_ok;
using testing::DeviceBuffer;  // tests/cuda_test_util.hpp

// Skips without a usable CUDA device; a stream per test (tests/cuda_test_util.hpp).
class CudaCnnKernels : public testing::CudaStreamTest {};

// ---------------------------------------------------------------------------------------------
// Host helpers

using testing::random_floats;

// max |got - want| / max |want|; infinity when got holds a NaN or has the wrong length.
template <typename T>
double rel_error(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double err = 0.0;
  double scale = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    if (!std::isfinite(diff)) return std::numeric_limits<double>::infinity();
    err = std::max(err, diff);
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return scale > 0.0 ? err / scale : err;
}

// Number of elements whose bits differ (float == would call -0 and 0 equal, NaN and NaN not).
template <typename T>
std::size_t bit_mismatches(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) ++bad;
  }
  return bad;
}

// Odd shapes: N=3, C=5, H=10, W=6, K=7 output channels, 3x3 kernel, padding 1 (P=10, Q=6).
const cpu::ConvShape kShape{3, 5, 10, 6, 7, 3, 3, 1};
constexpr std::size_t kN = 3, kC = 5, kH = 10, kW = 6;
constexpr std::size_t kHW = kH * kW;

std::size_t x_size(const cpu::ConvShape& s) { return s.N * s.C * s.H * s.W; }
std::size_t w_size(const cpu::ConvShape& s) { return s.K * s.C * s.R * s.S; }
std::size_t y_size(const cpu::ConvShape& s) { return s.N * s.K * s.P() * s.Q(); }

// ---------------------------------------------------------------------------------------------

// ---- convolution ------------------------------------------------------------------------------

TEST_F(CudaCnnKernels, Conv2dForwardMatchesCpu) {
  const auto x = random_floats(x_size(kShape), 1);
  const auto w = random_floats(w_size(kShape), 2, 0.3f);
  const auto b = random_floats(kShape.K, 3);
  std::vector<float> col(kShape.workspace_size());
  const DeviceBuffer<float> d_x(x), d_w(w), d_b(b);
  DeviceBuffer<float> d_col(kShape.workspace_size());
  for (const Precision precision : {Precision::fp32, Precision::tf32}) {
    for (const bool bias : {true, false}) {
      SCOPED_TRACE(std::string(name(precision)) + (bias ? " bias" : " no bias"));
      std::vector<float> want(y_size(kShape));
      cpu::conv2d_forward(x.data(), w.data(), bias ? b.data() : nullptr, want.data(), kShape, col.data());
      DeviceBuffer<float> d_y(y_size(kShape));
      cuda::Blas blas(stream(), precision);
      cuda::conv2d_forward(blas, d_x.get(), d_w.get(), bias ? d_b.get() : nullptr, d_y.get(), kShape, d_col.get(),
                           stream());
      // GEMM over k = CRS = 45, then one float bias addition (exact on both sides):
      // fp32 1e-5 (summation order only), tf32 5e-3 (10-bit mantissa inputs).
      EXPECT_LT(rel_error(d_y.to_host(), want), gemm_tolerance(precision));
    }
  }
}

TEST_F(CudaCnnKernels, Conv2dForwardWithoutPaddingMatchesCpu) {
  // Padding 0 (P = 8, Q = 4): im2col never reads the padding, the output is smaller than x.
  const cpu::ConvShape s{kN, kC, kH, kW, 7, 3, 3, 0};
  const auto x = random_floats(x_size(s), 4);
  const auto w = random_floats(w_size(s), 5, 0.3f);
  const auto b = random_floats(s.K, 6);
  std::vector<float> col(s.workspace_size()), want(y_size(s));
  cpu::conv2d_forward(x.data(), w.data(), b.data(), want.data(), s, col.data());
  const DeviceBuffer<float> d_x(x), d_w(w), d_b(b);
  DeviceBuffer<float> d_col(s.workspace_size()), d_y(y_size(s));
  cuda::Blas blas(stream(), Precision::fp32);
  cuda::conv2d_forward(blas, d_x.get(), d_w.get(), d_b.get(), d_y.get(), s, d_col.get(), stream());
  // fp32 GEMM over k = 45: 1e-5 (summation order only).
  EXPECT_LT(rel_error(d_y.to_host(), want), kFp32Tolerance);
}

TEST_F(CudaCnnKernels, Conv2dBackwardMatchesCpu) {
  const auto x = random_floats(x_size(kShape), 11);
  const auto w = random_floats(w_size(kShape), 12, 0.3f);
  const auto dy = random_floats(y_size(kShape), 13);
  std::vector<float> col(kShape.workspace_size());
  std::vector<float> want_dx(x_size(kShape)), want_dw(w_size(kShape)), want_db(kShape.K);
  cpu::conv2d_backward(x.data(), w.data(), dy.data(), want_dx.data(), want_dw.data(), want_db.data(), kShape,
                       col.data());
  const DeviceBuffer<float> d_x(x), d_w(w), d_dy(dy);
  DeviceBuffer<float> d_col(kShape.workspace_size());
  DeviceBuffer<double> d_partials(cuda::reduce_partials_size(kShape.K));
  for (const Precision precision : {Precision::fp32, Precision::tf32}) {
    SCOPED_TRACE(std::string(name(precision)));
    DeviceBuffer<float> d_dx(x_size(kShape)), d_dw(w_size(kShape)), d_db(kShape.K);
    cuda::Blas blas(stream(), precision);
    cuda::conv2d_backward(blas, d_x.get(), d_w.get(), d_dy.get(), d_dx.get(), d_dw.get(), d_db.get(), kShape,
                          d_col.get(), d_partials.get(), stream());
    // dw: one GEMM over k = N*PQ = 180 (the batch is one chunk); dx: GEMM over k = K = 7,
    // then col2im adds up to 9 column entries per element. fp32 1e-5, tf32 5e-3 (above).
    EXPECT_LT(rel_error(d_dw.to_host(), want_dw), gemm_tolerance(precision)) << "dw";
    EXPECT_LT(rel_error(d_dx.to_host(), want_dx), gemm_tolerance(precision)) << "dx";
    // db is our double-accumulating reduction in either precision, rounded to float once as on
    // the CPU: at most an ulp apart (~1e-7), so 1e-5 holds for tf32 too.
    EXPECT_LT(rel_error(d_db.to_host(), want_db), kFp32Tolerance) << "db";

    // Again, without dx and db (the first layer's case): the same dw bit for bit, and a second
    // run with dx gives the same dx: col2im gathers in a fixed order, cuBLAS is deterministic
    // on one handle.
    DeviceBuffer<float> d_dw2(w_size(kShape)), d_dx2(x_size(kShape)), d_db2(kShape.K);
    cuda::conv2d_backward(blas, d_x.get(), d_w.get(), d_dy.get(), nullptr, d_dw2.get(), nullptr, kShape, d_col.get(),
                          nullptr, stream());
    EXPECT_EQ(bit_mismatches(d_dw2.to_host(), d_dw.to_host()), 0u) << "dw without dx";
    cuda::conv2d_backward(blas, d_x.get(), d_w.get(), d_dy.get(), d_dx2.get(), d_dw2.get(), d_db2.get(), kShape,
                          d_col.get(), d_partials.get(), stream());
    EXPECT_EQ(bit_mismatches(d_dx2.to_host(), d_dx.to_host()), 0u) << "dx run to run";
    EXPECT_EQ(bit_mismatches(d_db2.to_host(), d_db.to_host()), 0u) << "db run to run";
  }
}

TEST_F(CudaCnnKernels, Conv2dRejectsAKernelThatDoesNotFit) {
  // 5x5 kernel on a 2x2 input with padding 1 (4x4 padded): InputError before any launch, as the
  // CPU's check.
  const cpu::ConvShape s{1, 1, 2, 2, 1, 5, 5, 1};
  cuda::Blas blas(stream(), Precision::fp32);
  EXPECT_THROW(cuda::conv2d_forward(blas, nullptr, nullptr, nullptr, nullptr, s, nullptr, stream()), InputError);
}

// ---- pooling and ReLU -------------------------------------------------------------------------

TEST_F(CudaCnnKernels, MaxPoolForwardMatchesCpuWithIdenticalArgmax) {
  auto x = random_floats(kN * kC * kHW, 21);
  // Ties: in every third window all four equal, in every fifth the last two equal and largest.
  // The first maximum in row-major order must win on both sides.
  const std::size_t Ho = kH / 2, Wo = kW / 2;
  for (std::size_t o = 0; o < kN * kC * Ho * Wo; ++o) {
    const std::size_t nc = o / (Ho * Wo), i = (o / Wo) % Ho, j = o % Wo;
    const std::size_t base = nc * kHW + 2 * i * kW + 2 * j;
    if (o % 3 == 0) {
      x[base + 1] = x[base + kW] = x[base + kW + 1] = x[base];
    } else if (o % 5 == 0) {
      x[base + kW] = x[base + kW + 1] = 10.0f;
    }
  }
  const std::size_t n_out = kN * kC * Ho * Wo;
  std::vector<float> want_y(n_out);
  std::vector<std::int32_t> want_arg(n_out);
  cpu::maxpool2x2_forward(x.data(), want_y.data(), want_arg.data(), kN, kC, kH, kW);
  const DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(n_out);
  DeviceBuffer<std::int32_t> d_arg(n_out);
  cuda::maxpool2x2_forward(d_x.get(), d_y.get(), d_arg.get(), kN, kC, kH, kW, stream());
  // Pure selection, no arithmetic: values and indices exact.
  EXPECT_EQ(bit_mismatches(d_y.to_host(), want_y), 0u);
  EXPECT_EQ(d_arg.to_host(), want_arg);
}

TEST_F(CudaCnnKernels, MaxPoolBackwardMatchesCpu) {
  const auto x = random_floats(kN * kC * kHW, 31);
  const std::size_t n_out = kN * kC * (kH / 2) * (kW / 2);
  const auto dy = random_floats(n_out, 32);
  std::vector<float> y(n_out), want_dx(kN * kC * kHW);
  std::vector<std::int32_t> arg(n_out);
  cpu::maxpool2x2_forward(x.data(), y.data(), arg.data(), kN, kC, kH, kW);
  cpu::maxpool2x2_backward(dy.data(), arg.data(), want_dx.data(), kN, kC, kH, kW);
  const DeviceBuffer<float> d_dy(dy);
  const DeviceBuffer<std::int32_t> d_arg(arg);
  DeviceBuffer<float> d_dx(kN * kC * kHW);  // starts as NaN: every element must be written
  cuda::maxpool2x2_backward(d_dy.get(), d_arg.get(), d_dx.get(), kN, kC, kH, kW, stream());
  // 0 + dy at the arg-max, 0 elsewhere, on both sides: exact.
  EXPECT_EQ(bit_mismatches(d_dx.to_host(), want_dx), 0u);
}

TEST_F(CudaCnnKernels, MaxPoolRejectsOddInput) {
  // As the CPU: InputError before any launch.
  EXPECT_THROW(cuda::maxpool2x2_forward(nullptr, nullptr, nullptr, 1, 1, 3, 4, stream()), InputError);
}

TEST_F(CudaCnnKernels, ReluInplaceMatchesCpuBitForBit) {
  const std::size_t n = 1001;
  auto y = random_floats(n, 41);
  y[0] = 0.0f;
  y[1] = -0.0f;  // std::max(-0, 0) keeps -0: the kernel must too
  auto want = y;
  cpu::relu_inplace(want.data(), n);
  DeviceBuffer<float> d_y(y);
  cuda::relu_inplace(d_y.get(), n, stream());
  // Pure selection, no arithmetic: exact.
  EXPECT_EQ(bit_mismatches(d_y.to_host(), want), 0u);
}

// ---- BatchNorm stages -------------------------------------------------------------------------

TEST_F(CudaCnnKernels, BatchNormStagesMatchCpuAcrossTwoRanks) {
  // x [3, 5, 60] with mean 3 and scale 2 (so E[x^2] - E[x]^2 cancels visibly); "rank 0" holds
  // samples 0-1, "rank 1" sample 2. Each computes local sums on the GPU, the caller combines
  // them on the host and copies the totals back, as SyncBatchNorm's all-gather does.
  const auto x = random_floats(kN * kC * kHW, 51, 2.0f, 3.0f);
  const auto gamma = random_floats(kC, 52, 1.0f, 1.0f);
  const auto beta = random_floats(kC, 53);
  const auto dy = random_floats(kN * kC * kHW, 54);
  const std::vector<float> running_mean0 = random_floats(kC, 55);
  std::vector<float> running_var0 = random_floats(kC, 56);
  for (float& v : running_var0) v = std::abs(v) + 0.5f;
  const double count = static_cast<double>(kN * kHW);
  const float eps = 1e-5f, momentum = 0.1f;

  // CPU, the whole batch at once.
  std::vector<double> sum(kC), sumsq(kC), sum_dy(kC), sum_dy_xmu(kC);
  std::vector<float> mean(kC), invstd(kC), rm = running_mean0, rv = running_var0;
  std::vector<float> y(x.size()), dgamma(kC), dbeta(kC), dx(x.size());
  cpu::batchnorm_local_sums(x.data(), kN, kC, kHW, sum.data(), sumsq.data());
  cpu::batchnorm_finalize_stats(sum.data(), sumsq.data(), count, kC, eps, momentum, mean.data(), invstd.data(),
                                rm.data(), rv.data());
  cpu::batchnorm_normalize(x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(), y.data(), kN, kC, kHW);
  cpu::batchnorm_backward_reduce(dy.data(), x.data(), mean.data(), invstd.data(), kN, kC, kHW, sum_dy.data(),
                                 sum_dy_xmu.data(), dgamma.data(), dbeta.data());
  cpu::batchnorm_backward_elemt(dy.data(), x.data(), mean.data(), invstd.data(), gamma.data(), sum_dy.data(),
                                sum_dy_xmu.data(), count, dx.data(), kN, kC, kHW);

  // GPU, two ranks.
  const std::size_t n0 = 2, n1 = kN - n0, off1 = n0 * kC * kHW;
  const DeviceBuffer<float> d_x(x), d_gamma(gamma), d_beta(beta), d_dy(dy);
  DeviceBuffer<double> d_sum0(kC), d_sumsq0(kC), d_sum1(kC), d_sumsq1(kC);
  DeviceBuffer<double> d_partials(cuda::reduce_partials_size(kC));
  cuda::batchnorm_local_sums(d_x.get(), n0, kC, kHW, d_sum0.get(), d_sumsq0.get(), d_partials.get(), stream());
  cuda::batchnorm_local_sums(d_x.get() + off1, n1, kC, kHW, d_sum1.get(), d_sumsq1.get(), d_partials.get(), stream());
  auto total_sum = d_sum0.to_host(), total_sumsq = d_sumsq0.to_host();
  const auto sum1 = d_sum1.to_host(), sumsq1 = d_sumsq1.to_host();
  for (std::size_t c = 0; c < kC; ++c) {
    total_sum[c] += sum1[c];
    total_sumsq[c] += sumsq1[c];
  }
  // Double sums of 180 values in another order: 1e-9 relative (see kDoubleSumTolerance).
  EXPECT_LT(rel_error(total_sum, sum), kDoubleSumTolerance) << "sum";
  EXPECT_LT(rel_error(total_sumsq, sumsq), kDoubleSumTolerance) << "sumsq";

  const DeviceBuffer<double> d_total_sum(total_sum), d_total_sumsq(total_sumsq);
  DeviceBuffer<float> d_mean(kC), d_invstd(kC), d_rm(running_mean0), d_rv(running_var0);
  cuda::batchnorm_finalize_stats(d_total_sum.get(), d_total_sumsq.get(), count, kC, eps, momentum, d_mean.get(),
                                 d_invstd.get(), d_rm.get(), d_rv.get(), stream());
  // The same double arithmetic on sums that differ by ~1e-14, rounded to float once: at most an
  // ulp apart (6e-8); 1e-5 relative.
  EXPECT_LT(rel_error(d_mean.to_host(), mean), kFp32Tolerance) << "mean";
  EXPECT_LT(rel_error(d_invstd.to_host(), invstd), kFp32Tolerance) << "invstd";
  EXPECT_LT(rel_error(d_rm.to_host(), rm), kFp32Tolerance) << "running_mean";
  EXPECT_LT(rel_error(d_rv.to_host(), rv), kFp32Tolerance) << "running_var";

  // From here on the GPU gets the CPU's statistics, so each stage is compared on its own.
  d_mean.from_host(mean);
  d_invstd.from_host(invstd);
  DeviceBuffer<float> d_y(x.size());
  cuda::batchnorm_normalize(d_x.get(), d_mean.get(), d_invstd.get(), d_gamma.get(), d_beta.get(), d_y.get(), kN, kC,
                            kHW, stream());
  // Three float operations per element in the CPU's order, no FMA: ~an ulp at most; 1e-5.
  EXPECT_LT(rel_error(d_y.to_host(), y), kFp32Tolerance) << "normalize";

  DeviceBuffer<double> d_sdy0(kC), d_sdyx0(kC), d_sdy1(kC), d_sdyx1(kC);
  DeviceBuffer<float> d_dgamma0(kC), d_dbeta0(kC), d_dgamma1(kC), d_dbeta1(kC);
  cuda::batchnorm_backward_reduce(d_dy.get(), d_x.get(), d_mean.get(), d_invstd.get(), n0, kC, kHW, d_sdy0.get(),
                                  d_sdyx0.get(), d_dgamma0.get(), d_dbeta0.get(), d_partials.get(), stream());
  cuda::batchnorm_backward_reduce(d_dy.get() + off1, d_x.get() + off1, d_mean.get(), d_invstd.get(), n1, kC, kHW,
                                  d_sdy1.get(), d_sdyx1.get(), d_dgamma1.get(), d_dbeta1.get(), d_partials.get(),
                                  stream());
  auto total_sdy = d_sdy0.to_host(), total_sdyx = d_sdyx0.to_host();
  const auto sdy1 = d_sdy1.to_host(), sdyx1 = d_sdyx1.to_host();
  const auto dgamma0 = d_dgamma0.to_host(), dgamma1 = d_dgamma1.to_host();
  const auto dbeta0 = d_dbeta0.to_host(), dbeta1 = d_dbeta1.to_host();
  std::vector<float> got_dgamma(kC), got_dbeta(kC);
  for (std::size_t c = 0; c < kC; ++c) {
    total_sdy[c] += sdy1[c];
    total_sdyx[c] += sdyx1[c];
    // dgamma / dbeta are per-rank: DDP's all-reduce of the parameter gradients sums them.
    got_dgamma[c] = dgamma0[c] + dgamma1[c];
    got_dbeta[c] = dbeta0[c] + dbeta1[c];
  }
  // Double sums of 180 products in another order: 1e-9 relative.
  EXPECT_LT(rel_error(total_sdy, sum_dy), kDoubleSumTolerance) << "sum_dy";
  EXPECT_LT(rel_error(total_sdyx, sum_dy_xmu), kDoubleSumTolerance) << "sum_dy_xmu";
  // Two float roundings (per rank, then their float sum) against one: a few ulps; 1e-5.
  EXPECT_LT(rel_error(got_dgamma, dgamma), kFp32Tolerance) << "dgamma";
  EXPECT_LT(rel_error(got_dbeta, dbeta), kFp32Tolerance) << "dbeta";

  const DeviceBuffer<double> d_total_sdy(total_sdy), d_total_sdyx(total_sdyx);
  DeviceBuffer<float> d_dx(x.size());
  cuda::batchnorm_backward_elemt(d_dy.get(), d_x.get(), d_mean.get(), d_invstd.get(), d_gamma.get(), d_total_sdy.get(),
                                 d_total_sdyx.get(), count, d_dx.get(), kN, kC, kHW, stream());
  // The CPU's float operations in its order on sums ~1e-14 apart: ~an ulp of the largest; 1e-5.
  EXPECT_LT(rel_error(d_dx.to_host(), dx), kFp32Tolerance) << "backward_elemt";
}

TEST_F(CudaCnnKernels, BatchNormRejectsZeroCount) {
  // As the CPU: InputError before any launch.
  EXPECT_THROW(cuda::batchnorm_finalize_stats(nullptr, nullptr, 0.0, 1, 1e-5f, 0.1f, nullptr, nullptr, nullptr, nullptr,
                                              stream()),
               InputError);
}

// ---- one CNN block ----------------------------------------------------------------------------

// Everything a conv -> BatchNorm -> ReLU -> max-pool block computes, forward and backward.
struct BlockResult {
  std::vector<float> pooled, running_mean, running_var, dx, dw, db, dgamma, dbeta;
  std::vector<std::int32_t> argmax;
  std::vector<float> pre_relu;  // BatchNorm's output (CPU only: to check the inputs' margins)
  std::vector<float> dconv;     // BatchNorm's input gradient (CPU only: the scale of db)
};

struct BlockInputs {
  std::vector<float> x, w, b, gamma, beta, dpooled;
};

constexpr float kBnEps = 1e-5f, kBnMomentum = 0.1f;

BlockInputs block_inputs(std::uint64_t seed) {
  const cpu::ConvShape& s = kShape;
  const std::size_t pooled = s.N * s.K * (s.P() / 2) * (s.Q() / 2);
  return {random_floats(x_size(s), seed),     random_floats(w_size(s), seed + 1, 0.3f),
          random_floats(s.K, seed + 2),       random_floats(s.K, seed + 3, 0.5f, 1.0f),
          random_floats(s.K, seed + 4, 0.5f), random_floats(pooled, seed + 5)};
}

BlockResult cpu_block(const BlockInputs& in) {
  const cpu::ConvShape& s = kShape;
  const std::size_t P = s.P(), Q = s.Q(), PQ = P * Q, ny = y_size(s);
  const std::size_t pooled = s.N * s.K * (P / 2) * (Q / 2);
  const double count = static_cast<double>(s.N * PQ);
  BlockResult r;
  std::vector<float> col(s.workspace_size()), conv(ny), act(ny), mean(s.K), invstd(s.K);
  std::vector<double> sum(s.K), sumsq(s.K), sdy(s.K), sdyx(s.K);
  r.running_mean.assign(s.K, 0.0f);
  r.running_var.assign(s.K, 1.0f);
  r.pooled.resize(pooled);
  r.argmax.resize(pooled);
  cpu::conv2d_forward(in.x.data(), in.w.data(), in.b.data(), conv.data(), s, col.data());
  cpu::batchnorm_local_sums(conv.data(), s.N, s.K, PQ, sum.data(), sumsq.data());
  cpu::batchnorm_finalize_stats(sum.data(), sumsq.data(), count, s.K, kBnEps, kBnMomentum, mean.data(), invstd.data(),
                                r.running_mean.data(), r.running_var.data());
  cpu::batchnorm_normalize(conv.data(), mean.data(), invstd.data(), in.gamma.data(), in.beta.data(), act.data(), s.N,
                           s.K, PQ);
  r.pre_relu = act;
  cpu::relu_inplace(act.data(), ny);
  cpu::maxpool2x2_forward(act.data(), r.pooled.data(), r.argmax.data(), s.N, s.K, P, Q);

  std::vector<float> dact(ny), dconv(ny);
  r.dgamma.resize(s.K);
  r.dbeta.resize(s.K);
  r.dx.resize(x_size(s));
  r.dw.resize(w_size(s));
  r.db.resize(s.K);
  cpu::maxpool2x2_backward(in.dpooled.data(), r.argmax.data(), dact.data(), s.N, s.K, P, Q);
  cpu::relu_backward_inplace(act.data(), dact.data(), ny);
  cpu::batchnorm_backward_reduce(dact.data(), conv.data(), mean.data(), invstd.data(), s.N, s.K, PQ, sdy.data(),
                                 sdyx.data(), r.dgamma.data(), r.dbeta.data());
  cpu::batchnorm_backward_elemt(dact.data(), conv.data(), mean.data(), invstd.data(), in.gamma.data(), sdy.data(),
                                sdyx.data(), count, dconv.data(), s.N, s.K, PQ);
  cpu::conv2d_backward(in.x.data(), in.w.data(), dconv.data(), r.dx.data(), r.dw.data(), r.db.data(), s, col.data());
  r.dconv = std::move(dconv);
  return r;
}

// ReLU and max-pooling select: a GPU value ~1e-6 away from the CPU's flips a selection only
// where two candidates are that close. True when every pre-ReLU value is at least `margin` from
// 0 and, in every pooling window, distinct post-ReLU values differ by at least `margin` (equal
// zeros are exact ties on both sides and resolve alike).
bool selections_are_stable(const std::vector<float>& pre_relu, float margin) {
  const std::size_t P = kShape.P(), Q = kShape.Q();
  for (float v : pre_relu) {
    if (std::abs(v) < margin) return false;
  }
  for (std::size_t nk = 0; nk < kShape.N * kShape.K; ++nk) {
    for (std::size_t i = 0; i < P / 2; ++i) {
      for (std::size_t j = 0; j < Q / 2; ++j) {
        const std::size_t base = nk * P * Q + 2 * i * Q + 2 * j;
        const std::size_t idx[4] = {base, base + 1, base + Q, base + Q + 1};
        for (int a = 0; a < 4; ++a) {
          for (int b = a + 1; b < 4; ++b) {
            const float va = std::max(pre_relu[idx[a]], 0.0f);
            const float vb = std::max(pre_relu[idx[b]], 0.0f);
            if ((va > 0.0f || vb > 0.0f) && std::abs(va - vb) < margin) return false;
          }
        }
      }
    }
  }
  return true;
}

TEST_F(CudaCnnKernels, CnnBlockForwardBackwardMatchesCpu) {
  // Pick the first seed whose selections cannot flip under fp32 noise (~1e-6 of values ~1):
  // a margin of 1e-4 is 100x that. About one seed in five fails it; 50 tries are plenty.
  constexpr float kMargin = 1e-4f;
  BlockInputs in;
  BlockResult want;
  bool found = false;
  for (std::uint64_t seed = 100; seed < 150 && !found; ++seed) {
    in = block_inputs(seed * 10);
    want = cpu_block(in);
    found = selections_are_stable(want.pre_relu, kMargin);
  }
  ASSERT_TRUE(found) << "no seed with well-separated ReLU / max-pool inputs";

  const cpu::ConvShape& s = kShape;
  const std::size_t P = s.P(), Q = s.Q(), PQ = P * Q, ny = y_size(s);
  const std::size_t pooled = s.N * s.K * (P / 2) * (Q / 2);
  const double count = static_cast<double>(s.N * PQ);
  const DeviceBuffer<float> d_x(in.x), d_w(in.w), d_b(in.b), d_gamma(in.gamma), d_beta(in.beta), d_dpooled(in.dpooled);
  DeviceBuffer<float> d_col(s.workspace_size()), d_conv(ny), d_act(ny), d_mean(s.K), d_invstd(s.K);
  DeviceBuffer<float> d_rm(std::vector<float>(s.K, 0.0f)), d_rv(std::vector<float>(s.K, 1.0f));
  DeviceBuffer<double> d_sum(s.K), d_sumsq(s.K), d_sdy(s.K), d_sdyx(s.K);
  DeviceBuffer<double> d_partials(cuda::reduce_partials_size(s.K));
  DeviceBuffer<float> d_pooled(pooled);
  DeviceBuffer<std::int32_t> d_argmax(pooled);
  DeviceBuffer<float> d_dact(ny), d_dconv(ny), d_dgamma(s.K), d_dbeta(s.K);
  DeviceBuffer<float> d_dx(x_size(s)), d_dw(w_size(s)), d_db(s.K);
  cuda::Blas blas(stream(), Precision::fp32);

  // Forward (one rank: the sums stay on the device).
  cuda::conv2d_forward(blas, d_x.get(), d_w.get(), d_b.get(), d_conv.get(), s, d_col.get(), stream());
  cuda::batchnorm_local_sums(d_conv.get(), s.N, s.K, PQ, d_sum.get(), d_sumsq.get(), d_partials.get(), stream());
  cuda::batchnorm_finalize_stats(d_sum.get(), d_sumsq.get(), count, s.K, kBnEps, kBnMomentum, d_mean.get(),
                                 d_invstd.get(), d_rm.get(), d_rv.get(), stream());
  cuda::batchnorm_normalize(d_conv.get(), d_mean.get(), d_invstd.get(), d_gamma.get(), d_beta.get(), d_act.get(), s.N,
                            s.K, PQ, stream());
  cuda::relu_inplace(d_act.get(), ny, stream());
  cuda::maxpool2x2_forward(d_act.get(), d_pooled.get(), d_argmax.get(), s.N, s.K, P, Q, stream());

  // Backward.
  cuda::maxpool2x2_backward(d_dpooled.get(), d_argmax.get(), d_dact.get(), s.N, s.K, P, Q, stream());
  cuda::relu_backward_inplace(d_act.get(), d_dact.get(), ny, stream());
  cuda::batchnorm_backward_reduce(d_dact.get(), d_conv.get(), d_mean.get(), d_invstd.get(), s.N, s.K, PQ, d_sdy.get(),
                                  d_sdyx.get(), d_dgamma.get(), d_dbeta.get(), d_partials.get(), stream());
  cuda::batchnorm_backward_elemt(d_dact.get(), d_conv.get(), d_mean.get(), d_invstd.get(), d_gamma.get(), d_sdy.get(),
                                 d_sdyx.get(), count, d_dconv.get(), s.N, s.K, PQ, stream());
  cuda::conv2d_backward(blas, d_x.get(), d_w.get(), d_dconv.get(), d_dx.get(), d_dw.get(), d_db.get(), s, d_col.get(),
                        d_partials.get(), stream());

  // Forward: the fp32 conv GEMM (~1e-6 relative) passes through BatchNorm, which rescales but
  // does not amplify relative error, and through selections the margin keeps identical; 1e-5.
  EXPECT_EQ(d_argmax.to_host(), want.argmax) << "a max-pool selection flipped";
  EXPECT_LT(rel_error(d_pooled.to_host(), want.pooled), kFp32Tolerance) << "pooled";
  EXPECT_LT(rel_error(d_rm.to_host(), want.running_mean), kFp32Tolerance) << "running_mean";
  EXPECT_LT(rel_error(d_rv.to_host(), want.running_var), kFp32Tolerance) << "running_var";
  // Backward: four stages each ~1e-6, and BatchNorm's backward subtracts nearly equal terms
  // (dy - mean_dy - xhat * k), which can turn 1e-6 of its inputs into ~1e-5 of its output;
  // 1e-4 leaves a margin and is still four orders below the O(1) error of a wrong index.
  constexpr double kChainTolerance = 1e-4;
  EXPECT_LT(rel_error(d_dgamma.to_host(), want.dgamma), kChainTolerance) << "dgamma";
  EXPECT_LT(rel_error(d_dbeta.to_host(), want.dbeta), kChainTolerance) << "dbeta";
  EXPECT_LT(rel_error(d_dw.to_host(), want.dw), kChainTolerance) << "dw";
  // db = sum of BatchNorm's input gradient over each channel, which is 0 up to rounding (it
  // subtracts its own mean): both sides are rounding noise, so compare in absolute terms, against
  // the largest channel sum of |dconv|, the scale that noise is made of.
  double dconv_scale = 0.0;
  for (std::size_t k = 0; k < s.K; ++k) {
    double abs_sum = 0.0;
    for (std::size_t n = 0; n < s.N; ++n) {
      for (std::size_t i = 0; i < PQ; ++i) abs_sum += std::abs(want.dconv[(n * s.K + k) * PQ + i]);
    }
    dconv_scale = std::max(dconv_scale, abs_sum);
  }
  const auto got_db = d_db.to_host();
  for (std::size_t k = 0; k < s.K; ++k) {
    EXPECT_LT(std::abs(static_cast<double>(got_db[k]) - want.db[k]), kChainTolerance * dconv_scale)
        << "db[" << k << "]";
  }
  EXPECT_LT(rel_error(d_dx.to_host(), want.dx), kChainTolerance) << "dx";
}

}  // namespace
}  // namespace dpbench
