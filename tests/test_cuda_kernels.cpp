// Tests of the CUDA training kernels (cuda/cuda_kernels.hpp) against their CPU counterparts
// (workloads/cpu_kernels.hpp): the same random inputs of odd sizes (no multiple of a warp or a
// tile) go through both, and each output is compared with a stated tolerance: GEMM-based
// outputs relative to their largest element, element-wise ones bit for bit. Then one two-layer
// MLP forward + backward on the GPU against the same on the CPU.
// Built with the CUDA target only; without a usable GPU every test is skipped with the reason.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"
#include "tests/cuda_test_util.hpp"
#include "core/error.hpp"
#include "workloads/cpu_kernels.hpp"
#include "cuda/cuda_kernels.hpp"

#include <cuda_runtime.h>

namespace dpbench {
namespace {

// ---------------------------------------------------------------------------------------------
// Tolerances (relative error = max |gpu - cpu| / max |cpu| over the tensor).

// fp32 GEMM: cuBLAS and OpenBLAS add the same fp32 products in different orders. Each addition
// rounds to 2^-24 (6e-8) relative, so over k <= 83 terms the two differ by ~1e-6 of the largest
// output at most; 1e-5 leaves a 10x margin and still catches any wrong index (error ~1).
constexpr double kFp32Tolerance = 1e-5;
// tf32 GEMM: both inputs are rounded to a 10-bit mantissa (2^-11..2^-10 relative each, so ~1e-3
// per product), products accumulated in fp32. Errors of random sign grow like sqrt(k) while the
// outputs grow alike, so they stay near 1e-3 of the typical output, below 5e-3 of the largest.
constexpr double kTf32Tolerance = 5e-3;

double gemm_tolerance(Precision precision) { return precision == Precision::tf32 ? kTf32Tolerance : kFp32Tolerance; }

using testing::cuda_ok;
using testing::DeviceBuffer;  // tests/cuda_test_util.hpp

// Skips without a usable CUDA device; a stream per test (tests/cuda_test_util.hpp).
class CudaKernels : public testing::CudaStreamTest {};

// ---------------------------------------------------------------------------------------------
// Host helpers

using testing::random_floats;

std::vector<std::int32_t> random_labels(std::size_t n, std::size_t classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> pick(0, static_cast<std::int32_t>(classes) - 1);
  std::vector<std::int32_t> v(n);
  for (std::int32_t& x : v) x = pick(rng);
  return v;
}

// max |got - want| / max |want|; infinity when got holds a NaN or has the wrong length.
double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
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
std::size_t bit_mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::max(got.size(), want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) ++bad;
  }
  return bad;
}

// Odd sizes: no dimension is a multiple of a warp, a GEMM tile or the column-sum tile.
constexpr std::size_t kBatch = 37;
constexpr std::size_t kIn = 83;
constexpr std::size_t kOut = 29;

// ---------------------------------------------------------------------------------------------

TEST(CudaAvailable, TrueExactlyInBuildsWithCuda) { EXPECT_TRUE(cuda::available()); }

// ---- Linear -----------------------------------------------------------------------------------

TEST_F(CudaKernels, LinearForwardMatchesCpu) {
  const auto x = random_floats(kBatch * kIn, 1);
  const auto W = random_floats(kOut * kIn, 2);
  const auto b = random_floats(kOut, 3);
  const DeviceBuffer<float> d_x(x), d_W(W), d_b(b);
  for (const Precision precision : {Precision::fp32, Precision::tf32}) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(std::string(name(precision)) + (relu ? " relu" : " no relu"));
      std::vector<float> want(kBatch * kOut);
      cpu::linear_forward(x.data(), W.data(), b.data(), want.data(), kBatch, kIn, kOut, relu);
      DeviceBuffer<float> d_y(kBatch * kOut);
      cuda::Blas blas(stream(), precision);
      cuda::linear_forward(blas, d_x.get(), d_W.get(), d_b.get(), d_y.get(), kBatch, kIn, kOut, relu, stream());
      const auto got = d_y.to_host();
      // GEMM over k = in = 83: fp32 1e-5 (summation order only), tf32 5e-3 (10-bit mantissa).
      EXPECT_LT(rel_error(got, want), gemm_tolerance(precision));
      if (relu) {
        EXPECT_EQ(*std::min_element(got.begin(), got.end()), 0.0f) << "ReLU left a negative";
      }
    }
  }
}

