// Tests of the caching allocator written once for every device (core/caching_allocator.hpp), on
// a host backend with a byte budget: the policy the GPU's DeviceAllocator runs (rounding, block
// reuse, tracker charges at the rounded size, the cache released and the request retried when
// the backend runs out, errors for double frees and overflowing sizes) and CachedBuffer<T>.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include <gtest/gtest.h>

#include "core/caching_allocator.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"

namespace dpbench {
namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Host memory with a budget of `capacity` bytes: raw_alloc returns nullptr past it, as
// cudaMalloc reports cudaErrorMemoryAllocation. Counts its calls; `live` is shared so a test can
// read it after the allocator (which owns the backend) is gone.
struct HostBackendState {
  std::size_t capacity = 0;
  std::size_t used = 0;
  int allocs = 0, frees = 0, failed_allocs = 0;
  std::set<void*> live;
  std::mutex zero_mutex;            // zero() runs outside the allocator's lock, from any thread
  std::string last_zero;            // "sync" or "async" of the last zero(); guarded by zero_mutex
  std::vector<void*> copy_streams;  // the stream of each copy, in order (copies from one thread)
};

class HostBackend final : public MemoryBackend {
 public:
  explicit HostBackend(std::shared_ptr<HostBackendState> s) : s_(std::move(s)) {}
  std::string name() const override { return "host test"; }
  void* raw_alloc(std::size_t bytes) override {
    EXPECT_EQ(bytes % CachingAllocator::kRoundBytes, 0u);
    if (s_->used + bytes > s_->capacity) {
      ++s_->failed_allocs;
      return nullptr;
    }
    void* p = ::operator new(bytes);
    std::memset(p, 0xAB, bytes);  // never zero by accident
    s_->used += bytes;
    ++s_->allocs;
    s_->live.insert(p);
    sizes_[p] = bytes;
    return p;
  }
  void raw_free(void* p) override {
    ASSERT_EQ(s_->live.erase(p), 1u) << "raw_free of a block the backend did not hand out";
    s_->used -= sizes_.at(p);
    sizes_.erase(p);
    ++s_->frees;
    ::operator delete(p);
  }
  std::string memory_view() noexcept override {
    return "; the host test has " + std::to_string(s_->capacity - s_->used) + " bytes free";
  }
  void zero(void* p, std::size_t bytes, void*, bool async) override {
    std::memset(p, 0, bytes);
    const std::lock_guard<std::mutex> lock(s_->zero_mutex);
    s_->last_zero = async ? "async" : "sync";
  }
  void copy_from_host(void* dst, const void* src, std::size_t bytes, void* stream) override {
    std::memcpy(dst, src, bytes);
    s_->copy_streams.push_back(stream);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) override {
    std::memcpy(dst, src, bytes);
    s_->copy_streams.push_back(stream);
  }

 private:
  std::shared_ptr<HostBackendState> s_;
  std::unordered_map<void*, std::size_t> sizes_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  std::unique_ptr<CachingAllocator> make(std::size_t capacity) {
    state_->capacity = capacity;
    return std::make_unique<CachingAllocator>(std::make_unique<HostBackend>(state_), tracker_);
  }
  std::shared_ptr<HostBackendState> state_ = std::make_shared<HostBackendState>();
  MemoryTracker tracker_;
};

TEST(CachingAllocatorRounding, RoundsUpToMultiplesOf512Bytes) {
  EXPECT_EQ(CachingAllocator::round_size(0), 0u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(511), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(5000), 5120u);
  EXPECT_EQ(CachingAllocator::round_size(std::size_t{1} << 50), std::size_t{1} << 50);
  EXPECT_EQ(CachingAllocator::round_size(SIZE_MAX - 3), SIZE_MAX - 3);  // cannot round: unchanged
}

TEST_F(CachingAllocatorTest, ChargesRoundedBytesPerCategoryWithPeaks) {
  auto a = make(1 << 20);
  void* p = a->allocate(1000, MemoryCategory::parameters);  // 1024
  void* g = a->allocate(5000, MemoryCategory::gradients);   // 5120
  void* q = a->allocate(100, MemoryCategory::parameters);   // 512
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 1536);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::gradients), 5120);
  EXPECT_EQ(a->in_use_bytes(), 6656u);
  a->free(p);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);
  EXPECT_EQ(tracker_.peak_bytes(MemoryCategory::parameters), 1536);
  EXPECT_EQ(a->cached_bytes(), 1024u);  // the cache is not charged
  a->free(g);
  a->free(q);
  EXPECT_EQ(tracker_.current_bytes(), 0);
  EXPECT_EQ(tracker_.peak_bytes(), 6656);
  EXPECT_EQ(a->allocate(0, MemoryCategory::activations), nullptr);
  EXPECT_EQ(tracker_.current_bytes(), 0);
}

