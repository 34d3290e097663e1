// Per-rank tracking allocator: every buffer a rank holds for training (parameters, gradients,
// optimizer state, activations, communication buffers, data staging) is allocated through a
// MemoryTracker, which keeps current and peak bytes per category and in total. These peaks are
// what dpbench reports as per-rank memory and imbalance. Host memory only; device memory
// accounting plugs in behind the same interface.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace dpbench {

enum class MemoryCategory : int {
  parameters = 0,
  gradients,
  optimizer_state,
  activations,
  comm_buffers,
  data_staging,
};
inline constexpr int kNumMemoryCategories = 6;

// JSON/table name of a category, e.g. "optimizer_state".
std::string_view category_name(MemoryCategory c);

// Bytes by category, indexed by MemoryCategory.
using CategoryBytes = std::array<double, kNumMemoryCategories>;

// One rank's modelled bytes by category (train/memory_model.hpp), and its role ("root",
// "worker", "replica", "server").
struct RankMemory {
  std::string role;
  CategoryBytes bytes{};
  double& operator[](MemoryCategory c) { return bytes[static_cast<std::size_t>(c)]; }
  double total() const;
};

// Counts bytes allocated by one rank. Thread-safe (data-loader workers allocate too).
class MemoryTracker {
 public:
  void on_alloc(MemoryCategory c, std::size_t bytes);
  void on_free(MemoryCategory c, std::size_t bytes);

  std::int64_t current_bytes() const { return total_.load(); }
  std::int64_t peak_bytes() const { return total_peak_.load(); }
  std::int64_t current_bytes(MemoryCategory c) const { return current_[idx(c)].load(); }
  // Highest value this category alone ever reached.
  std::int64_t peak_bytes(MemoryCategory c) const { return peak_[idx(c)].load(); }

 private:
  static int idx(MemoryCategory c) { return static_cast<int>(c); }
  static void raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value);
  std::array<std::atomic<std::int64_t>, kNumMemoryCategories> current_{};
  std::array<std::atomic<std::int64_t>, kNumMemoryCategories> peak_{};
  std::atomic<std::int64_t> total_{0};
  std::atomic<std::int64_t> total_peak_{0};
};

// Where a TrackedBuffer's host memory comes from when not from the default 64-byte aligned
// operator new: e.g. page-locked memory on a CUDA machine (cuda::pinned_memory()). allocate
// returns `bytes` (> 0) or throws; release never throws.
struct HostMemory {
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* ptr) noexcept;
};

// An owning, zero-initialised array of T in host memory (64-byte aligned, or from `memory`, which
// must outlive the buffer) whose bytes are charged to one category of a MemoryTracker for as
// long as it lives. Move-only.
template <typename T>
class TrackedBuffer {
 public:
  TrackedBuffer() = default;
  TrackedBuffer(MemoryTracker& tracker, MemoryCategory category, std::size_t count, const HostMemory* memory = nullptr)
      : tracker_(&tracker), category_(category), count_(count), memory_(memory) {
    if (count_ > 0) {
      data_ = static_cast<T*>(memory_ != nullptr ? memory_->allocate(bytes())
                                                 : ::operator new[](bytes(), std::align_val_t{64}));
      for (std::size_t i = 0; i < count_; ++i) new (data_ + i) T{};
      tracker_->on_alloc(category_, bytes());
    }
  }
  TrackedBuffer(const TrackedBuffer&) = delete;
  TrackedBuffer& operator=(const TrackedBuffer&) = delete;
  TrackedBuffer(TrackedBuffer&& o) noexcept { swap(o); }
  TrackedBuffer& operator=(TrackedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~TrackedBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  T& operator[](std::size_t i) { return data_[i]; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + count_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + count_; }

 private:
  void release() {
    if (data_ != nullptr) {
      tracker_->on_free(category_, bytes());
      if (memory_ != nullptr) {
        memory_->release(data_);
      } else {
        ::operator delete[](data_, std::align_val_t{64});
      }
      data_ = nullptr;
      count_ = 0;
    }
  }
  void swap(TrackedBuffer& o) noexcept {
    std::swap(tracker_, o.tracker_);
    std::swap(category_, o.category_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
    std::swap(memory_, o.memory_);
  }

  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::parameters;
  std::size_t count_ = 0;
  const HostMemory* memory_ = nullptr;  // nullptr: aligned operator new
  T* data_ = nullptr;
};

}  // namespace dpbench