TEST_F(CudaKernels, LinearBackwardMatchesCpu) {
  const auto x = random_floats(kBatch * kIn, 11);
  const auto W = random_floats(kOut * kIn, 12);
  const auto dy = random_floats(kBatch * kOut, 13);
  std::vector<float> want_dx(kBatch * kIn), want_dW(kOut * kIn), want_db(kOut);
  cpu::linear_backward(x.data(), W.data(), dy.data(), want_dx.data(), want_dW.data(), want_db.data(), kBatch, kIn,
                       kOut);
  const DeviceBuffer<float> d_x(x), d_W(W), d_dy(dy);
  for (const Precision precision : {Precision::fp32, Precision::tf32}) {
    SCOPED_TRACE(std::string(name(precision)));
    DeviceBuffer<float> d_dx(kBatch * kIn), d_dW(kOut * kIn), d_db(kOut);
    cuda::Blas blas(stream(), precision);
    cuda::linear_backward(blas, d_x.get(), d_W.get(), d_dy.get(), d_dx.get(), d_dW.get(), d_db.get(), kBatch, kIn, kOut,
                          stream());
    // dx: GEMM over k = out = 29; dW: GEMM over k = batch = 37. fp32 1e-5, tf32 5e-3 (above).
    EXPECT_LT(rel_error(d_dx.to_host(), want_dx), gemm_tolerance(precision)) << "dx";
    EXPECT_LT(rel_error(d_dW.to_host(), want_dW), gemm_tolerance(precision)) << "dW";
    // db is our fp32 column-sum kernel in either precision: 37 additions in another order,
    // ~1e-7 relative, so 1e-5 holds for tf32 too.
    EXPECT_LT(rel_error(d_db.to_host(), want_db), kFp32Tolerance) << "db";

    // Without dx (the first layer's case): the same weight gradients.
    DeviceBuffer<float> d_dW2(kOut * kIn), d_db2(kOut);
    cuda::linear_backward(blas, d_x.get(), d_W.get(), d_dy.get(), nullptr, d_dW2.get(), d_db2.get(), kBatch, kIn, kOut,
                          stream());
    EXPECT_EQ(bit_mismatches(d_dW2.to_host(), d_dW.to_host()), 0u) << "same GEMM, same handle: cuBLAS is deterministic";
    EXPECT_EQ(bit_mismatches(d_db2.to_host(), d_db.to_host()), 0u) << "the column sum adds in a fixed order";
  }
}

TEST_F(CudaKernels, LinearBackwardOfEmptyBatchZeroesGradients) {
  // Buffers start as NaN; batch 0 must overwrite dW and db with zeros, as the CPU does.
  const DeviceBuffer<float> d_x(1), d_W(kOut * kIn), d_dy(1);
  DeviceBuffer<float> d_dW(kOut * kIn), d_db(kOut);
  cuda::Blas blas(stream(), Precision::fp32);
  cuda::linear_backward(blas, d_x.get(), d_W.get(), d_dy.get(), nullptr, d_dW.get(), d_db.get(), 0, kIn, kOut,
                        stream());
  EXPECT_EQ(bit_mismatches(d_dW.to_host(), std::vector<float>(kOut * kIn, 0.0f)), 0u);
  EXPECT_EQ(bit_mismatches(d_db.to_host(), std::vector<float>(kOut, 0.0f)), 0u);
}

