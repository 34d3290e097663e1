// Per-rank GPU memory accounting. A DeviceAllocator is a small caching allocator for one device
// (PyTorch's CUDACachingAllocator, simplified): sizes are rounded up to 512 bytes, a freed block
// goes to a free list keyed by its rounded size and is handed out again for the next request of
// that size, and cudaMalloc is called only when no cached block fits. Every block a rank holds
// is charged, at its rounded size, to one category of the rank's MemoryTracker from allocate()
// to free(), exactly as host TrackedBuffers are, so the per-category peaks in the results mean
// the same on both devices: what the training holds, not what the cache keeps in reserve.
// device_mem_info() is the device's own view (cudaMemGetInfo), which also sees the cache, the
// CUDA context, cuBLAS workspaces and NCCL's buffers.
//
// Blocks are not stream-ordered: free() a block only when the device work that uses it has
// finished, or when everything that will reuse it runs on the same stream after that work.
//
// No CUDA headers here: the code that calls CUDA lives in cuda/device_memory.cu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"

namespace dpbench {

class DeviceAllocator {
 public:
  // Every block's size is a multiple of this many bytes.
  static constexpr std::size_t kRoundBytes = 512;

  // 0 -> 0, 1 -> 512, 512 -> 512, 513 -> 1024: the size a request is served and charged at.
  // Sizes within kRoundBytes of SIZE_MAX cannot be rounded; they are returned unchanged and
  // allocate() reports them as out of memory.
  static constexpr std::size_t round_size(std::size_t bytes) {
    if (bytes > SIZE_MAX - (kRoundBytes - 1)) return bytes;
    return (bytes + kRoundBytes - 1) / kRoundBytes * kRoundBytes;
  }

  // device: a CUDA device ordinal. Throws Error with the reason in words when that device
  // cannot be used (no driver, no such device, a build without CUDA). The tracker must outlive
  // the allocator.
  DeviceAllocator(int device, MemoryTracker& tracker);
  // cudaFree's every block, cached or still in use (blocks still in use are credited back to
  // the tracker). Errors are ignored: this may run while the process shuts CUDA down.
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // A block of at least `bytes` on device(), charged to `category`. A cached block of the same
  // rounded size is reused; otherwise cudaMalloc. When cudaMalloc runs out of memory the cache
  // is released and cudaMalloc tried once more; if that fails too, throws
  // Error("device D: out of memory allocating N bytes for <category> (M bytes in use,
  // K cached) ..."), with nothing charged and the allocator still usable. Other CUDA failures
  // throw Error naming the call. bytes == 0 returns nullptr and charges nothing.
  // The memory is not initialised.
  void* allocate(std::size_t bytes, MemoryCategory category);

  // Returns a block from allocate() to the cache and credits its category. nullptr is a no-op;
  // a pointer this allocator did not hand out (or already freed) throws Error.
  void free(void* ptr);

  // Bytes (rounded) held in the cache, ready for reuse.
  std::size_t cached_bytes() const;
  // Bytes (rounded) handed out and not yet freed.
  std::size_t in_use_bytes() const;
  // cudaFree's every cached block (the device's free memory rises by about cached_bytes()).
  void release_cache();

  int device() const { return device_; }
  MemoryTracker& tracker() const { return *tracker_; }

 private:
  struct Block {
    std::size_t bytes = 0;  // rounded
    MemoryCategory category = MemoryCategory::parameters;
  };

  void release_cache_locked();  // mutex_ held