TEST_F(CachingAllocatorTest, FreedBlockIsReusedForTheSameRoundedSizeOnly) {
  auto a = make(1 << 20);
  void* p = a->allocate(600, MemoryCategory::activations);  // 1024
  a->free(p);
  EXPECT_EQ(a->allocate(1000, MemoryCategory::gradients), p);  // same class, other category
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::gradients), 1024);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::activations), 0);
  void* other = a->allocate(1100, MemoryCategory::gradients);  // 1536: a new block
  EXPECT_NE(other, p);
  EXPECT_EQ(state_->allocs, 2);
}

TEST_F(CachingAllocatorTest, OutOfMemoryReleasesTheCacheAndRetriesOnce) {
  auto a = make(4096);
  void* spare = a->allocate(2048, MemoryCategory::activations);
  a->free(spare);  // 2048 cached
  ASSERT_EQ(a->cached_bytes(), 2048u);
  // 3072 does not fit next to the cached 2048: the cache goes back, the retry succeeds.
  void* big = a->allocate(3072, MemoryCategory::parameters);
  EXPECT_NE(big, nullptr);
  EXPECT_EQ(state_->failed_allocs, 1);
  EXPECT_EQ(state_->frees, 1);
  EXPECT_EQ(a->cached_bytes(), 0u);
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 3072);
  a->free(big);
}

TEST_F(CachingAllocatorTest, OutOfMemoryAfterTheRetryNamesTheCategoryAndChargesNothing) {
  auto a = make(4096);
  void* held = a->allocate(1024, MemoryCategory::parameters);
  a->free(a->allocate(512, MemoryCategory::activations));  // 512 cached
  try {
    a->allocate(8192, MemoryCategory::optimizer_state);
    FAIL() << "allocating past the backend's capacity did not throw";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(),
                 "host test: out of memory allocating 8192 bytes for optimizer_state (1024 bytes in use, 0 cached)"
                 "; the host test has 3072 bytes free");
  }
  EXPECT_EQ(state_->failed_allocs, 2);  // the first try and the one retry
  EXPECT_EQ(tracker_.current_bytes(MemoryCategory::optimizer_state), 0);
  EXPECT_EQ(tracker_.current_bytes(), 1024);
  // Still usable.
  void* after = a->allocate(2048, MemoryCategory::activations);
  EXPECT_NE(after, nullptr);
  a->free(after);
  a->free(held);
}

TEST_F(CachingAllocatorTest, SizesTooCloseToSizeMaxAreOutOfMemoryWithoutAskingTheBackend) {
  auto a = make(4096);
  EXPECT_THROW(a->allocate(SIZE_MAX - 3, MemoryCategory::activations), Error);
  EXPECT_EQ(state_->failed_allocs, 0);
  EXPECT_EQ(state_->allocs, 0);
}

TEST_F(CachingAllocatorTest, DoubleFreeAndForeignPointersThrow) {
  auto a = make(4096);
  void* p = a->allocate(100, MemoryCategory::parameters);
  a->free(p);
  try {
    a->free(p);
    FAIL() << "a double free did not throw";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(), "which this allocator did not hand out (or which was freed already)");
  }
  int local = 0;
  EXPECT_THROW(a->free(&local), Error);
  a->free(nullptr);  // no-op
  EXPECT_EQ(tracker_.current_bytes(), 0);
}

TEST_F(CachingAllocatorTest, ReleaseCacheAndDestructionGiveEveryBlockBack) {
  auto a = make(1 << 20);
  void* cached = a->allocate(4096, MemoryCategory::activations);
  a->free(cached);
  a->allocate(512, MemoryCategory::parameters);  // still in use at destruction
  a->release_cache();
  EXPECT_EQ(a->cached_bytes(), 0u);
  EXPECT_EQ(state_->live.size(), 1u);
  a.reset();
  EXPECT_TRUE(state_->live.empty());
  EXPECT_EQ(tracker_.current_bytes(), 0);  // blocks in use are credited back
}