TEST_F(CudaKernels, LinearRebindsTheHandleToTheLaunchersStream) {
  // The handle is created on the default stream and the launcher is given the test's stream:
  // the handle is rebound, so the GEMM runs on the stream of the bias kernel that reads it.
  const auto x = random_floats(kBatch * kIn, 21);
  const auto W = random_floats(kOut * kIn, 22);
  const auto b = random_floats(kOut, 23);
  std::vector<float> want(kBatch * kOut);
  cpu::linear_forward(x.data(), W.data(), b.data(), want.data(), kBatch, kIn, kOut, false);
  const DeviceBuffer<float> d_x(x), d_W(W), d_b(b);
  DeviceBuffer<float> d_y(kBatch * kOut);
  cuda::Blas blas(nullptr, Precision::fp32);
  cuda::linear_forward(blas, d_x.get(), d_W.get(), d_b.get(), d_y.get(), kBatch, kIn, kOut, false, stream());
  EXPECT_EQ(blas.stream(), stream());
  // The handle itself, not only the launcher's record of it, is on the test's stream.
  EXPECT_EQ(blas.bound_stream(), stream());
  // fp32 GEMM over k = 83: 1e-5 (summation order only).
  EXPECT_LT(rel_error(d_y.to_host(), want), kFp32Tolerance);
}

// ---- element-wise -----------------------------------------------------------------------------

TEST_F(CudaKernels, ReluBackwardMatchesCpuBitForBit) {
  const std::size_t n = kBatch * kOut;
  auto y = random_floats(n, 31);
  for (std::size_t i = 0; i < n; i += 7) y[i] = 0.0f;  // exact zeros: ReLU's clamped outputs
  const auto dy = random_floats(n, 32);
  auto want = dy;
  cpu::relu_backward_inplace(y.data(), want.data(), n);
  const DeviceBuffer<float> d_y(y);
  DeviceBuffer<float> d_dy(dy);
  cuda::relu_backward_inplace(d_y.get(), d_dy.get(), n, stream());
  // Pure selection, no arithmetic: exact.
  EXPECT_EQ(bit_mismatches(d_dy.to_host(), want), 0u);
}

TEST_F(CudaKernels, SgdMomentumMatchesCpuBitForBit) {
  const std::size_t n = 1001;
  auto params = random_floats(n, 41);
  std::vector<float> velocity(n, 0.0f);
  const DeviceBuffer<float> d_params(params), d_velocity(velocity);
  for (std::uint64_t step = 0; step < 3; ++step) {
    const auto grads = random_floats(n, 42 + step);
    cpu::sgd_momentum(params.data(), grads.data(), velocity.data(), n, 0.05f, 0.9f, 5e-4f);
    const DeviceBuffer<float> d_grads(grads);
    cuda::sgd_momentum(d_params.get(), d_grads.get(), d_velocity.get(), n, 0.05f, 0.9f, 5e-4f, stream());
    // Each product and sum rounds separately on both sides (the kernel uses __fmul_rn /
    // __fadd_rn, so nvcc fuses nothing into an FMA; the library's C++ is built with
    // -ffp-contract=off, so g++ fuses nothing either, whatever -march allows): the same IEEE
    // operations in the same order, so exact.
    EXPECT_EQ(bit_mismatches(d_velocity.to_host(), velocity), 0u) << "velocity, step " << step;
    EXPECT_EQ(bit_mismatches(d_params.to_host(), params), 0u) << "params, step " << step;
  }
}

