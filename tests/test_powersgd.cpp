// Tests of PowerSGD (allreduce/powersgd.hpp): the hook's name, which tensors it compresses (PyTorch's
// _should_compress), Gram-Schmidt, a rank-1 mean recovered exactly on two ranks with the error
// each rank keeps, the bytes of its three all-reduces, and the options a run refuses. Agreement
// with PyTorch's own powerSGD_hook is Cli.PowerSgdHookAgreesWithPyTorchsPowerSgdHook.
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "allreduce/powersgd.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"

namespace dpbench {
namespace {

TEST(PowerSgd, RankComesFromTheHookName) {
  EXPECT_EQ(parse_comm_hook("powersgd:4").powersgd_rank, 4);
  EXPECT_EQ(parse_comm_hook("powersgd:1").kind, CommHook::Kind::powersgd);
  EXPECT_EQ(parse_comm_hook("fp16").powersgd_rank, 0);
  EXPECT_EQ(parse_comm_hook("fp16").kind, CommHook::Kind::fp16);
  EXPECT_EQ(parse_comm_hook("allreduce"), CommHook{});
  for (const char* spelled : {"allreduce", "fp16", "bf16", "powersgd:1", "powersgd:123456"}) {
    EXPECT_EQ(hook_name(parse_comm_hook(spelled)), spelled);
  }
  for (const char* bad : {"powersgd", "powersgd:", "powersgd:0", "powersgd:x", "powersgd4", "powersgd:-1",
                          "powersgd:+1", "powersgd:1x", "powersgd:1234567", "int8", "", "FP16"}) {
    EXPECT_THROW(parse_comm_hook(bad), InputError) << bad;
  }
}

// PyTorch's rule on the [shape[0], -1] view: (rows + cols) * r * 2 < rows * cols.
TEST(PowerSgd, CompressesTheTensorsPyTorchCompresses) {
  const std::vector<ParamView> params = {{"fc1.weight", {512, 784}, 0, 512 * 784},
                                         {"fc1.bias", {512}, 401408, 512},
                                         {"fc3.weight", {10, 256}, 401920, 2560},
                                         {"small.weight", {4, 4}, 404480, 16},
                                         {"conv.weight", {16, 3, 3, 3}, 404496, 432}};
  Bucket all{0, 404928, {0, 1, 2, 3, 4}};
  const auto t = powersgd_tensors(params, all, 4);
  ASSERT_EQ(t.size(), 5u);
  EXPECT_TRUE(t[0].compressed);
  EXPECT_EQ(t[0].rows, 512u);
  EXPECT_EQ(t[0].cols, 784u);
  EXPECT_FALSE(t[1].compressed);  // a bias: [512, 1], rank 1
  EXPECT_TRUE(t[2].compressed);   // 266 * 4 * 2 = 2128 < 2560
  EXPECT_FALSE(t[3].compressed);  // 8 * 4 * 2 = 64 >= 16
  EXPECT_TRUE(t[4].compressed);   // a conv weight as [16, 27]: 43 * 4 * 2 = 344 < 432
  EXPECT_EQ(t[4].cols, 27u);
  const PowerSgdMessages m = powersgd_messages(t);
  EXPECT_EQ(m.p, 512u * 4 + 10u * 4 + 16u * 4);
  EXPECT_EQ(m.q, 784u * 4 + 256u * 4 + 27u * 4);
  EXPECT_EQ(m.uncompressed, 512u + 16u);
}

TEST(PowerSgd, GramSchmidtGivesOrthonormalColumnsSpanningTheSame) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  const std::size_t rows = 50, cols = 4;
  std::vector<float> m(rows * cols);
  for (float& x : m) x = normal(rng);
  const std::vector<float> original = m;
  orthogonalize_columns(m.data(), rows, cols);
  for (std::size_t i = 0; i < cols; ++i) {
    for (std::size_t j = 0; j < cols; ++j) {
      double dot = 0;
      for (std::size_t r = 0; r < rows; ++r) dot += m[r * cols + i] * m[r * cols + j];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-5) << i << "," << j;
    }
  }
  // Column 0 is the first input column, normalised (same direction).
  double norm = 0;
  for (std::size_t r = 0; r < rows; ++r) norm += original[r * cols] * original[r * cols];
  for (std::size_t r = 0; r < rows; ++r) EXPECT_NEAR(m[r * cols], original[r * cols] / std::sqrt(norm), 1e-5);
  std::vector<float> zero(rows * 2, 0.0f);
  orthogonalize_columns(zero.data(), rows, 2);
  for (float x : zero) EXPECT_EQ(x, 0.0f);
}

TEST(PowerSgd, InitialQIsTheSameForASeedAndDiffersAcrossSeeds) {
  PowerSgdTensor t;
  t.param = 3;
  t.rows = 64;
  t.cols = 100;
  t.rank = 4;
  t.compressed = true;
  const auto a = powersgd_initial_q(t, 1), b = powersgd_initial_q(t, 1), c = powersgd_initial_q(t, 2);
  ASSERT_EQ(a.size(), 400u);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, sq = 0;
  for (float x : a) mean += x, sq += static_cast<double>(x) * x;
  mean /= 400.0;
  EXPECT_NEAR(mean, 0.0, 0.2);
  EXPECT_NEAR(sq / 400.0, 1.0, 0.25);  // standard normal
}

