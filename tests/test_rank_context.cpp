// Tests of the per-rank context the strategies are written against, on the CPU device: the
// gradient bucket sync's ordering (a bucket is reduced after its gradients are written, and join()
// returns with every bucket reduced), the step timer's phases, and the exposed/total
// communication definitions of the allreduce step on every rank and step.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "ps/data_parallel.hpp"
#include "tests/training_fixtures.hpp"
#include "train/grad_bucket_sync.hpp"
#include "train/rank_context.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

TrainConfig context_config(int world_size) {
  TrainConfig c;
  c.world_size = world_size;
  c.timeout = std::chrono::seconds(60);
  return c;
}

// Rank r writes r+1 into every element of each bucket just before starting it, then changes
// the gradients of the next bucket only after the start call; the sums must be of the values
// written before each start: (1 + 2 + 3) per element for three ranks.
TEST(GradBucketSync, ReducesEachBucketAfterItsGradientsAreWritten) {
  const TrainConfig c = context_config(3);
  std::vector<RankResult> ranks(3);
  std::vector<std::vector<float>> out(3);
  run_rank_contexts(c, ranks, [&](RankContext& ctx) {
    constexpr std::size_t kBuckets = 4, kLen = 1001;
    Array<float> grads(ctx, MemoryCategory::gradients, kBuckets * kLen);
    GradBucketSync sync(ctx, kBuckets);
    for (std::size_t b = 0; b < kBuckets; ++b) {
      float* range = grads.data() + b * kLen;
      for (std::size_t i = 0; i < kLen; ++i) range[i] = static_cast<float>(ctx.rank() + 1) * static_cast<float>(b + 1);
      sync.start(b, range, kLen);
      sync.progress();
    }
    sync.join();
    sync.finish_step();
    out[static_cast<std::size_t>(ctx.rank())].assign(grads.data(), grads.data() + kBuckets * kLen);
  });
  for (const auto& g : out) {
    ASSERT_EQ(g.size(), 4u * 1001u);
    for (std::size_t b = 0; b < 4; ++b) {
      EXPECT_EQ(g[b * 1001], 6.0f * static_cast<float>(b + 1));
      EXPECT_EQ(g[b * 1001 + 1000], 6.0f * static_cast<float>(b + 1));
    }
  }
}

// Memory taken through the context is charged to the rank's tracker under its category, and
// given back when the array goes.
TEST(RankContext, ArraysAreChargedToTheirCategory) {
  const TrainConfig c = context_config(1);
  std::vector<RankResult> ranks(1);
  std::int64_t during = -1, after = -1;
  run_rank_contexts(c, ranks, [&](RankContext& ctx) {
    {
      Array<float> v(ctx, MemoryCategory::optimizer_state, 1000);
      EXPECT_EQ(v.data()[999], 0.0f);
      during = ctx.tracker().current_bytes(MemoryCategory::optimizer_state);
    }
    after = ctx.tracker().current_bytes(MemoryCategory::optimizer_state);
  });
  EXPECT_EQ(during, 4000);
  EXPECT_EQ(after, 0);
}