TEST_F(CachingAllocatorTest, CachedBufferIsZeroedEvenOnAReusedBlockAndMoves) {
  auto a = make(1 << 20);
  std::vector<int> pattern(100);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<int>(i * 7 + 1);
  void* block = nullptr;
  {
    CachedBuffer<int> dirty(*a, MemoryCategory::parameters, 100);  // 400 -> 512
    EXPECT_EQ(state_->last_zero, "sync");
    EXPECT_EQ(dirty.to_host(nullptr), std::vector<int>(100, 0));
    dirty.copy_from_host(pattern, nullptr);
    block = dirty.data();
    CachedBuffer<int> moved(std::move(dirty));
    EXPECT_EQ(dirty.data(), nullptr);  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(moved.to_host(nullptr), pattern);
    EXPECT_EQ(tracker_.current_bytes(MemoryCategory::parameters), 512);
    EXPECT_THROW(moved.copy_to_host(pattern.data(), 101, nullptr), Error);
  }
  EXPECT_EQ(tracker_.current_bytes(), 0);
  CachedBuffer<int> clean(*a, MemoryCategory::activations, 100, nullptr);
  EXPECT_EQ(state_->last_zero, "async");
  EXPECT_EQ(static_cast<void*>(clean.data()), block);  // the cached block came back, zeroed
  EXPECT_EQ(clean.to_host(nullptr), std::vector<int>(100, 0));
  EXPECT_EQ(clean.bytes(), 400u);
}

TEST_F(CachingAllocatorTest, CachedBufferCopiesRunOnTheCallersStream) {
  // Each copy reaches the backend with the stream it was given (no copy on an implied stream).
  auto a = make(1 << 20);
  int stream_a = 0, stream_b = 0;  // stand-ins for two stream handles
  CachedBuffer<int> buf(*a, MemoryCategory::activations, 10);
  const std::vector<int> values(10, 3);
  buf.copy_from_host(values, &stream_a);
  EXPECT_EQ(buf.to_host(&stream_b), values);
  std::vector<int> part(4);
  buf.copy_to_host(part.data(), part.size(), &stream_a);
  buf.copy_to_host(part.data(), 0, &stream_b);  // nothing to copy: no backend call
  EXPECT_EQ(state_->copy_streams, (std::vector<void*>{&stream_a, &stream_b, &stream_a}));
}

TEST_F(CachingAllocatorTest, CachedBufferWhoseSizeOverflowsIsOutOfMemoryForItsCategory) {
  auto a = make(4096);
  try {
    CachedBuffer<double> huge(*a, MemoryCategory::optimizer_state, SIZE_MAX / 4);
    FAIL() << "an overflowing CachedBuffer did not throw";
  } catch (const Error& e) {
    EXPECT_PRED2(contains, e.what(), "for optimizer_state (size overflows)");
  }
  EXPECT_EQ(state_->allocs, 0);
}

TEST_F(CachingAllocatorTest, ConcurrentThreadsBalanceTheTracker) {
  auto a = make(std::size_t{64} << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        CachedBuffer<float> b(*a, MemoryCategory::activations, static_cast<std::size_t>(100 + 37 * ((i + t) % 5)));
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(tracker_.current_bytes(), 0);
  EXPECT_EQ(a->in_use_bytes(), 0u);
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

// Counts the calls of a HostMemory (the seam cuda::pinned_memory() plugs page-locked memory in).
int g_host_allocs = 0, g_host_releases = 0;
void* counting_allocate(std::size_t bytes) {
  ++g_host_allocs;
  return std::memset(::operator new(bytes), 0xAB, bytes);
}
void counting_release(void* p) noexcept {
  ++g_host_releases;
  ::operator delete(p);
}

TEST(TrackedBufferMemory, ComesFromTheGivenHostMemoryZeroedAndGoesBackOnceAfterMoves) {
  static const HostMemory memory{&counting_allocate, &counting_release};
  g_host_allocs = g_host_releases = 0;
  MemoryTracker tracker;
  {
    TrackedBuffer<float> a(tracker, MemoryCategory::data_staging, 10, &memory);
    EXPECT_EQ(g_host_allocs, 1);
    EXPECT_EQ(std::vector<float>(a.begin(), a.end()), std::vector<float>(10, 0.0f));
    EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 40);
    TrackedBuffer<float> b;
    b = std::move(a);
    TrackedBuffer<float> c(tracker, MemoryCategory::data_staging, 3);  // default memory
    c = std::move(b);
    EXPECT_EQ(g_host_releases, 0);  // c's own aligned block went back to operator delete
    EXPECT_EQ(tracker.current_bytes(), 40);
  }
  EXPECT_EQ(g_host_releases, 1);
  EXPECT_EQ(tracker.current_bytes(), 0);
}

}  // namespace
}  // namespace dpbench