TEST_F(CudaKernels, AdamAndAdamWMatchCpuBitForBit) {
  const std::size_t n = 1001;
  for (const bool decoupled : {false, true}) {
    auto params = random_floats(n, 43);
    std::vector<float> exp_avg(n, 0.0f), exp_avg_sq(n, 0.0f);
    const DeviceBuffer<float> d_params(params), d_exp_avg(exp_avg), d_exp_avg_sq(exp_avg_sq);
    for (long t = 1; t <= 3; ++t) {
      const auto grads = random_floats(n, 44 + static_cast<std::uint64_t>(t));
      const cpu::AdamScalars s = cpu::adam_scalars(1e-3, 0.9, 0.999, 1e-8, 0.01, t, decoupled);
      cpu::adam(params.data(), grads.data(), exp_avg.data(), exp_avg_sq.data(), n, s);
      const DeviceBuffer<float> d_grads(grads);
      cuda::adam(d_params.get(), d_grads.get(), d_exp_avg.get(), d_exp_avg_sq.get(), n, s, stream());
      // Separately rounded products and sums, IEEE square root and division on both sides: exact.
      EXPECT_EQ(bit_mismatches(d_exp_avg.to_host(), exp_avg), 0u) << "exp_avg, step " << t << " " << decoupled;
      EXPECT_EQ(bit_mismatches(d_exp_avg_sq.to_host(), exp_avg_sq), 0u) << "exp_avg_sq, step " << t;
      EXPECT_EQ(bit_mismatches(d_params.to_host(), params), 0u) << "params, step " << t << " " << decoupled;
    }
  }
}

TEST_F(CudaKernels, AddInplaceMatchesCpuBitForBit) {
  const std::size_t n = 1001;
  auto y = random_floats(n, 51);
  const auto x = random_floats(n, 52);
  const DeviceBuffer<float> d_y(y), d_x(x);
  cpu::add_inplace(y.data(), x.data(), n);
  cuda::add_inplace(d_y.get(), d_x.get(), n, stream());
  // One IEEE addition per element: exact.
  EXPECT_EQ(bit_mismatches(d_y.to_host(), y), 0u);
}

TEST_F(CudaKernels, ScaleInplaceMultipliesEveryElement) {
  const std::size_t n = 1001;
  auto y = random_floats(n, 61);
  const DeviceBuffer<float> d_y(y);
  const float alpha = 1.0f / 3.0f;
  for (float& v : y) v *= alpha;
  cuda::scale_inplace(d_y.get(), alpha, n, stream());
  // One IEEE multiplication per element: exact.
  EXPECT_EQ(bit_mismatches(d_y.to_host(), y), 0u);
}

// ---- softmax cross-entropy --------------------------------------------------------------------

TEST_F(CudaKernels, SoftmaxCrossEntropyMatchesCpu) {
  // 10 classes (a fraction of a warp), 33 (one past a warp), 1000 (31+ columns per lane).
  for (const std::size_t classes : {std::size_t{10}, std::size_t{33}, std::size_t{1000}}) {
    SCOPED_TRACE("classes " + std::to_string(classes));
    const auto logits = random_floats(kBatch * classes, 71 + classes, 3.0f);
    const auto labels = random_labels(kBatch, classes, 72 + classes);
    const float grad_scale = 1.0f / static_cast<float>(kBatch);
    std::vector<float> want_d(kBatch * classes);
    const double want_loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), kBatch, classes, want_d.data(),
                                                        grad_scale);
    const DeviceBuffer<float> d_logits(logits);
    const DeviceBuffer<std::int32_t> d_labels(labels);
    DeviceBuffer<float> d_d(kBatch * classes);
    const DeviceBuffer<float> d_loss(std::vector<float>{0.0f});
    cuda::softmax_cross_entropy(d_logits.get(), d_labels.get(), kBatch, classes, d_d.get(), grad_scale, d_loss.get(),
                                stream());
    const double got_loss = d_loss.to_host()[0];
    // Per-row losses in double as on the CPU; the sum of 37 rows is added into one float
    // (2^-24 relative per addition, a few blocks' atomicAdds): 1e-5 relative.
    EXPECT_NEAR(got_loss, want_loss, 1e-5 * want_loss);
    // The kernel follows the CPU's arithmetic in double and rounds to float once: the two differ
    // by at most an ulp or so of the largest gradient (~1e-7 of it); 1e-6 relative.
    EXPECT_LT(rel_error(d_d.to_host(), want_d), 1e-6);

    // Loss only (dlogits == nullptr), added to what *loss_sum already holds.
    const DeviceBuffer<float> d_loss2(std::vector<float>{2.5f});
    cuda::softmax_cross_entropy(d_logits.get(), d_labels.get(), kBatch, classes, nullptr, grad_scale, d_loss2.get(),
                                stream());
    // As above: 1e-5 relative for a float accumulation of 37 double losses.
    EXPECT_NEAR(d_loss2.to_host()[0], 2.5 + want_loss, 1e-5 * (2.5 + want_loss));
  }
}

