// Tests of sharded_ps --staleness (sharded_ps/stale_sync.hpp): the replay schedule, SSP's update
// rule computed here step by step from the model against the trained parameters, reproducibility,
// the staleness bound under a real straggler, the result's histogram and the refusals.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <mutex>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "registry/strategies.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "sharded_ps/stale_sync.hpp"
#include "train/models.hpp"
#include "training_fixtures.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/synthetic.hpp"
#include "workloads/distributed_sampler.hpp"
#include "train/replica_rank.hpp"

namespace dpbench {
namespace {

using testing::relative_l2;

std::unique_ptr<Dataset> stale_sync_data() { return make_synthetic_dataset(SampleShape{1, 1, 48}, 10, 2048, 5); }

TrainConfig stale_config(int p, std::size_t batch, int bound, std::int64_t replay) {
  TrainConfig c = testing::small_train_config("sharded_ps", p, batch);
  c.sharded_ps.staleness = bound;
  c.sharded_ps.staleness_replay = replay;
  c.run.max_steps = 12;
  return c;
}

TEST(StaleSync, ReplayScheduleStaysWithinTheBoundAndUsesEveryValue) {
  std::vector<int> seen(4, 0);
  for (long t = 0; t < 200; ++t) {
    for (int r = 0; r < 3; ++r) {
      const int d = ssp_replay_staleness(9, r, t, 3);
      ASSERT_GE(d, 0);
      ASSERT_LE(d, std::min<long>(3, t));
      ++seen[static_cast<std::size_t>(d)];
      EXPECT_EQ(d, ssp_replay_staleness(9, r, t, 3));  // a function of its arguments
    }
  }
  for (int s = 0; s <= 3; ++s) EXPECT_GT(seen[static_cast<std::size_t>(s)], 100) << "staleness " << s;
  EXPECT_EQ(ssp_replay_staleness(9, 0, 0, 3), 0);  // step 0 has only version 0
  int differ = 0;
  for (long t = 3; t < 50; ++t) differ += ssp_replay_staleness(9, 1, t, 3) != ssp_replay_staleness(10, 1, t, 3);
  EXPECT_GT(differ, 10);  // the seed matters
}

// SSP's rule, from the model alone: version t + 1 = SGD with momentum on version t and the sum
// over workers w of w's gradient at step t, computed on version t - d(w, t) with w's
// DistributedSampler batch of step t.
std::vector<float> ssp_reference(const TrainConfig& c, const Dataset& data) {
  MemoryTracker tracker;
  const auto classes = static_cast<std::size_t>(data.num_classes());
  const std::size_t local = c.global_batch / static_cast<std::size_t>(c.world_size);
  auto model = make_model(c, data.shape(), classes);
  model->reserve(local, tracker);
  const std::size_t n = model->num_params(), features = data.shape().features();
  const long spe = static_cast<long>(data.size() / static_cast<std::int64_t>(c.global_batch));
  std::vector<std::vector<std::int64_t>> order;
  for (int w = 0; w < c.world_size; ++w) {
    DistributedSampler sampler(data.size(), c.world_size, w, true, c.seed);
    order.push_back(ddp_epoch_indices(c, data, sampler, 0, 0, local, spe));
  }
  std::vector<std::vector<float>> versions = {initial_parameters(*model, c)};
  std::vector<float> velocity(n, 0.0f), sum(n), grads(n), x(local * features), logits(local * classes),
      dlogits(local * classes);
  std::vector<std::int32_t> labels(local);
  for (long t = 0; t < c.run.max_steps; ++t) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    for (int w = 0; w < c.world_size; ++w) {
      const std::vector<float>& at = versions[static_cast<std::size_t>(
          t - ssp_replay_staleness(static_cast<std::uint64_t>(c.sharded_ps.staleness_replay), w, t,
                                   c.sharded_ps.staleness))];
      for (std::size_t i = 0; i < local; ++i) {
        const std::int64_t index = order[static_cast<std::size_t>(w)][static_cast<std::size_t>(t) * local + i];
        labels[i] = data.load(index, x.data() + i * features);
      }
      model->forward(at.data(), x.data(), local, logits.data());
      cpu::softmax_cross_entropy(logits.data(), labels.data(), local, classes, dlogits.data(),
                                 1.0f / static_cast<float>(c.global_batch));
      model->backward(at.data(), x.data(), dlogits.data(), local, grads.data(), nullptr);
      for (std::size_t i = 0; i < n; ++i) sum[i] += grads[i];
    }
    std::vector<float> next = versions.back();
    cpu::sgd_momentum(next.data(), sum.data(), velocity.data(), n, c.optimizer.lr, c.optimizer.momentum,
                      c.optimizer.weight_decay);
    versions.push_back(std::move(next));
  }
  return versions.back();
}

TEST(StaleSync, ReplayFollowsSspsUpdateRule) {
  const auto data = stale_sync_data();
  const TrainData td{data.get(), nullptr};
  for (const int p : {2, 3}) {
    const TrainConfig c = stale_config(p, 48, 2, 7);
    const RunResult run = train_sharded_ps(c, td);
    const std::vector<float> expected = ssp_reference(c, *data);
    // Only the order of the servers' sums differs from the reference's.
    EXPECT_LT(relative_l2(run.final_params, expected), 1e-5) << p << " ranks";
    TrainConfig sync = c;
    sync.sharded_ps.staleness = 0;
    sync.sharded_ps.staleness_replay = -1;
    EXPECT_GT(relative_l2(train_sharded_ps(sync, td).final_params, expected), 1e-3) << "stale = synchronous?";
  }
}

TEST(StaleSync, ReplayIsBitwiseReproducibleAndTheHistogramIsTheSchedules) {
  const auto data = stale_sync_data();
  const TrainData td{data.get(), nullptr};
  const TrainConfig c = stale_config(4, 64, 3, 21);
  const RunResult a = train_sharded_ps(c, td), b = train_sharded_ps(c, td);
  EXPECT_EQ(a.final_params, b.final_params);
  TrainConfig other = c;
  other.sharded_ps.staleness_replay = 22;
  EXPECT_NE(train_sharded_ps(other, td).final_params, a.final_params);
  std::vector<long> expected(4, 0);
  for (const RankResult& r : a.ranks) {
    ASSERT_EQ(r.step_staleness.size(), 12u);
    for (long t = 0; t < 12; ++t) {
      EXPECT_EQ(r.step_staleness[static_cast<std::size_t>(t)], ssp_replay_staleness(21, r.rank, t, 3));
      if (t >= c.run.warmup_steps) ++expected[static_cast<std::size_t>(ssp_replay_staleness(21, r.rank, t, 3))];
    }
  }
  std::vector<std::vector<int>> all;
  for (const RankResult& r : a.ranks) all.push_back(r.step_staleness);
  EXPECT_EQ(staleness_histogram(all, c.run.warmup_steps, 3), expected);
}

// A straggler held by a test hook: from the first timed step on, rank 3 starts step t only once
// every fast rank has started step t + 3 (or the last step), that is, has computed step t + 2 and
// is waiting for the version step t + 3 needs (t + 1: the straggler's push of step t). Without
// replay each fast rank then computes on exactly the version SSP allows and no newer: staleness 0
// at step 2 (the timed steps start in sync), 1 at step 3, and the bound, 2, at steps 4 to 14
// (step 15, the last, is not held: 1 or 2); never more than 2. A server that waited for the
// straggler would give 0 throughout; one that let the fast ranks run further would exceed 2.
TEST(StaleSync, FastWorkersRunAheadOfAStragglerByAtMostTheBound) {
  const auto data = stale_sync_data();
  const TrainData td{data.get(), nullptr};
  TrainConfig c = stale_config(4, 128, 2, -1);
  c.rank_batches = {8, 8, 8, 104};
  c.run.max_steps = 16;
  ASSERT_EQ(c.run.warmup_steps, 2);
  std::mutex mutex;
  std::condition_variable moved;
  std::vector<long> started(3, -1);
  bool timed_out = false;
  set_step_start_hook([&](int rank, long step) {
    std::unique_lock<std::mutex> lock(mutex);
    if (rank < 3) {
      started[static_cast<std::size_t>(rank)] = step;
      moved.notify_all();
      return;
    }
    if (step < c.run.warmup_steps) return;
    const long target = std::min<long>(step + 3, c.run.max_steps - 1);
    const bool ok = moved.wait_for(lock, std::chrono::seconds(60), [&] {
      return std::all_of(started.begin(), started.end(), [&](long s) { return s >= target; });
    });
    if (!ok) timed_out = true;
  });
  const RunResult run = train_sharded_ps(c, td);
  set_step_start_hook({});
  ASSERT_FALSE(timed_out) << "the fast ranks never reached the bound ahead of the held straggler";
  for (const RankResult& r : run.ranks) {
    ASSERT_EQ(r.step_staleness.size(), 16u);
    EXPECT_EQ(r.step_staleness.front(), 0);
    for (const int s : r.step_staleness) {
      EXPECT_GE(s, 0);
      EXPECT_LE(s, 2);
    }
    if (r.rank == 3) continue;
    std::vector<int> timed(r.step_staleness.begin() + 2, r.step_staleness.end() - 1), expected(13, 2);
    expected[0] = 0;
    expected[1] = 1;
    EXPECT_EQ(timed, expected) << "rank " << r.rank;
  }
  EXPECT_TRUE(std::isfinite(run.final_train_loss));
}

TEST(StaleSync, RefusesWhatItCannotRun) {
  const auto data = stale_sync_data();
  const TrainData td{data.get(), nullptr};
  TrainConfig c = stale_config(4, 64, 2, -1);
  c.transport = Transport::p2p;
  EXPECT_THROW(train_sharded_ps(c, td), InputError);
  c = stale_config(4, 64, 2, -1);
  c.checkpoint.dir = "/tmp/x";
  EXPECT_THROW(train_sharded_ps(c, td), InputError);
  c = stale_config(4, 64, 2, -1);
  c.hierarchy = Hierarchy::node;
  EXPECT_THROW(train_sharded_ps(c, td), InputError);
  c = stale_config(4, 64, -1, -1);
  EXPECT_THROW(train_sharded_ps(c, td), InputError);
  c = stale_config(4, 64, 0, 3);  // a replay of nothing
  EXPECT_THROW(train_sharded_ps(c, td), InputError);
  // Another mode given --staleness is refused before training (the registry's check of a point).
  TrainConfig a = testing::small_train_config("allreduce", 4, 64);
  a.sharded_ps.staleness = 2;
  EXPECT_THROW(validate_point(a, *data), InputError);
  a.sharded_ps.staleness = 0;
  EXPECT_NO_THROW(validate_point(a, *data));
}

}  // namespace
}  // namespace dpbench
