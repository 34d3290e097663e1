// Tests of DDP-style bucket assignment and in-order bucket launch.
#include <vector>

#include <gtest/gtest.h>

#include "train/buckets.hpp"
#include "core/error.hpp"

namespace dpbench {
namespace {

std::vector<ParamView> views(const std::vector<std::size_t>& sizes) {
  std::vector<ParamView> v;
  std::size_t off = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    v.push_back({"p" + std::to_string(i), {sizes[i]}, off, sizes[i]});
    off += sizes[i];
  }
  return v;
}

TEST(Buckets, ReverseOrderWithOneMiBFirstBucketThenCap) {
  constexpr std::size_t kMiB = 1024 * 1024 / sizeof(float);  // floats per MiB
  // Parameters 0..4; backward produces 4, 3, 2, 1, 0.
  const auto params = views({3 * kMiB, kMiB, kMiB / 2, 3 * kMiB / 4, kMiB});
  const auto buckets = assign_buckets(params, sizeof(float), 1.0, 2.0);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<std::size_t>{4}));        // 1 MiB reaches the first cap
  EXPECT_EQ(buckets[1].params, (std::vector<std::size_t>{3, 2, 1}));  // 2.25 MiB >= 2: closed
  EXPECT_EQ(buckets[2].params, (std::vector<std::size_t>{0}));
  // Buckets are contiguous ranges of the flat buffer and cover it exactly once.
  EXPECT_EQ(buckets[0].offset, params[4].offset);
  EXPECT_EQ(buckets[1].offset, params[1].offset);
  EXPECT_EQ(buckets[1].size, kMiB + kMiB / 2 + 3 * kMiB / 4);
  EXPECT_EQ(buckets[2].offset, 0u);
  std::size_t total = 0;
  for (const auto& b : buckets) total += b.size;
  EXPECT_EQ(total, params.back().offset + params.back().size);
}

TEST(Buckets, DefaultCapPutsSmallModelInOneBucket) {
  const auto buckets = assign_buckets(views({100, 10, 50, 5}), sizeof(float), 1.0, 25.0);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].params, (std::vector<std::size_t>{3, 2, 1, 0}));
  EXPECT_EQ(buckets[0].offset, 0u);
  EXPECT_EQ(buckets[0].size, 165u);
}

TEST(Buckets, RejectsNonPositiveCap) { EXPECT_THROW(assign_buckets(views({1}), 4, 1.0, 0.0), InputError); }

TEST(BucketLauncher, LaunchesInBucketOrderOnlyWhenComplete) {
  const auto params = views({4, 4, 4, 4});
  // Tiny caps (bytes) so every parameter is its own bucket except where noted.
  const auto buckets = assign_buckets(params, sizeof(float), 16.0 / (1024 * 1024), 32.0 / (1024 * 1024));
  ASSERT_EQ(buckets.size(), 3u);  // {3}, {2,1}, {0}
  std::vector<std::size_t> launched;
  BucketLauncher launcher(buckets, params.size(), [&](std::size_t b) { launched.push_back(b); });
  launcher.mark_ready(3);
  EXPECT_EQ(launched, (std::vector<std::size_t>{0}));
  launcher.mark_ready(1);
  EXPECT_EQ(launched.size(), 1u);  // bucket 1 still waits for parameter 2
  launcher.mark_ready(0);
  EXPECT_EQ(launched.size(), 1u);  // bucket 2 is complete but must wait for bucket 1
  launcher.mark_ready(2);
  EXPECT_EQ(launched, (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_TRUE(launcher.all_launched());
  launcher.reset();
  EXPECT_FALSE(launcher.all_launched());
}

}  // namespace
}  // namespace dpbench