TEST_F(CudaKernels, SoftmaxCrossEntropyIsStableForLargeLogits) {
  // Logits around 1000: exp(1000) overflows even a double, so only a max-subtracted softmax
  // gives a finite loss.
  const std::size_t classes = 10;
  auto logits = random_floats(kBatch * classes, 81, 5.0f);
  for (float& z : logits) z += 1000.0f;
  const auto labels = random_labels(kBatch, classes, 82);
  std::vector<float> want_d(kBatch * classes);
  const double want_loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), kBatch, classes, want_d.data(),
                                                      1.0f);
  const DeviceBuffer<float> d_logits(logits);
  const DeviceBuffer<std::int32_t> d_labels(labels);
  DeviceBuffer<float> d_d(kBatch * classes);
  const DeviceBuffer<float> d_loss(std::vector<float>{0.0f});
  cuda::softmax_cross_entropy(d_logits.get(), d_labels.get(), kBatch, classes, d_d.get(), 1.0f, d_loss.get(), stream());
  const double got_loss = d_loss.to_host()[0];
  ASSERT_TRUE(std::isfinite(got_loss));
  // Same reasons as in SoftmaxCrossEntropyMatchesCpu: 1e-5 for the float sum, 1e-6 for dlogits.
  EXPECT_NEAR(got_loss, want_loss, 1e-5 * want_loss);
  EXPECT_LT(rel_error(d_d.to_host(), want_d), 1e-6);
}

TEST_F(CudaKernels, SoftmaxCrossEntropyMakesABadLabelNaN) {
  // The CPU throws on a label outside [0, classes); a kernel cannot, so it poisons the loss and
  // that row's gradient, and leaves the other rows right.
  const std::size_t batch = 3, classes = 10;
  const auto logits = random_floats(batch * classes, 91);
  const std::vector<std::int32_t> labels = {4, 10, 0};  // row 1: one past the last class
  const DeviceBuffer<float> d_logits(logits);
  const DeviceBuffer<std::int32_t> d_labels(labels);
  DeviceBuffer<float> d_d(batch * classes);
  const DeviceBuffer<float> d_loss(std::vector<float>{0.0f});
  cuda::softmax_cross_entropy(d_logits.get(), d_labels.get(), batch, classes, d_d.get(), 1.0f, d_loss.get(), stream());
  EXPECT_TRUE(std::isnan(d_loss.to_host()[0]));
  const auto d = d_d.to_host();
  for (std::size_t c = 0; c < classes; ++c) {
    EXPECT_FALSE(std::isnan(d[c])) << "row 0, class " << c;
    EXPECT_TRUE(std::isnan(d[classes + c])) << "row 1, class " << c;
    EXPECT_FALSE(std::isnan(d[2 * classes + c])) << "row 2, class " << c;
  }
}

// ---- count_correct ----------------------------------------------------------------------------