  int device_ = 0;
  MemoryTracker* tracker_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> in_use_;                   // guarded by mutex_
  std::unordered_map<std::size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
  std::size_t in_use_bytes_ = 0;                              // guarded by mutex_
  std::size_t cached_bytes_ = 0;                              // guarded by mutex_
};

// The CUDA work behind DeviceBuffer<T>, outside the template so that this header needs no CUDA.
namespace device_memory_detail {
// Zeroes `bytes` at ptr on `device`: with cudaMemsetAsync on `stream` (a cudaStream_t; nullptr
// is the legacy default stream) when async, otherwise with cudaMemset, complete on return.
void zero(int device, void* ptr, std::size_t bytes, void* stream, bool async);
// Synchronous copies between host memory and device memory on `device` (cudaMemcpy).
void copy_to_device(int device, void* dst, const void* src, std::size_t bytes);
void copy_to_host(int device, void* dst, const void* src, std::size_t bytes);
}  // namespace device_memory_detail

// An owning, zero-initialised array of `count` T in device memory from a DeviceAllocator, charged
// to one category of the allocator's tracker for as long as it lives: TrackedBuffer<T> on a GPU.
// Move-only. T must be trivially copyable (the memory is zeroed and copied bytewise).
template <typename T>
class DeviceBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "DeviceBuffer holds trivially copyable types");

 public:
  DeviceBuffer() = default;
  // Zeroed with cudaMemset; the zeros are in place when the constructor returns.
  DeviceBuffer(DeviceAllocator& allocator, MemoryCategory category, std::size_t count)
      : DeviceBuffer(allocator, category, count, nullptr, false) {}
  // Zeroed with cudaMemsetAsync on `stream` (a cudaStream_t): ordered before later work on that
  // stream only.
  DeviceBuffer(DeviceAllocator& allocator, MemoryCategory category, std::size_t count,
               void* stream)
      : DeviceBuffer(allocator, category, count, stream, true) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~DeviceBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  // count * sizeof(T); the tracker is charged DeviceAllocator::round_size(bytes()).
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  MemoryCategory category() const { return category_; }
  DeviceAllocator* allocator() const { return allocator_; }

  // Synchronous copies of the first `count` elements (count <= size()).
  void copy_from_host(const T* src, std::size_t count) {
    if (count > 0) device_memory_detail::copy_to_device(allocator_->device(), data_, src, checked_bytes(count));
  }
  void copy_to_host(T* dst, std::size_t count) const {
    if (count > 0) device_memory_detail::copy_to_host(allocator_->device(), dst, data_, checked_bytes(count));
  }
  void copy_from_host(const std::vector<T>& src) { copy_from_host(src.data(), src.size()); }
  std::vector<T> to_host() const {
    std::vector<T> out(count_);
    copy_to_host(out.data(), count_);
    return out;
  }

 private:
  DeviceBuffer(DeviceAllocator& allocator, MemoryCategory category, std::size_t count,
               void* stream, bool async)
      : allocator_(&allocator), category_(category) {
    if (count == 0) return;
    if (count > SIZE_MAX / sizeof(T)) {
      throw Error("device " + std::to_string(allocator.device()) + ": out of memory allocating " +
                  std::to_string(count) + " elements of " + std::to_string(sizeof(T)) +
                  " bytes for " + std::string(category_name(category)) + " (size overflows)");
    }
    data_ = static_cast<T*>(allocator.allocate(count * sizeof(T), category));
    count_ = count;
    try {
      device_memory_detail::zero(allocator.device(), data_, bytes(), stream, async);
    } catch (...) {
      release();
      throw;
    }
  }

  std::size_t checked_bytes(std::size_t count) const {
    if (count > count_) {
      throw Error("DeviceBuffer: a copy of " + std::to_string(count) +
                  " elements does not fit a buffer of " + std::to_string(count_));
    }
    return count * sizeof(T);
  }

  void release() noexcept {
    if (data_ != nullptr) {
      allocator_->free(data_);
      data_ = nullptr;
      count_ = 0;
    }
  }
  void swap(DeviceBuffer& o) noexcept {
    std::swap(allocator_, o.allocator_);
    std::swap(category_, o.category_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }

  DeviceAllocator* allocator_ = nullptr;
  MemoryCategory category_ = MemoryCategory::parameters;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

// The device's own view of its memory: cudaMemGetInfo on `device`.
struct DeviceMemInfo {
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
  std::int64_t used_bytes() const { return total_bytes - free_bytes; }
};

// cudaSetDevice(device), cudaMemGetInfo, then the calling thread's previous device again.
// Throws Error with the reason in words when CUDA fails (or the build has no CUDA).
DeviceMemInfo device_mem_info(int device);

}  // namespace dpbench
