// Tests of the CNN workload as the trainers use it: SyncBatchNorm across 4 ranks gives the
// outputs and (summed) gradients of plain BatchNorm on the concatenated batch, per-rank
// BatchNorm does not, evaluation uses the running statistics, and gradients become ready in
// reverse parameter order.
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "workloads/cnn.hpp"
#include "workloads/cpu_kernels.hpp"

namespace dpbench {
namespace {

constexpr std::size_t kBatch = 8, kCnnClasses = 5;
const SampleShape kShape{2, 8, 8};

struct CnnProblem {
  std::vector<float> params, x, dlogits;
};

CnnProblem make_problem() {
  Cnn model(kShape, 3, 4, 6, kCnnClasses);
  CnnProblem p;
  p.params.resize(model.num_params());
  model.init_params(p.params.data(), 3);
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Non-trivial BatchNorm affine parameters, so that gamma and beta matter.
  for (std::size_t v : {1u, 2u, 4u, 5u}) {
    const auto& view = model.params()[v];
    for (std::size_t i = 0; i < view.size; ++i) p.params[view.offset + i] += 0.3f * normal(rng);
  }
  p.x.resize(kBatch * kShape.features());
  for (float& v : p.x) v = normal(rng);
  p.dlogits.resize(kBatch * kCnnClasses);
  for (float& v : p.dlogits) v = normal(rng) / static_cast<float>(kBatch);
  return p;
}

// Full-batch reference: one model, all 8 samples.
void full_batch(const CnnProblem& p, std::vector<float>& logits, std::vector<float>& grads) {
  MemoryTracker t;  // declared first: the model frees its buffers into it
  Cnn model(kShape, 3, 4, 6, kCnnClasses);
  model.reserve(kBatch, t);
  logits.assign(kBatch * kCnnClasses, 0);
  grads.assign(model.num_params(), 0);
  model.forward(p.params.data(), p.x.data(), kBatch, logits.data());
  model.backward(p.params.data(), p.x.data(), p.dlogits.data(), kBatch, grads.data(), nullptr);
}

class CommSync final : public BatchNormSync {
 public:
  explicit CommSync(Communicator& c) : comm_(c) {}
  int world_size() const override { return comm_.world_size(); }
  void allgather(const float* send, float* recv, std::size_t n) override { comm_.allgather(send, recv, n); }
  void allreduce_sum(float* buf, std::size_t n) override { comm_.allreduce_sum(buf, n); }