TEST_F(CudaKernels, CountCorrectMatchesCpu) {
  for (const std::size_t classes : {std::size_t{10}, std::size_t{100}}) {
    SCOPED_TRACE("classes " + std::to_string(classes));
    const auto logits = random_floats(kBatch * classes, 101 + classes);
    // Even rows labelled with their arg-max (correct), odd rows with the next class (wrong).
    std::vector<std::int32_t> labels(kBatch);
    for (std::size_t r = 0; r < kBatch; ++r) {
      const float* z = logits.data() + r * classes;
      const auto argmax = static_cast<std::size_t>(std::max_element(z, z + classes) - z);
      labels[r] = static_cast<std::int32_t>(r % 2 == 0 ? argmax : (argmax + 1) % classes);
    }
    const std::size_t want = cpu::count_correct(logits.data(), labels.data(), kBatch, classes);
    ASSERT_EQ(want, (kBatch + 1) / 2);
    const DeviceBuffer<float> d_logits(logits);
    const DeviceBuffer<std::int32_t> d_labels(labels);
    const DeviceBuffer<int> d_correct(std::vector<int>{5});  // the kernel adds to it
    cuda::count_correct(d_logits.get(), d_labels.get(), kBatch, classes, d_correct.get(), stream());
    // An integer count: exact.
    EXPECT_EQ(d_correct.to_host()[0], 5 + static_cast<int>(want));
  }
}

TEST_F(CudaKernels, CountCorrectBreaksTiesTowardsTheLowestIndex) {
  // 64 classes: lane l of the warp sees columns l and l + 32.
  const std::size_t classes = 64;
  std::vector<float> logits(4 * classes, 0.0f);
  // Row 0: all equal -> arg-max 0; label 0 (correct).
  // Row 1: maxima at 5 and 40 (different lanes) -> 5; label 5 (correct).
  logits[1 * classes + 5] = 2.0f;
  logits[1 * classes + 40] = 2.0f;
  // Row 2: maxima at 3 and 35 (the same lane) -> 3; label 35 (wrong).
  logits[2 * classes + 3] = 2.0f;
  logits[2 * classes + 35] = 2.0f;
  // Row 3: maxima at 9 and 6 -> 6; label 9 (wrong).
  logits[3 * classes + 9] = 1.0f;
  logits[3 * classes + 6] = 1.0f;
  const std::vector<std::int32_t> labels = {0, 5, 35, 9};
  ASSERT_EQ(cpu::count_correct(logits.data(), labels.data(), 4, classes), 2u);
  const DeviceBuffer<float> d_logits(logits);
  const DeviceBuffer<std::int32_t> d_labels(labels);
  const DeviceBuffer<int> d_correct(std::vector<int>{0});
  cuda::count_correct(d_logits.get(), d_labels.get(), 4, classes, d_correct.get(), stream());
  // An integer count: exact.
  EXPECT_EQ(d_correct.to_host()[0], 2);
}

// ---- a whole MLP step -------------------------------------------------------------------------

