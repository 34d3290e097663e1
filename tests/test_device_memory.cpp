// Tests of the per-rank GPU memory accounting (cuda/device_memory.hpp) on a device: the caching
// allocator's policy has CPU tests (test_caching_allocator.cpp); these check that on a GPU it
// charges the tracker exactly what the training holds (rounded sizes, per category, peaks),
// reuses freed blocks, gives its cache back to the device, zeroes DeviceBuffers, and reports
// out-of-memory as an Error that names the category. Without a usable GPU (or in a build without
// CUDA) every GPU test is skipped with the reason; the tests that need no GPU run everywhere.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"
#include "cuda/device_memory.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"

namespace dpbench {
namespace {

// EXPECT_PRED2(contains, text, part) prints both on failure.
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Every test here needs a usable CUDA device: SetUp skips the test otherwise, with the reason.
class DeviceMemory : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = probe_cuda();
    if (!probe.usable) GTEST_SKIP() << "no CUDA device: " << probe.reason;
    device_ = probe.gpus.front().index;
    total_memory_ = probe.gpus.front().total_memory_bytes;
  }

  int device_ = 0;
  std::int64_t total_memory_ = 0;
  MemoryTracker tracker_;
};

// Where no device can be used, the allocator and the device view say why in words.
TEST(DeviceMemoryWithoutGpu, AllocatorAndMemInfoThrowTheReason) {
  const CudaProbe probe = probe_cuda();
  if (probe.usable) GTEST_SKIP() << "a CUDA device is usable: the DeviceMemory tests cover it";
  MemoryTracker tracker;
  try {
    DeviceAllocator allocator(0, tracker);
    FAIL() << "DeviceAllocator on a machine without a usable device did not throw";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(), "no usable CUDA device: " + probe.reason);
  }
  EXPECT_THROW(device_mem_info(0), Error);
  EXPECT_EQ(tracker.current_bytes(), 0);
}

TEST_F(DeviceMemory, TrackerChargesRoundedBytesPerCategoryWithPeaks) {
  DeviceAllocator allocator(device_, tracker_);
  void* a = allocator.allocate(1000, MemoryCategory::parameters);  // 1024
  void* b = allocator.allocate(5000, MemoryCategory::gradients);   // 5120
  void* c = allocator.allocate(100, MemoryCategory::parameters);   // 512
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 1536);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::gradients), 5120);
  EXPECT_EQ(tracker_.current_bytes(), 6656);
  EXPECT_EQ(allocator.in_use_bytes(), 6656u);

  allocator.free(a);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::parameters), 1536);
  // Serving from the cache charges the tracker exactly as a fresh cudaMalloc would.
  void* d = allocator.allocate(1024, MemoryCategory::gradients);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::gradients), 6144);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::gradients), 6144);

  allocator.free(b);
  allocator.free(c);
  allocator.free(d);
  allocator.free(nullptr);  // a no-op, as for cudaFree
  EXPECT_EQ(tracker_.current_bytes(), 0);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 0);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::gradients), 0);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::parameters), 1536);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::gradients), 6144);
  EXPECT_EQ(tracker_.peak_bytes(), 6656);
  for (MemoryCategory other : {MemoryCategory::optimizer_state, MemoryCategory::activations,
                               MemoryCategory::comm_buffers, MemoryCategory::data_staging}) {
    EXPECT_EQ(tracker_.peak_bytes(other), 0) << category_name(other);
  }
  EXPECT_EQ(allocator.in_use_bytes(), 0u);
  // What the cache keeps is not charged to anyone.
  EXPECT_EQ(allocator.cached_bytes(), 5120u + 512u + 1024u);  // b, c, d
}

TEST_F(DeviceMemory, ZeroBytesAllocatesNothing) {
  DeviceAllocator allocator(device_, tracker_);
  EXPECT_EQ(allocator.allocate(0, MemoryCategory::activations), nullptr);
  EXPECT_EQ(tracker_.peak_bytes(), 0);
  DeviceBuffer<float> empty(allocator, MemoryCategory::activations, 0);
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_TRUE(empty.empty());
  EXPECT_EQ(tracker_.peak_bytes(), 0);
}

