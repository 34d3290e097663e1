// Tests of the CNN CPU kernels (workloads/cnn_kernels.hpp): convolution against a direct loop
// reference and against the per-sample result, every gradient against central finite
// differences in double, chunked batches against one chunk, the element-wise index math of
// workloads/conv_layout.hpp (what the CUDA kernels run) against the CPU's kernels, max-pooling
// ties, and the SyncBatchNorm stages: sums split over two "ranks" and combined must give the full
// batch's outputs and gradients. Float versions are checked against double ones.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "workloads/cnn_kernels.hpp"

namespace dpbench {
namespace {

using cpu::ConvShape;

std::vector<double> random_vector(std::size_t n, std::uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> v(n);
  for (double& x : v) x = normal(rng);
  return v;
}

template <typename T>
std::vector<T> cast(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

// max |a - b| / max |b|: the relative error of a against reference b.
template <typename A>
double rel_error(const std::vector<A>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double err = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  const double scale = max_abs(b);
  return scale > 0 ? err / scale : err;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite differences of loss() with respect to every element of v (restored after).
std::vector<double> numeric_grad(std::vector<double>& v, const std::function<double()>& loss, double eps = 1e-6) {
  std::vector<double> g(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double keep = v[i];
    v[i] = keep + eps;
    const double up = loss();
    v[i] = keep - eps;
    const double down = loss();
    v[i] = keep;
    g[i] = (up - down) / (2 * eps);
  }
  return g;
}

// ---- convolution ------------------------------------------------------------------------------

// y[n,k,p,q] = b[k] + sum_{c,r,s} w[k,c,r,s] * x[n,c,p+r-pad,q+s-pad] (zero outside the input).
std::vector<double> reference_conv(const std::vector<double>& x, const std::vector<double>& w, const double* b,
                                   const ConvShape& s) {
  const std::size_t P = s.P(), Q = s.Q();
  std::vector<double> y(s.N * s.K * P * Q);
  for (std::size_t n = 0; n < s.N; ++n)
    for (std::size_t k = 0; k < s.K; ++k)
      for (std::size_t p = 0; p < P; ++p)
        for (std::size_t q = 0; q < Q; ++q) {
          double acc = b != nullptr ? b[k] : 0.0;
          for (std::size_t c = 0; c < s.C; ++c)
            for (std::size_t r = 0; r < s.R; ++r)
              for (std::size_t t = 0; t < s.S; ++t) {
                const long h = static_cast<long>(p + r) - static_cast<long>(s.pad);
                const long ww = static_cast<long>(q + t) - static_cast<long>(s.pad);
                if (h < 0 || ww < 0 || h >= static_cast<long>(s.H) || ww >= static_cast<long>(s.W)) {
                  continue;
                }
                acc += w[((k * s.C + c) * s.R + r) * s.S + t] *
                       x[((n * s.C + c) * s.H + static_cast<std::size_t>(h)) * s.W + static_cast<std::size_t>(ww)];
              }
          y[((n * s.K + k) * P + p) * Q + q] = acc;
        }
  return y;
}

struct ConvProblem {
  ConvShape s;
  std::vector<double> x, w, b, col;
  explicit ConvProblem(const ConvShape& shape, std::uint64_t seed = 1)
      : s(shape),
        x(random_vector(s.N * s.C * s.H * s.W, seed)),
        w(random_vector(s.K * s.C * s.R * s.S, seed + 1, 0.5)),
        b(random_vector(s.K, seed + 2)),
        col(s.workspace_size()) {}
  std::size_t y_size() const { return s.N * s.K * s.P() * s.Q(); }
  std::vector<double> forward(bool with_bias) {
    std::vector<double> y(y_size(), -99.0);
    cpu::conv2d_forward(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), s, col.data());
    return y;
  }
};

void expect_conv_matches_reference(const ConvShape& shape) {
  ConvProblem pr(shape);
  for (bool with_bias : {false, true}) {
    const std::vector<double> y = pr.forward(with_bias);
    const std::vector<double> ref = reference_conv(pr.x, pr.w, with_bias ? pr.b.data() : nullptr, pr.s);
    EXPECT_GT(max_abs(ref), 0.1);
    EXPECT_LT(rel_error(y, ref), 1e-13) << "bias " << with_bias;
  }
}

TEST(Conv2dForward, MatchesDirectConvolutionWithPadding1) {
  expect_conv_matches_reference({.N = 2, .C = 3, .H = 5, .W = 6, .K = 4, .R = 3, .S = 3, .pad = 1});
}

TEST(Conv2dForward, MatchesDirectConvolutionWithoutPadding) {
  const ConvShape s{.N = 2, .C = 3, .H = 5, .W = 6, .K = 4, .R = 3, .S = 3, .pad = 0};
  ASSERT_EQ(s.P(), 3u);
  ASSERT_EQ(s.Q(), 4u);
  expect_conv_matches_reference(s);
}

TEST(Conv2dForward, MatchesDirectConvolutionWhenKernelOverhangsPaddedEdge) {
  // S = 5 > W + pad: some kernel columns never touch the input; non-square kernel too.
  expect_conv_matches_reference({.N = 1, .C = 2, .H = 3, .W = 1, .K = 3, .R = 3, .S = 5, .pad = 2});
}

// Gradients of L = sum(y * G) from conv2d_backward against central finite differences.
void expect_conv_gradients_match(const ConvShape& shape) {
  ConvProblem pr(shape, 11);
  const std::vector<double> G = random_vector(pr.y_size(), 99);
  auto loss = [&] { return dot(pr.forward(true), G); };

  std::vector<double> dx(pr.x.size(), 7.0), dw(pr.w.size(), 7.0), db(pr.b.size(), 7.0);
  cpu::conv2d_backward(pr.x.data(), pr.w.data(), G.data(), dx.data(), dw.data(), db.data(), pr.s, pr.col.data());

  const std::vector<double> ndx = numeric_grad(pr.x, loss);
  const std::vector<double> ndw = numeric_grad(pr.w, loss);
  const std::vector<double> ndb = numeric_grad(pr.b, loss);
  EXPECT_GT(max_abs(ndx), 0.1);
  EXPECT_GT(max_abs(ndw), 0.1);
  EXPECT_GT(max_abs(ndb), 0.1);
  EXPECT_LT(rel_error(dx, ndx), 1e-6);
  EXPECT_LT(rel_error(dw, ndw), 1e-6);
  EXPECT_LT(rel_error(db, ndb), 1e-6);
}

TEST(Conv2dBackward, MatchesFiniteDifferencesWithPadding1) {
  expect_conv_gradients_match({.N = 2, .C = 3, .H = 5, .W = 6, .K = 4, .R = 3, .S = 3, .pad = 1});
}

TEST(Conv2dBackward, MatchesFiniteDifferencesWhenKernelOverhangsPaddedEdge) {
  expect_conv_gradients_match({.N = 2, .C = 2, .H = 3, .W = 1, .K = 2, .R = 3, .S = 5, .pad = 2});
}

TEST(Conv2dBackward, NullDxAndDbGiveTheSameWeightGradient) {
  ConvProblem pr({.N = 3, .C = 2, .H = 4, .W = 5, .K = 3, .R = 3, .S = 3, .pad = 1}, 5);
  const std::vector<double> G = random_vector(pr.y_size(), 6);
  std::vector<double> dx(pr.x.size()), dw(pr.w.size()), db(pr.b.size());
  cpu::conv2d_backward(pr.x.data(), pr.w.data(), G.data(), dx.data(), dw.data(), db.data(), pr.s, pr.col.data());
  std::vector<double> dw_only(pr.w.size(), 3.0);  // stale values must be overwritten
  cpu::conv2d_backward(pr.x.data(), pr.w.data(), G.data(), static_cast<double*>(nullptr), dw_only.data(),
                       static_cast<double*>(nullptr), pr.s, pr.col.data());
  EXPECT_GT(max_abs(dw), 0.1);
  EXPECT_EQ(dw_only, dw);
}

TEST(Conv2dForward, FloatAgreesWithDouble) {
  ConvProblem pr({.N = 2, .C = 4, .H = 6, .W = 7, .K = 5, .R = 3, .S = 3, .pad = 1}, 21);
  const std::vector<double> G = random_vector(pr.y_size(), 22);
  const std::vector<double> y = pr.forward(true);
  std::vector<double> dx(pr.x.size()), dw(pr.w.size()), db(pr.b.size());
  cpu::conv2d_backward(pr.x.data(), pr.w.data(), G.data(), dx.data(), dw.data(), db.data(), pr.s, pr.col.data());

  const auto xf = cast<float>(pr.x), wf = cast<float>(pr.w), bf = cast<float>(pr.b), Gf = cast<float>(G);
  std::vector<float> yf(y.size()), dxf(dx.size()), dwf(dw.size()), dbf(db.size()), colf(pr.s.workspace_size());
  cpu::conv2d_forward(xf.data(), wf.data(), bf.data(), yf.data(), pr.s, colf.data());
  cpu::conv2d_backward(xf.data(), wf.data(), Gf.data(), dxf.data(), dwf.data(), dbf.data(), pr.s, colf.data());
  EXPECT_LT(rel_error(yf, y), 1e-5);
  EXPECT_LT(rel_error(dxf, dx), 1e-5);
  EXPECT_LT(rel_error(dwf, dw), 1e-5);
  EXPECT_LT(rel_error(dbf, db), 1e-5);
}

// ---- the batched layout (workloads/conv_layout.hpp) --------------------------------------------

// Odd sizes throughout: C=3, K=5, H=W=6, N=7 (no dimension a multiple of another).
constexpr ConvShape kOdd{.N = 7, .C = 3, .H = 6, .W = 6, .K = 5, .R = 3, .S = 3, .pad = 1};

// The convolution one sample at a time, as before batching: conv2d_forward / conv2d_backward on
// each sample alone (N = 1), dw summed over the samples.
struct PerSample {
  std::vector<double> y, dx, dw;
};
PerSample per_sample(const ConvProblem& pr, const std::vector<double>& G) {
  ConvShape one = pr.s;
  one.N = 1;
  const std::size_t chw = one.C * one.H * one.W, kpq = one.K * one.P() * one.Q();
  std::vector<double> col(one.workspace_size()), dw_n(pr.w.size());
  PerSample r{std::vector<double>(pr.s.N * kpq), std::vector<double>(pr.x.size()),
              std::vector<double>(pr.w.size(), 0.0)};
  for (std::size_t n = 0; n < pr.s.N; ++n) {
    cpu::conv2d_forward(pr.x.data() + n * chw, pr.w.data(), pr.b.data(), r.y.data() + n * kpq, one, col.data());
    cpu::conv2d_backward(pr.x.data() + n * chw, pr.w.data(), G.data() + n * kpq, r.dx.data() + n * chw, dw_n.data(),
                         static_cast<double*>(nullptr), one, col.data());
    for (std::size_t i = 0; i < dw_n.size(); ++i) r.dw[i] += dw_n[i];
  }
  return r;
}

TEST(BatchedConv, ForwardAndBackwardEqualThePerSampleResult) {
  ConvProblem pr(kOdd, 31);
  ASSERT_EQ(pr.s.chunk(), 7u);  // the whole batch in one GEMM
  const std::vector<double> G = random_vector(pr.y_size(), 32);
  const PerSample want = per_sample(pr, G);
  const std::vector<double> y = pr.forward(true);
  std::vector<double> dx(pr.x.size(), 7.0), dw(pr.w.size(), 7.0), db(pr.b.size(), 7.0);
  cpu::conv2d_backward(pr.x.data(), pr.w.data(), G.data(), dx.data(), dw.data(), db.data(), pr.s, pr.col.data());
  // Double GEMMs over the same products in another grouping: ~1e-16 relative; a sample or channel
  // out of place is an O(1) error.
  EXPECT_GT(max_abs(want.y), 0.1);
  EXPECT_LT(rel_error(y, want.y), 1e-13);
  EXPECT_LT(rel_error(dx, want.dx), 1e-13);
  EXPECT_LT(rel_error(dw, want.dw), 1e-13);
  EXPECT_LT(rel_error(y, reference_conv(pr.x, pr.w, pr.b.data(), pr.s)), 1e-13);
}

TEST(BatchedConv, GradientsAtOddSizesMatchFiniteDifferences) { expect_conv_gradients_match(kOdd); }

TEST(BatchedConv, ChunksGiveTheResultOfOneChunk) {
  ConvProblem whole(kOdd, 41);
  ConvShape chunked = kOdd;
  // Room for two samples' workspace and a bit: chunks of 2, 2, 2 and 1 samples.
  chunked.workspace_cap = 2 * chunked.workspace_per_sample() + 5;
  ASSERT_EQ(chunked.chunk(), 2u);
  ASSERT_EQ(chunked.workspace_size(), 2 * chunked.workspace_per_sample());
  ConvProblem parts(chunked, 41);
  const std::vector<double> G = random_vector(whole.y_size(), 42);

  EXPECT_LT(rel_error(parts.forward(true), whole.forward(true)), 1e-13);
  std::vector<double> dx(whole.x.size()), dw(whole.w.size()), db(whole.b.size());
  cpu::conv2d_backward(whole.x.data(), whole.w.data(), G.data(), dx.data(), dw.data(), db.data(), whole.s,
                       whole.col.data());
  std::vector<double> pdx(dx.size(), 7.0), pdw(dw.size(), 7.0), pdb(db.size(), 7.0);
  cpu::conv2d_backward(parts.x.data(), parts.w.data(), G.data(), pdx.data(), pdw.data(), pdb.data(), parts.s,
                       parts.col.data());
  EXPECT_GT(max_abs(dw), 0.1);
  EXPECT_LT(rel_error(pdx, dx), 1e-13);
  EXPECT_LT(rel_error(pdw, dw), 1e-13);  // accumulated over four chunks
  EXPECT_EQ(pdb, db);
}

TEST(BatchedConv, ChunkKeepsTheWorkspaceUnderTheCap) {
  // The default CNN's second conv: 16 -> 32 channels on 14x14, 196 * (144 + 32) = 34496 elements
  // per sample; the 16 Mi cap holds 486 samples.
  ConvShape s{.N = 256, .C = 16, .H = 14, .W = 14, .K = 32, .R = 3, .S = 3, .pad = 1};
  EXPECT_EQ(s.workspace_per_sample(), 34496u);
  EXPECT_EQ(s.chunk(), 256u);
  s.N = 1000;
  EXPECT_EQ(s.chunk(), 486u);
  EXPECT_LE(s.workspace_size(), conv::kWorkspaceCap);
  // A sample that alone exceeds the cap still runs, one per chunk; no samples, no chunk.
  s.workspace_cap = 1000;
  EXPECT_EQ(s.chunk(), 1u);
  s.N = 0;
  EXPECT_EQ(s.workspace_size(), 0u);
}

// The element-wise index math the CUDA kernels run (conv::im2col_source, col2im_gather,
// nchw_of_out), evaluated on the host, against the CPU's row-copying kernels: equal bit for bit.
TEST(ConvLayout, ElementwiseIndexMathEqualsTheCpuKernels) {
  for (const ConvShape& s : {kOdd, ConvShape{.N = 3, .C = 2, .H = 3, .W = 1, .K = 2, .R = 3, .S = 5, .pad = 2},
                             ConvShape{.N = 2, .C = 3, .H = 5, .W = 6, .K = 4, .R = 3, .S = 3, .pad = 0}}) {
    SCOPED_TRACE(::testing::Message() << "R=" << s.R << " S=" << s.S << " pad=" << s.pad);
    const std::size_t n = s.N, chw = s.C * s.H * s.W, total = s.crs() * n * s.pq();
    const auto x = cast<float>(random_vector(n * chw, 51));
    std::vector<float> col(total), col_elementwise(total, -1.0f);
    cpu::im2col(x.data(), col.data(), s, n);
    for (std::size_t i = 0; i < total; ++i) {
      std::size_t src = 0;
      col_elementwise[i] = conv::im2col_source(s, n, i, &src) ? x[src] : 0.0f;
    }
    EXPECT_EQ(col_elementwise, col);

    const auto dcol = cast<float>(random_vector(total, 52));
    std::vector<float> dx(n * chw, 9.0f), dx_gathered(n * chw);
    cpu::col2im(dcol.data(), dx.data(), s, n);
    for (std::size_t i = 0; i < dx.size(); ++i) {
      dx_gathered[i] = conv::col2im_gather(dcol.data(), s, n, i);
    }
    EXPECT_EQ(dx_gathered, dx);
    // col2im is im2col's adjoint: <im2col(x), dcol> == <x, col2im(dcol)>.
    auto wide = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
    EXPECT_NEAR(dot(wide(col), wide(dcol)), dot(wide(x), wide(dx)), 1e-3);
  }
  // out[k, j*PQ + e] is y[j, k, e]: a bijection, e.g. k = 1, j = 2, e = 3.
  const std::size_t n = kOdd.N, size = kOdd.K * n * kOdd.pq();
  std::vector<int> hits(size, 0);
  for (std::size_t i = 0; i < size; ++i) ++hits[conv::nchw_of_out(kOdd, n, i)];
  EXPECT_EQ(std::count(hits.begin(), hits.end(), 1), static_cast<long>(size));
  EXPECT_EQ(conv::nchw_of_out(kOdd, n, 1 * n * kOdd.pq() + 2 * kOdd.pq() + 3), (2 * kOdd.K + 1) * kOdd.pq() + 3);
}

// ---- max-pooling and ReLU ---------------------------------------------------------------------

TEST(MaxPool2x2, ForwardTakesFirstMaximumOnTiesWithFlatIndices) {
  // N=1, C=2, H=2, W=4: two windows per channel.
  const std::vector<double> x = {
      1,  5,  5, 2,  //
      3,  4,  5, 1,  // channel 0: window 0 max 5 at index 1; window 1 ties at 2 and 6 -> 2
      -1, -2, 0, 0,  //
      -3, -1, 0, 0,  // channel 1: window 0 ties -1 at 8 and 13 -> 8; window 1 all 0 -> 10
  };
  std::vector<double> y(4);
  std::vector<std::int32_t> argmax(4);
  cpu::maxpool2x2_forward(x.data(), y.data(), argmax.data(), 1, 2, 2, 4);
  EXPECT_EQ(y, (std::vector<double>{5, 5, -1, 0}));
  EXPECT_EQ(argmax, (std::vector<std::int32_t>{1, 2, 8, 10}));

  // Backward routes each dy to its argmax only.
  std::vector<double> dx(8 * 2, 9.0);
  const std::vector<double> dy = {1, 2, 3, 4};
  cpu::maxpool2x2_backward(dy.data(), argmax.data(), dx.data(), 1, 2, 2, 4);
  std::vector<double> want(16, 0.0);
  want[1] = 1;
  want[2] = 2;
  want[8] = 3;
  want[10] = 4;
  EXPECT_EQ(dx, want);
}

TEST(MaxPool2x2, BackwardMatchesFiniteDifferences) {
  const std::size_t N = 2, C = 3, H = 4, W = 6, out = N * C * (H / 2) * (W / 2);
  std::vector<double> x = random_vector(N * C * H * W, 31);  // distinct values: no ties
  const std::vector<double> G = random_vector(out, 32);
  std::vector<double> y(out);
  std::vector<std::int32_t> argmax(out);
  auto loss = [&] {
    cpu::maxpool2x2_forward(x.data(), y.data(), argmax.data(), N, C, H, W);
    return dot(y, G);
  };
  loss();
  std::vector<double> dx(x.size());
  cpu::maxpool2x2_backward(G.data(), argmax.data(), dx.data(), N, C, H, W);
  const std::vector<double> ndx = numeric_grad(x, loss);
  EXPECT_GT(max_abs(ndx), 0.1);
  EXPECT_LT(rel_error(dx, ndx), 1e-6);
  // Exactly one input per window receives gradient.
  EXPECT_EQ(std::count_if(dx.begin(), dx.end(), [](double v) { return v != 0.0; }), static_cast<long>(out));
}

TEST(MaxPool2x2, FloatAgreesWithDouble) {
  const std::size_t N = 2, C = 2, H = 6, W = 4, out = N * C * (H / 2) * (W / 2);
  const std::vector<double> x = random_vector(N * C * H * W, 41);
  std::vector<double> y(out);
  std::vector<std::int32_t> argmax(out), argmaxf(out);
  cpu::maxpool2x2_forward(x.data(), y.data(), argmax.data(), N, C, H, W);
  const auto xf = cast<float>(x);
  std::vector<float> yf(out);
  cpu::maxpool2x2_forward(xf.data(), yf.data(), argmaxf.data(), N, C, H, W);
  EXPECT_LT(rel_error(yf, y), 1e-7);
  EXPECT_EQ(argmaxf, argmax);
}

TEST(Relu, ZeroesNegativesAndKeepsTheRest) {
  std::vector<double> y = {-2.0, -0.0, 0.0, 0.5, 3.0, -1e-300};
  cpu::relu_inplace(y.data(), y.size());
  EXPECT_EQ(y, (std::vector<double>{0.0, 0.0, 0.0, 0.5, 3.0, 0.0}));
  std::vector<float> yf = {-1.f, 2.f};
  cpu::relu_inplace(yf.data(), yf.size());
  EXPECT_EQ(yf, (std::vector<float>{0.f, 2.f}));
}

// ---- BatchNorm --------------------------------------------------------------------------------

struct BnProblem {
  std::size_t N, C, HW;
  std::vector<double> x, gamma, beta;
  BnProblem(std::size_t n, std::size_t c, std::size_t hw, std::uint64_t seed)
      : N(n),
        C(c),
        HW(hw),
        x(random_vector(n * c * hw, seed, 2.0)),
        gamma(random_vector(c, seed + 1)),
        beta(random_vector(c, seed + 2)) {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += 1.5;  // non-zero mean
  }
  double count() const { return static_cast<double>(N * HW); }
};

constexpr double kEps = 1e-5;

// Full batch in one call chain: local sums -> finalize -> normalize. Returns y; fills mean/invstd.
template <typename T>
std::vector<T> bn_forward(const std::vector<T>& x, const std::vector<T>& gamma, const std::vector<T>& beta,
                          std::size_t N, std::size_t C, std::size_t HW, std::vector<T>& mean, std::vector<T>& invstd) {
  std::vector<double> sum(C), sumsq(C);
  cpu::batchnorm_local_sums(x.data(), N, C, HW, sum.data(), sumsq.data());
  mean.assign(C, T(0));
  invstd.assign(C, T(0));
  cpu::batchnorm_finalize_stats(sum.data(), sumsq.data(), static_cast<double>(N * HW), C, T(kEps), T(0.1), mean.data(),
                                invstd.data(), static_cast<T*>(nullptr), static_cast<T*>(nullptr));
  std::vector<T> y(x.size());
  cpu::batchnorm_normalize(x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(), y.data(), N, C, HW);
  return y;
}

// Full batch backward: backward_reduce -> backward_elemt with the same sums.
template <typename T>
void bn_backward(const std::vector<T>& dy, const std::vector<T>& x, const std::vector<T>& gamma,
                 const std::vector<T>& mean, const std::vector<T>& invstd, std::size_t N, std::size_t C, std::size_t HW,
                 std::vector<T>& dx, std::vector<T>& dgamma, std::vector<T>& dbeta) {
  std::vector<double> sum_dy(C), sum_dy_xmu(C);
  dgamma.assign(C, T(0));
  dbeta.assign(C, T(0));
  cpu::batchnorm_backward_reduce(dy.data(), x.data(), mean.data(), invstd.data(), N, C, HW, sum_dy.data(),
                                 sum_dy_xmu.data(), dgamma.data(), dbeta.data());
  dx.assign(x.size(), T(0));
  cpu::batchnorm_backward_elemt(dy.data(), x.data(), mean.data(), invstd.data(), gamma.data(), sum_dy.data(),
                                sum_dy_xmu.data(), static_cast<double>(N * HW), dx.data(), N, C, HW);
}

TEST(BatchNorm, NormalizeMatchesDirectMeanAndBiasedVariance) {
  BnProblem pr(3, 2, 5, 51);
  std::vector<double> mean, invstd;
  const std::vector<double> y = bn_forward(pr.x, pr.gamma, pr.beta, pr.N, pr.C, pr.HW, mean, invstd);

  std::vector<double> ref(pr.x.size());
  for (std::size_t c = 0; c < pr.C; ++c) {
    double mu = 0, var = 0;
    for (std::size_t n = 0; n < pr.N; ++n)
      for (std::size_t i = 0; i < pr.HW; ++i) mu += pr.x[(n * pr.C + c) * pr.HW + i];
    mu /= pr.count();
    for (std::size_t n = 0; n < pr.N; ++n)
      for (std::size_t i = 0; i < pr.HW; ++i) {
        const double d = pr.x[(n * pr.C + c) * pr.HW + i] - mu;
        var += d * d;
      }
    var /= pr.count();
    EXPECT_NEAR(mean[c], mu, 1e-13);
    EXPECT_NEAR(invstd[c], 1.0 / std::sqrt(var + kEps), 1e-12);
    for (std::size_t n = 0; n < pr.N; ++n)
      for (std::size_t i = 0; i < pr.HW; ++i) {
        const std::size_t j = (n * pr.C + c) * pr.HW + i;
        ref[j] = pr.gamma[c] * (pr.x[j] - mu) / std::sqrt(var + kEps) + pr.beta[c];
      }
  }
  EXPECT_LT(rel_error(y, ref), 1e-12);
  // Normalised channels have mean beta and std |gamma| (up to eps).
  double s = 0;
  for (std::size_t n = 0; n < pr.N; ++n)
    for (std::size_t i = 0; i < pr.HW; ++i) s += y[(n * pr.C + 1) * pr.HW + i];
  EXPECT_NEAR(s / pr.count(), pr.beta[1], 1e-12);
}

TEST(BatchNorm, BackwardMatchesFiniteDifferences) {
  BnProblem pr(3, 2, 4, 61);
  const std::vector<double> G = random_vector(pr.x.size(), 62);
  std::vector<double> mean, invstd;
  auto loss = [&] {
    std::vector<double> m, is;
    return dot(bn_forward(pr.x, pr.gamma, pr.beta, pr.N, pr.C, pr.HW, m, is), G);
  };
  bn_forward(pr.x, pr.gamma, pr.beta, pr.N, pr.C, pr.HW, mean, invstd);
  std::vector<double> dx, dgamma, dbeta;
  bn_backward(G, pr.x, pr.gamma, mean, invstd, pr.N, pr.C, pr.HW, dx, dgamma, dbeta);

  const std::vector<double> ndx = numeric_grad(pr.x, loss);
  const std::vector<double> ndgamma = numeric_grad(pr.gamma, loss);
  const std::vector<double> ndbeta = numeric_grad(pr.beta, loss);
  EXPECT_GT(max_abs(ndx), 0.1);
  EXPECT_GT(max_abs(ndgamma), 0.1);
  EXPECT_LT(rel_error(dx, ndx), 1e-6);
  EXPECT_LT(rel_error(dgamma, ndgamma), 1e-6);
  EXPECT_LT(rel_error(dbeta, ndbeta), 1e-6);
}

TEST(BatchNorm, RunningStatsUseMomentumAndUnbiasedVariance) {
  // One channel, values {1, 2, 3, 4} as N=2, HW=2: mean 2.5, biased var 1.25, unbiased 5/3.
  const std::vector<double> x = {1, 2, 3, 4};
  std::vector<double> sum(1), sumsq(1);
  cpu::batchnorm_local_sums(x.data(), 2, 1, 2, sum.data(), sumsq.data());
  EXPECT_DOUBLE_EQ(sum[0], 10.0);
  EXPECT_DOUBLE_EQ(sumsq[0], 30.0);
  double mean = 0, invstd = 0, running_mean = 0.5, running_var = 2.0;
  cpu::batchnorm_finalize_stats(sum.data(), sumsq.data(), 4.0, 1, 1e-5, 0.1, &mean, &invstd, &running_mean,
                                &running_var);
  EXPECT_DOUBLE_EQ(mean, 2.5);
  EXPECT_NEAR(invstd, 1.0 / std::sqrt(1.25 + 1e-5), 1e-15);
  EXPECT_NEAR(running_mean, 0.9 * 0.5 + 0.1 * 2.5, 1e-15);         // 0.7
  EXPECT_NEAR(running_var, 0.9 * 2.0 + 0.1 * (5.0 / 3.0), 1e-15);  // 1.96667, not 1.925

  // count 1: no unbiased estimate exists; the biased variance (0) is used.
  const double one_sum = 3.0, one_sumsq = 9.0;
  float m = 0, is = 0, rm = 1.0f, rv = 1.0f;
  cpu::batchnorm_finalize_stats(&one_sum, &one_sumsq, 1.0, 1, 1e-5f, 0.1f, &m, &is, &rm, &rv);
  EXPECT_FLOAT_EQ(m, 3.0f);
  EXPECT_FLOAT_EQ(rm, 0.9f + 0.3f);
  EXPECT_FLOAT_EQ(rv, 0.9f);
  EXPECT_TRUE(std::isfinite(is));
}

TEST(BatchNorm, FloatAgreesWithDouble) {
  BnProblem pr(4, 3, 9, 71);
  const std::vector<double> G = random_vector(pr.x.size(), 72);
  std::vector<double> mean, invstd, dx, dgamma, dbeta;
  const std::vector<double> y = bn_forward(pr.x, pr.gamma, pr.beta, pr.N, pr.C, pr.HW, mean, invstd);
  bn_backward(G, pr.x, pr.gamma, mean, invstd, pr.N, pr.C, pr.HW, dx, dgamma, dbeta);

  const auto xf = cast<float>(pr.x), gf = cast<float>(pr.gamma), bf = cast<float>(pr.beta), Gf = cast<float>(G);
  std::vector<float> meanf, invstdf, dxf, dgammaf, dbetaf;
  const std::vector<float> yf = bn_forward(xf, gf, bf, pr.N, pr.C, pr.HW, meanf, invstdf);
  bn_backward(Gf, xf, gf, meanf, invstdf, pr.N, pr.C, pr.HW, dxf, dgammaf, dbetaf);
  EXPECT_LT(rel_error(yf, y), 1e-5);
  EXPECT_LT(rel_error(dxf, dx), 1e-5);
  EXPECT_LT(rel_error(dgammaf, dgamma), 1e-5);
  EXPECT_LT(rel_error(dbetaf, dbeta), 1e-5);
}

// Two "ranks" of 2 samples each; their sums combined as an all-reduce would.
TEST(SyncBatchNorm, SplitBatchWithCombinedSumsMatchesFullBatch) {
  BnProblem pr(4, 3, 5, 81);
  const std::size_t C = pr.C, HW = pr.HW, half = 2 * C * HW;
  const std::vector<double> G = random_vector(pr.x.size(), 82);

  std::vector<double> mean, invstd, dx, dgamma, dbeta;
  const std::vector<double> y = bn_forward(pr.x, pr.gamma, pr.beta, pr.N, C, HW, mean, invstd);
  bn_backward(G, pr.x, pr.gamma, mean, invstd, pr.N, C, HW, dx, dgamma, dbeta);

  const double* x_rank[2] = {pr.x.data(), pr.x.data() + half};
  const double* dy_rank[2] = {G.data(), G.data() + half};

  // Forward: local sums per rank, summed, finalized with the total count.
  std::vector<double> sum(C, 0.0), sumsq(C, 0.0);
  for (int r = 0; r < 2; ++r) {
    std::vector<double> s(C), sq(C);
    cpu::batchnorm_local_sums(x_rank[r], 2, C, HW, s.data(), sq.data());
    for (std::size_t c = 0; c < C; ++c) {
      sum[c] += s[c];
      sumsq[c] += sq[c];
    }
  }
  std::vector<double> smean(C), sinvstd(C), rm(C, 0.0), rv(C, 1.0);
  cpu::batchnorm_finalize_stats(sum.data(), sumsq.data(), pr.count(), C, kEps, 0.1, smean.data(), sinvstd.data(),
                                rm.data(), rv.data());
  std::vector<double> sy(pr.x.size());
  for (int r = 0; r < 2; ++r) {
    cpu::batchnorm_normalize(x_rank[r], smean.data(), sinvstd.data(), pr.gamma.data(), pr.beta.data(),
                             sy.data() + r * half, 2, C, HW);
  }
  EXPECT_LT(rel_error(sy, y), 1e-12);

  // A rank normalising with only its own statistics would differ: the check is not vacuous.
  std::vector<double> lmean, linvstd;
  const std::vector<double> x0(pr.x.begin(), pr.x.begin() + half);
  const std::vector<double> y_local = bn_forward(x0, pr.gamma, pr.beta, 2, C, HW, lmean, linvstd);
  EXPECT_GT(rel_error(y_local, std::vector<double>(y.begin(), y.begin() + half)), 1e-3);

  // Backward: per-rank reduce, sums combined, per-rank elemt with the combined sums.
  std::vector<double> sum_dy(C, 0.0), sum_dy_xmu(C, 0.0), sdgamma(C, 0.0), sdbeta(C, 0.0);
  for (int r = 0; r < 2; ++r) {
    std::vector<double> a(C), b(C), dg(C), dbt(C);
    cpu::batchnorm_backward_reduce(dy_rank[r], x_rank[r], smean.data(), sinvstd.data(), 2, C, HW, a.data(), b.data(),
                                   dg.data(), dbt.data());
    for (std::size_t c = 0; c < C; ++c) {
      sum_dy[c] += a[c];
      sum_dy_xmu[c] += b[c];
      sdgamma[c] += dg[c];
      sdbeta[c] += dbt[c];
    }
  }
  std::vector<double> sdx(pr.x.size());
  for (int r = 0; r < 2; ++r) {
    cpu::batchnorm_backward_elemt(dy_rank[r], x_rank[r], smean.data(), sinvstd.data(), pr.gamma.data(), sum_dy.data(),
                                  sum_dy_xmu.data(), pr.count(), sdx.data() + r * half, 2, C, HW);
  }
  EXPECT_GT(max_abs(dx), 0.1);
  EXPECT_LT(rel_error(sdx, dx), 1e-12);
  EXPECT_LT(rel_error(sdgamma, dgamma), 1e-12);
  EXPECT_LT(rel_error(sdbeta, dbeta), 1e-12);
}

}  // namespace
}  // namespace dpbench