TEST_F(CudaKernels, MlpForwardBackwardMatchesCpu) {
  // Linear(83, 29) -> ReLU -> Linear(29, 10) -> softmax cross-entropy (mean over the batch),
  // then the backward pass, as workloads/mlp.cpp chains the CPU kernels.
  constexpr std::size_t in = kIn, hidden = kOut, classes = 10, batch = kBatch;
  const auto x = random_floats(batch * in, 111);
  const auto W1 = random_floats(hidden * in, 112, 1.0f / std::sqrt(static_cast<float>(in)));
  const auto b1 = random_floats(hidden, 113, 0.1f);
  const auto W2 = random_floats(classes * hidden, 114, 1.0f / std::sqrt(static_cast<float>(hidden)));
  const auto b2 = random_floats(classes, 115, 0.1f);
  const auto labels = random_labels(batch, classes, 116);
  const float grad_scale = 1.0f / static_cast<float>(batch);

  // CPU reference.
  std::vector<float> z1(batch * hidden), h(batch * hidden), logits(batch * classes);
  std::vector<float> dlogits(batch * classes), dh(batch * hidden);
  std::vector<float> dW1(hidden * in), db1(hidden), dW2(classes * hidden), db2(classes);
  cpu::linear_forward(x.data(), W1.data(), b1.data(), z1.data(), batch, in, hidden, false);
  cpu::linear_forward(x.data(), W1.data(), b1.data(), h.data(), batch, in, hidden, true);
  cpu::linear_forward(h.data(), W2.data(), b2.data(), logits.data(), batch, hidden, classes, false);
  const double loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), batch, classes, dlogits.data(),
                                                 grad_scale);
  cpu::linear_backward(h.data(), W2.data(), dlogits.data(), dh.data(), dW2.data(), db2.data(), batch, hidden, classes);
  cpu::relu_backward_inplace(h.data(), dh.data(), batch * hidden);
  cpu::linear_backward<float>(x.data(), W1.data(), dh.data(), nullptr, dW1.data(), db1.data(), batch, in, hidden);

  // Precondition on the inputs, not the code: no pre-activation so close to 0 that fp32
  // rounding differences (~1e-7 of the largest) could flip its ReLU mask and change a whole
  // term of dW1. Another seed if this ever fails.
  double z_max = 0.0, z_min = std::numeric_limits<double>::infinity();
  for (const float z : z1) {
    z_max = std::max(z_max, std::abs(static_cast<double>(z)));
    z_min = std::min(z_min, std::abs(static_cast<double>(z)));
  }
  ASSERT_GT(z_min, 1e-5 * z_max) << "a pre-activation sits on the ReLU's kink";

  // GPU.
  const DeviceBuffer<float> d_x(x), d_W1(W1), d_b1(b1), d_W2(W2), d_b2(b2);
  const DeviceBuffer<std::int32_t> d_labels(labels);
  DeviceBuffer<float> d_h(batch * hidden), d_logits(batch * classes), d_dlogits(batch * classes);
  DeviceBuffer<float> d_dh(batch * hidden), d_dW1(hidden * in), d_db1(hidden);
  DeviceBuffer<float> d_dW2(classes * hidden), d_db2(classes);
  const DeviceBuffer<float> d_loss(std::vector<float>{0.0f});
  cuda::Blas blas(stream(), Precision::fp32);
  cuda::linear_forward(blas, d_x.get(), d_W1.get(), d_b1.get(), d_h.get(), batch, in, hidden, true, stream());
  cuda::linear_forward(blas, d_h.get(), d_W2.get(), d_b2.get(), d_logits.get(), batch, hidden, classes, false,
                       stream());
  cuda::softmax_cross_entropy(d_logits.get(), d_labels.get(), batch, classes, d_dlogits.get(), grad_scale, d_loss.get(),
                              stream());
  cuda::linear_backward(blas, d_h.get(), d_W2.get(), d_dlogits.get(), d_dh.get(), d_dW2.get(), d_db2.get(), batch,
                        hidden, classes, stream());
  cuda::relu_backward_inplace(d_h.get(), d_dh.get(), batch * hidden, stream());
  cuda::linear_backward(blas, d_x.get(), d_W1.get(), d_dh.get(), nullptr, d_dW1.get(), d_db1.get(), batch, in, hidden,
                        stream());

  // fp32 throughout: each stage adds ~1e-7 relative (summation order) to what it was given, and
  // four chained stages stay near 1e-6; 1e-5 for every tensor and the loss.
  EXPECT_LT(rel_error(d_h.to_host(), h), kFp32Tolerance) << "h";
  EXPECT_LT(rel_error(d_logits.to_host(), logits), kFp32Tolerance) << "logits";
  EXPECT_NEAR(d_loss.to_host()[0], loss, kFp32Tolerance * loss) << "loss";
  EXPECT_LT(rel_error(d_dlogits.to_host(), dlogits), kFp32Tolerance) << "dlogits";
  EXPECT_LT(rel_error(d_dW2.to_host(), dW2), kFp32Tolerance) << "dW2";
  EXPECT_LT(rel_error(d_db2.to_host(), db2), kFp32Tolerance) << "db2";
  EXPECT_LT(rel_error(d_dh.to_host(), dh), kFp32Tolerance) << "dh";
  EXPECT_LT(rel_error(d_dW1.to_host(), dW1), kFp32Tolerance) << "dW1";
  EXPECT_LT(rel_error(d_db1.to_host(), db1), kFp32Tolerance) << "db1";
}

}  // namespace
}  // namespace dpbench