// Laps partition the step: the phases add up to the step time, and a note closes no phase.
TEST(StepTimer, LapsAddUpToTheStepAndNotesCloseNoPhase) {
  const TrainConfig c = context_config(1);
  std::vector<RankResult> ranks(1);
  run_rank_contexts(c, ranks, [&](RankContext& ctx) {
    auto timer = ctx.make_step_timer();
    timer->begin();
    volatile double sink = 0;
    for (int i = 0; i < 200000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    timer->lap(&PhaseTimes::forward);
    const auto noted = timer->note();
    for (int i = 0; i < 200000; ++i) sink = sink + std::sqrt(static_cast<double>(i));
    const auto backward = timer->lap(&PhaseTimes::backward);
    timer->lap(&PhaseTimes::forward);
    const StepRecord rec = timer->end();
    const PhaseTimes& p = rec.phases;
    EXPECT_GT(p.forward, 0.0);
    EXPECT_GT(p.backward, 0.0);
    EXPECT_NEAR(p.forward + p.backward, rec.step_time, 1e-12);
    EXPECT_EQ(p.comm, 0.0);
    EXPECT_LE(timer->seconds(noted, backward), p.backward);
  });
}

// The allreduce step's exposed communication never exceeds its total, on every rank and step,
// with one bucket (ready when backward ends) and with several (overlapping backward); ps
// exposes all of it.
TEST(StepTimes, ExposedCommunicationNeverExceedsTotal) {
  auto data = make_synthetic_dataset(SampleShape{1, 1, 48}, 10, 2048, 5);
  for (double first_bucket_mb : {1.0, 0.001}) {
    TrainConfig c = testing::small_train_config("allreduce", 4, 64);
    c.allreduce.first_bucket_mb = first_bucket_mb;
    c.allreduce.bucket_cap_mb = 0.002;
    const RunResult r = train_allreduce(c, TrainData{data.get(), nullptr});
    for (const RankResult& rank : r.ranks) {
      ASSERT_EQ(rank.steps.size(), 18u);
      for (const StepRecord& s : rank.steps) {
        EXPECT_LE(s.phases.comm_exposed, s.phases.comm) << "rank " << rank.rank << " first bucket " << first_bucket_mb;
        EXPECT_GT(s.phases.comm, 0.0);
        EXPECT_LE(s.phases.comm_exposed, s.step_time);
      }
    }
  }
  const RunResult ps = train_data_parallel(testing::small_train_config("ps", 4, 64), TrainData{data.get(), nullptr});
  for (const StepRecord& s : ps.ranks[0].steps) EXPECT_EQ(s.phases.comm_exposed, s.phases.comm);
}

TEST(RankContext, UnknownDeviceIsAnInputError) {
  try {
    (void)parse_device("tpu");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--device tpu: unknown device (choose cpu or cuda)");
  }
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

int g_pinned_allocs = 0;
void* context_counting_allocate(std::size_t bytes) {
  ++g_pinned_allocs;
  return ::operator new(bytes);
}
void context_counting_release(void* p) noexcept { ::operator delete(p); }

// pin_memory's host half: the batch's first rows copied into buffers from the given memory and
// charged to data_staging; without such memory, the loader's own buffers.
TEST(PinnedBatch, CopiesTheFirstRowsIntoPinnedBuffersOrPassesTheBatchThrough) {
  MemoryTracker loader_tracker, host_tracker;
  Batch batch;
  batch.inputs = TrackedBuffer<float>(loader_tracker, MemoryCategory::data_staging, 4 * 3);
  batch.labels = TrackedBuffer<std::int32_t>(loader_tracker, MemoryCategory::data_staging, 4);
  for (std::size_t i = 0; i < 12; ++i) batch.inputs.data()[i] = static_cast<float>(i);
  for (std::int32_t i = 0; i < 4; ++i) batch.labels.data()[i] = 10 + i;

  const HostMemory counting{&context_counting_allocate, &context_counting_release};
  g_pinned_allocs = 0;
  PinnedBatch pinned(host_tracker, &counting, 4, 3);
  EXPECT_EQ(g_pinned_allocs, 2);
  EXPECT_EQ(host_tracker.current_bytes(MemoryCategory::data_staging), 4 * 3 * 4 + 4 * 4);
  const StagedBatch staged = pinned.stage(batch, 2);
  EXPECT_NE(staged.inputs, batch.inputs.data());
  EXPECT_EQ(std::vector<float>(staged.inputs, staged.inputs + 6), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(std::vector<std::int32_t>(staged.labels, staged.labels + 2), (std::vector<std::int32_t>{10, 11}));

  MemoryTracker none_tracker;
  PinnedBatch pageable(none_tracker, nullptr, 4, 3);
  EXPECT_EQ(pageable.stage(batch, 2).inputs, batch.inputs.data());
  EXPECT_EQ(none_tracker.peak_bytes(), 0);
}

}  // namespace
}  // namespace dpbench