TEST_F(DeviceMemory, FreedBlockIsReusedForTheSameSizeClass) {
  DeviceAllocator allocator(device_, tracker_);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  void* first = allocator.allocate(1000, MemoryCategory::activations);
  allocator.free(first);
  EXPECT_EQ(allocator.cached_bytes(), 1024u);

  // 600 bytes rounds to the same 1024-byte class: the cached block comes back.
  void* second = allocator.allocate(600, MemoryCategory::comm_buffers);
  EXPECT_EQ(second, first);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::comm_buffers), 1024);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::activations), 0);

  // Another class is not served from it.
  allocator.free(second);
  void* other = allocator.allocate(2048, MemoryCategory::activations);
  EXPECT_NE(other, first);
  EXPECT_EQ(allocator.cached_bytes(), 1024u);
  allocator.free(other);
  EXPECT_EQ(allocator.cached_bytes(), 1024u + 2048u);
  EXPECT_EQ(tracker_.current_bytes(), 0);
}

TEST_F(DeviceMemory, ReleaseCacheGivesTheMemoryBackToTheDevice) {
  DeviceAllocator allocator(device_, tracker_);
  // Large blocks: the driver keeps small ones in pools of its own, so only these show in
  // cudaMemGetInfo at once.
  const std::vector<std::size_t> sizes = {64 * kMiB, 64 * kMiB, 96 * kMiB, 32 * kMiB + 512};
  std::vector<void*> blocks;
  for (std::size_t s : sizes) blocks.push_back(allocator.allocate(s, MemoryCategory::activations));
  for (void* p : blocks) allocator.free(p);
  const std::size_t cached = allocator.cached_bytes();
  EXPECT_EQ(cached, 256 * kMiB + 512);
  EXPECT_EQ(tracker_.current_bytes(), 0);

  const DeviceMemInfo before = device_mem_info(device_);
  allocator.release_cache();
  const DeviceMemInfo after = device_mem_info(device_);
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  EXPECT_EQ(after.total_bytes, before.total_bytes);
  const std::int64_t released = after.free_bytes - before.free_bytes;
  EXPECT_GE(static_cast<double>(released), 0.9 * static_cast<double>(cached))
      << "free before " << before.free_bytes << ", after " << after.free_bytes;
  EXPECT_LE(after.used_bytes(), before.used_bytes());

  // The allocator carries on with cudaMalloc.
  void* again = allocator.allocate(64 * kMiB, MemoryCategory::activations);
  EXPECT_NE(again, nullptr);
  allocator.free(again);
}

TEST_F(DeviceMemory, DeviceMemInfoMatchesTheProbe) {
  const DeviceMemInfo info = device_mem_info(device_);
  EXPECT_GT(info.total_bytes, 0);
  EXPECT_GT(info.free_bytes, 0);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  // The same memory as cudaGetDeviceProperties' totalGlobalMem (equal on the drivers we know;
  // allow 1% in case a driver reserves some of it differently).
  EXPECT_NEAR(static_cast<double>(info.total_bytes), static_cast<double>(total_memory_),
              0.01 * static_cast<double>(total_memory_));
  EXPECT_THROW(device_mem_info(-1), Error);
}

TEST_F(DeviceMemory, DeviceBufferIsZeroedEvenOnAReusedBlock) {
  DeviceAllocator allocator(device_, tracker_);
  constexpr std::size_t n = 1000;
  const std::vector<float> dirt(n, 1.5f);
  void* dirty_block = nullptr;
  {
    DeviceBuffer<float> dirty(allocator, MemoryCategory::activations, n);
    dirty.copy_from_host(dirt, nullptr);
    EXPECT_EQ(dirty.to_host(nullptr), dirt);
    dirty_block = dirty.data();
  }
  {
    // cudaMemset, complete on return.
    DeviceBuffer<float> clean(allocator, MemoryCategory::activations, n);
    EXPECT_EQ(static_cast<void*>(clean.data()), dirty_block);  // the cached block came back
    EXPECT_EQ(clean.size(), n);
    EXPECT_EQ(clean.bytes(), n * sizeof(float));
    EXPECT_EQ(clean.to_host(nullptr), std::vector<float>(n, 0.0f));
    clean.copy_from_host(dirt, nullptr);
  }
  {
    // cudaMemsetAsync on a stream (the default stream here, which the copy back follows).
    DeviceBuffer<float> clean(allocator, MemoryCategory::activations, n, nullptr);
    EXPECT_EQ(static_cast<void*>(clean.data()), dirty_block);
    EXPECT_EQ(clean.to_host(nullptr), std::vector<float>(n, 0.0f));
  }
  EXPECT_EQ(tracker_.current_bytes(), 0);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::activations),
            static_cast<std::int64_t>(DeviceAllocator::round_size(n * sizeof(float))));
}