 private:
  Communicator& comm_;
};

// 4 ranks with 2 samples each; returns each rank's logits rows in order and the sum of grads.
void four_ranks(const CnnProblem& p, bool sync, std::vector<float>& logits, std::vector<float>& grads) {
  constexpr int kRanks = 4;
  const std::size_t per = kBatch / kRanks, f = kShape.features();
  auto group = std::make_shared<LocalGroup>(kRanks);
  logits.assign(kBatch * kCnnClasses, 0);
  std::vector<std::vector<float>> rank_grads(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicator comm(group, r, nullptr);
      CommSync bn_sync(comm);
      MemoryTracker t;  // declared first: the model frees its buffers into it
      Cnn model(kShape, 3, 4, 6, kCnnClasses);
      model.reserve(per, t);
      if (sync) model.set_batchnorm_sync(&bn_sync);
      const auto ur = static_cast<std::size_t>(r);
      rank_grads[ur].assign(model.num_params(), 0);
      model.forward(p.params.data(), p.x.data() + ur * per * f, per, logits.data() + ur * per * kCnnClasses);
      model.backward(p.params.data(), p.x.data() + ur * per * f, p.dlogits.data() + ur * per * kCnnClasses, per,
                     rank_grads[ur].data(), nullptr);
    });
  }
  for (auto& t : threads) t.join();
  grads.assign(rank_grads[0].size(), 0);
  for (const auto& g : rank_grads) {
    for (std::size_t i = 0; i < g.size(); ++i) grads[i] += g[i];
  }
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

TEST(SyncBatchNorm, FourRanksMatchPlainBatchNormOnTheConcatenatedBatch) {
  const CnnProblem p = make_problem();
  std::vector<float> ref_logits, ref_grads, logits, grads;
  full_batch(p, ref_logits, ref_grads);
  four_ranks(p, /*sync=*/true, logits, grads);
  // Float statistics cross the ranks as (mean, invstd, count): agreement to float precision.
  EXPECT_LT(max_rel_diff(logits, ref_logits), 1e-4);
  EXPECT_LT(max_rel_diff(grads, ref_grads), 1e-4);
}

// The exchange format the CPU and GPU models share: a rank's (mean, invstd, count) row, and the
// rows of every rank combined back into sums. Values chosen so that float rounding is small.
TEST(SyncBatchNorm, PackedRowsCombineIntoTheSumsOverEveryRank) {
  const double sum_a[2] = {2.0, -1.0}, sumsq_a[2] = {3.0, 5.0};  // 4 values per channel
  const double sum_b[2] = {6.0, 0.0}, sumsq_b[2] = {10.0, 2.0};  // 4 values per channel
  std::vector<float> rows(2 * 5);
  syncbn_pack_stats(sum_a, sumsq_a, 4.0, 2, rows.data());
  syncbn_pack_stats(sum_b, sumsq_b, 4.0, 2, rows.data() + 5);
  EXPECT_FLOAT_EQ(rows[0], 0.5f);                                             // mean of channel 0
  EXPECT_FLOAT_EQ(rows[2], static_cast<float>(1.0 / std::sqrt(0.5 + 1e-5)));  // var 3/4 - 1/4
  EXPECT_FLOAT_EQ(rows[4], 4.0f);                                             // count
  double sum[2], sumsq[2];
  EXPECT_DOUBLE_EQ(syncbn_combine_stats(rows.data(), 2, 2, sum, sumsq), 8.0);
  EXPECT_NEAR(sum[0], 8.0, 1e-5);
  EXPECT_NEAR(sum[1], -1.0, 1e-5);
  EXPECT_NEAR(sumsq[0], 13.0, 1e-4);
  EXPECT_NEAR(sumsq[1], 7.0, 1e-4);
}

TEST(SyncBatchNorm, PerRankStatisticsDifferFromTheFullBatch) {
  const CnnProblem p = make_problem();
  std::vector<float> ref_logits, ref_grads, logits, grads;
  full_batch(p, ref_logits, ref_grads);
  four_ranks(p, /*sync=*/false, logits, grads);
  EXPECT_GT(max_rel_diff(logits, ref_logits), 1e-2);  // two samples per rank: very different stats
}

TEST(CnnModel, EvaluationUsesRunningStatistics) {
  const CnnProblem p = make_problem();
  MemoryTracker t;  // declared first: the model frees its buffers into it
  Cnn model(kShape, 3, 4, 6, kCnnClasses);
  model.reserve(kBatch, t);
  std::vector<float> train_logits(kBatch * kCnnClasses), eval_logits(kBatch * kCnnClasses);
  model.forward(p.params.data(), p.x.data(), kBatch, train_logits.data());
  // One training step moved running_mean from 0 by momentum * batch mean.
  EXPECT_NE(model.buffers()[0], 0.0f);
  model.set_training(false);
  model.forward(p.params.data(), p.x.data(), kBatch, eval_logits.data());
  EXPECT_GT(max_rel_diff(eval_logits, train_logits), 1e-3);
  const std::vector<float> running(model.buffers(), model.buffers() + model.num_buffers());
  model.forward(p.params.data(), p.x.data(), kBatch, eval_logits.data());
  EXPECT_EQ(std::vector<float>(model.buffers(), model.buffers() + model.num_buffers()), running);  // eval: no update
}

TEST(CnnModel, GradientsReadyInReverseParameterOrder) {
  const CnnProblem p = make_problem();
  MemoryTracker t;  // declared first: the model frees its buffers into it
  Cnn model(kShape, 3, 4, 6, kCnnClasses);
  model.reserve(kBatch, t);
  std::vector<float> logits(kBatch * kCnnClasses), grads(model.num_params());
  model.forward(p.params.data(), p.x.data(), kBatch, logits.data());
  std::vector<std::size_t> order;
  model.backward(p.params.data(), p.x.data(), p.dlogits.data(), kBatch, grads.data(),
                 [&](std::size_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<std::size_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(model.params()[0].name, "conv1.weight");
  EXPECT_EQ(model.params()[6].shape, (std::vector<std::size_t>{6, 4 * 2 * 2}));
}

TEST(CnnModel, RejectsShapesItCannotPool) {
  EXPECT_THROW((Cnn{SampleShape{3, 30, 30}, 4, 4, 8, 10}), InputError);
  EXPECT_THROW((Cnn{SampleShape{1, 2, 2}, 4, 4, 8, 10}), InputError);
}

}  // namespace
}  // namespace dpbench