// Two ranks, a bucket of one [8, 6] weight and a [3] bias. Rank r's weight gradient is a_r u v^T
// (rank 1) and its bias b_r; grads hold them scaled by 1 / world_size as a run's do. The mean's
// low-rank approximation is exact, so both ranks end with the mean, bit-equal to each other; each
// keeps as error its own input minus the mean. A second step with zero gradients feeds back those
// errors, which sum to zero: the result is zero.
TEST(PowerSgd, RankOneMeanIsRecoveredAndErrorsFeedBack) {
  const std::size_t rows = 8, cols = 6;
  const std::vector<ParamView> params = {{"w", {rows, cols}, 0, rows * cols}, {"b", {3}, rows * cols, 3}};
  const std::vector<Bucket> buckets = {{0, rows * cols + 3, {0, 1}}};
  const std::vector<float> u = {1, -2, 0.5f, 3, 1, 0, -1, 2}, v = {2, 1, -1, 0.5f, 0, 3};
  const float a[2] = {1.5f, -0.5f}, bias[2][3] = {{1, 2, 3}, {3, 0, -1}};
  auto group = std::make_shared<LocalGroup>(2);
  std::vector<std::vector<float>> first(2), second(2);
  std::vector<CommStats> stats(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicator comm(group, r, nullptr);
      PowerSgdHook hook(params, buckets, 1, 42, 2);
      std::vector<float> g(rows * cols + 3);
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) g[i * cols + j] = a[r] * u[i] * v[j] / 2.0f;
      }
      for (std::size_t k = 0; k < 3; ++k) g[rows * cols + k] = bias[r][k] / 2.0f;
      hook.reduce(comm, 0, g.data());
      first[static_cast<std::size_t>(r)] = g;
      stats[static_cast<std::size_t>(r)] = comm.stats();
      std::fill(g.begin(), g.end(), 0.0f);
      hook.reduce(comm, 0, g.data());
      second[static_cast<std::size_t>(r)] = g;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(first[0], first[1]);
  const float mean_a = (a[0] + a[1]) / 2.0f;
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) EXPECT_NEAR(first[0][i * cols + j], mean_a * u[i] * v[j], 1e-5f);
  }
  for (std::size_t k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(first[0][rows * cols + k], (bias[0][k] + bias[1][k]) / 2.0f);
  for (const auto& g : second) {
    for (float x : g) EXPECT_NEAR(x, 0.0f, 1e-5f);
  }
  // Per rank, the two ranks' ring moves each message once: the bias (3), P (8) and Q (6) floats.
  for (const CommStats& s : stats) EXPECT_EQ(s.bytes_sent, (3u + 8u + 6u) * sizeof(float));
}

// take_compute_s() counts the hook's own work, not its wait in the all-reduces: rank 1 joins
// 100 ms late, so rank 0's reduce() lasts that long, nearly all of it waiting in its first
// all-reduce; its compute (a [8, 6] bucket) is a small positive share, and the call resets it.
TEST(PowerSgd, ComputeSecondsLeaveOutTheWaitInTheAllReduces) {
  const std::size_t rows = 8, cols = 6;
  const std::vector<ParamView> params = {{"w", {rows, cols}, 0, rows * cols}};
  const std::vector<Bucket> buckets = {{0, rows * cols, {0}}};
  auto group = std::make_shared<LocalGroup>(2);
  double compute[2] = {-1, -1}, again[2] = {-1, -1}, wall0 = 0;
  std::vector<CollectiveTiming> timed[2];
  bool cleared[2] = {false, false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicator comm(group, r, nullptr);
      PowerSgdHook hook(params, buckets, 2, 7, 2);
      std::vector<float> g(rows * cols, 0.25f * static_cast<float>(r + 1));
      if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const auto t0 = std::chrono::steady_clock::now();
      hook.reduce(comm, 0, g.data());
      if (r == 0) wall0 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      compute[r] = hook.take_compute_s();
      again[r] = hook.take_compute_s();
      timed[r] = hook.take_timings();
      cleared[r] = hook.take_timings().empty();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GE(wall0, 0.09);
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(compute[r], 0.0) << "rank " << r;
    EXPECT_LT(compute[r], 0.05) << "rank " << r << " counted its wait (reduce took " << wall0 << " s on rank 0)";
    EXPECT_EQ(again[r], 0.0) << "rank " << r;
    // Its all-reduces as timed for the in-run simulation: one, of the whole [8, 6] tensor, which
    // rank 2 leaves uncompressed ((8 + 6) x 2 x min_compression_rate 2 >= 48, as PyTorch's).
    ASSERT_EQ(timed[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(timed[r][0].floats, rows * cols);
    EXPECT_EQ(timed[r][0].kind, CollectiveKind::allreduce);
    EXPECT_TRUE(cleared[r]);
  }
  // Rank 0 waited in the first all-reduce for rank 1, which entered it some 100 ms later.
  EXPECT_GE(timed[1][0].enter_s - timed[0][0].enter_s, 0.09);
  EXPECT_LE(timed[0][0].exit_s - timed[0][0].enter_s, wall0);
}

}  // namespace
}  // namespace dpbench