TEST_F(DeviceMemory, DeviceBufferMovesOwnershipAndCharges) {
  DeviceAllocator allocator(device_, tracker_);
  std::vector<int> pattern(100);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<int>(i * 7 + 1);
  {
    DeviceBuffer<int> a(allocator, MemoryCategory::parameters, 100);  // 400 -> 512
    a.copy_from_host(pattern, nullptr);
    int* block = a.data();
    EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);

    DeviceBuffer<int> b(std::move(a));
    EXPECT_EQ(a.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_EQ(a.size(), 0u);       // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.data(), block);
    EXPECT_EQ(b.size(), 100u);
    EXPECT_EQ(b.category(), MemoryCategory::parameters);
    EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);

    DeviceBuffer<int> c(allocator, MemoryCategory::parameters, 300);  // 1200 -> 1536
    EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 2048);
    c = std::move(b);  // c's own block goes back to the cache
    EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);
    EXPECT_EQ(c.data(), block);
    EXPECT_EQ(c.size(), 100u);
    EXPECT_EQ(c.to_host(nullptr), pattern);
    EXPECT_EQ(allocator.cached_bytes(), 1536u);
    EXPECT_THROW(c.copy_to_host(pattern.data(), 101, nullptr), Error);
  }
  EXPECT_EQ(tracker_.current_bytes(), 0);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::parameters), 2048);
  EXPECT_EQ(allocator.in_use_bytes(), 0u);
}

TEST_F(DeviceMemory, OutOfMemoryNamesTheCategoryAndLeavesTheAllocatorUsable) {
  DeviceAllocator allocator(device_, tracker_);
  void* held = allocator.allocate(4096, MemoryCategory::parameters);
  void* spare = allocator.allocate(kMiB, MemoryCategory::activations);
  allocator.free(spare);
  ASSERT_EQ(allocator.cached_bytes(), kMiB);

  const std::size_t absurd = std::size_t{1} << 50;  // 1 PiB
  try {
    allocator.allocate(absurd, MemoryCategory::activations);
    FAIL() << "allocating 1 PiB did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_PRED2(contains, what, "out of memory allocating 1125899906842624 bytes for activations");
    // The cache was given back before the second try.
    EXPECT_PRED2(contains, what, "(4096 bytes in use, 0 cached)");
    EXPECT_PRED2(contains, what, "device " + std::to_string(device_) + ": ");
  }
  EXPECT_EQ(allocator.cached_bytes(), 0u);
  // Nothing was charged for the failed request.
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::activations), 0);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::activations), static_cast<std::int64_t>(kMiB));
  EXPECT_EQ(tracker_.current_bytes(), 4096);

  // The same through DeviceBuffer, which names its category too.
  try {
    DeviceBuffer<double> huge(allocator, MemoryCategory::optimizer_state, absurd / sizeof(double));
    FAIL() << "a 1 PiB DeviceBuffer did not throw";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(), "for optimizer_state");
  }

  // Still works afterwards.
  DeviceBuffer<float> after(allocator, MemoryCategory::activations, 1000);
  EXPECT_EQ(after.to_host(nullptr), std::vector<float>(1000, 0.0f));
  allocator.free(held);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 0);
}

TEST_F(DeviceMemory, FreeOfAForeignPointerThrows) {
  DeviceAllocator allocator(device_, tracker_);
  void* p = allocator.allocate(512, MemoryCategory::gradients);
  allocator.free(p);
  EXPECT_THROW(allocator.free(p), Error);  // freed twice
  int host = 0;
  EXPECT_THROW(allocator.free(&host), Error);
  EXPECT_EQ(tracker_.current_bytes(), 0);
}

TEST_F(DeviceMemory, ConcurrentRanksThreadsBalanceTheTracker) {
  DeviceAllocator allocator(device_, tracker_);
  constexpr int kThreads = 8;
  constexpr int kIterations = 200;
  const std::size_t sizes[] = {1000, 5000, 70000, 512};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        std::vector<void*> held;
        for (int i = 0; i < kIterations; ++i) {
          const auto category = static_cast<MemoryCategory>((t + i) % kNumMemoryCategories);
          held.push_back(allocator.allocate(sizes[(t + i) % 4], category));
          if (held.size() > 3) {
            allocator.free(held.front());
            held.erase(held.begin());
          }
        }
        for (void* p : held) allocator.free(p);
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(allocator.in_use_bytes(), 0u);
  EXPECT_EQ(tracker_.current_bytes(), 0);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    EXPECT_EQ(tracker_.current_bytes(static_cast<MemoryCategory>(c)), 0);
  }
  // At most 4 blocks per thread at once, each at most 70144 bytes.
  EXPECT_GT(tracker_.peak_bytes(), 0);
  EXPECT_LE(tracker_.peak_bytes(), static_cast<std::int64_t>(kThreads * 4 * 70144));
  EXPECT_GT(allocator.cached_bytes(), 0u);
}

}  // namespace
}  // namespace dpbench
