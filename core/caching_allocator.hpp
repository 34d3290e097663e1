// A caching allocator over a raw memory backend (PyTorch's CUDACachingAllocator, simplified),
// written once for every device so that the CPU tests run the logic a GPU relies on: sizes are
// rounded up to 512 bytes, a freed block goes to a free list keyed by its rounded size and is
// handed out again for the next request of that size, and the backend is asked for memory only
// when no cached block fits; when it has none left, the cache is given back and the request
// tried once more. Every block a rank holds is charged, at its rounded size, to one category of
// the rank's MemoryTracker from allocate() to free(), exactly as host TrackedBuffers are, so the
// per-category peaks in the results mean the same on every device: what the training holds, not
// what the cache keeps in reserve. CachedBuffer<T> is the owning array over it.
// The CUDA backend (cudaMalloc, cudaMemset, cudaMemcpy) is cuda/device_memory.cu; the tests use a
// host backend. Not for: stream-ordered reuse. free() a block only when the device work that
// uses it has finished, or when everything that will reuse it runs on the same stream after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/memory.hpp"

namespace dpbench {

// The raw memory of one device: what CachingAllocator calls when its cache cannot serve.
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  // Names the memory in messages, e.g. "device 0".
  virtual std::string name() const = 0;
  // A block of `bytes` (> 0, a multiple of CachingAllocator::kRoundBytes), or nullptr when the
  // backend is out of memory. Other failures throw Error naming the call.
  virtual void* raw_alloc(std::size_t bytes) = 0;
  // Returns a block from raw_alloc. Throws Error on failure.
  virtual void raw_free(void* ptr) = 0;
  // Appended to out-of-memory messages: the backend's own view ("; the device has F of T bytes
  // free"), or "". Never throws.
  virtual std::string memory_view() noexcept { return ""; }

  // The work behind CachedBuffer<T>. zero: `bytes` at ptr set to 0, asynchronously on `stream`
  // (a device stream handle; nullptr the default one) when async, otherwise in place on return.
  virtual void zero(void* ptr, std::size_t bytes, void* stream, bool async) = 0;
  // Copies between host memory and this backend's memory on `stream` (a device stream handle;
  // nullptr the default one), after the work enqueued on it before; complete on return.
  virtual void copy_from_host(void* dst, const void* host_src, std::size_t bytes, void* stream) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, std::size_t bytes, void* stream) = 0;
};

class CachingAllocator {
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

  // The tracker must outlive the allocator.
  CachingAllocator(std::unique_ptr<MemoryBackend> backend, MemoryTracker& tracker);
  // Frees every block, cached or still in use (blocks still in use are credited back to the
  // tracker). Backend errors are ignored: this may run while the process shuts the device down.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes`, charged to `category`. A cached block of the same rounded size
  // is reused; otherwise raw_alloc. When the backend is out of memory the cache is released and
  // raw_alloc tried once more; if that fails too, throws Error("<name>: out of memory allocating
  // N bytes for <category> (M bytes in use, K cached)<memory_view>"), with nothing charged and
  // the allocator still usable. Other backend failures throw its Error. bytes == 0 returns
  // nullptr and charges nothing. The memory is not initialised.
  void* allocate(std::size_t bytes, MemoryCategory category);
  // allocate(), then the block zeroed by the backend: enqueued on `stream` when async, in place
  // on return otherwise. If zeroing fails, the block is freed and the error rethrown.
  void* allocate_zeroed(std::size_t bytes, MemoryCategory category, void* stream, bool async);

  // Returns a block from allocate() to the cache and credits its category. nullptr is a no-op;
  // a pointer this allocator did not hand out (or already freed) throws Error.
  void free(void* ptr);
  // free() where failing is not an option (destructors, release hooks): a pointer this
  // allocator did not hand out is ignored. Never throws.
  void release(void* ptr) noexcept;

  // Bytes (rounded) held in the cache, ready for reuse.
  std::size_t cached_bytes() const;
  // Bytes (rounded) handed out and not yet freed.
  std::size_t in_use_bytes() const;
  // raw_free's every cached block; throws the first backend failure after freeing the rest.
  void release_cache();

  MemoryTracker& tracker() const { return *tracker_; }
  MemoryBackend& backend() const { return *backend_; }

 private:
  struct Block {
    std::size_t bytes = 0;  // rounded
    MemoryCategory category = MemoryCategory::parameters;
  };

  void release_cache_locked();  // mutex_ held

  std::unique_ptr<MemoryBackend> backend_;
  MemoryTracker* tracker_ = nullptr;
  mutable std::mutex mutex_;
  std::unordered_map<void*, Block> in_use_;                    // guarded by mutex_
  std::unordered_map<std::size_t, std::vector<void*>> cache_;  // rounded size -> free blocks
  std::size_t in_use_bytes_ = 0;                               // guarded by mutex_
  std::size_t cached_bytes_ = 0;                               // guarded by mutex_
};

// An owning, zero-initialised array of `count` T from a CachingAllocator, charged to one
// category of the allocator's tracker for as long as it lives: TrackedBuffer<T> on a device.
// Move-only. T must be trivially copyable (the memory is zeroed and copied bytewise).
template <typename T>
class CachedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "CachedBuffer holds trivially copyable types");

 public:
  CachedBuffer() = default;
  // Zeroed synchronously; the zeros are in place when the constructor returns.
  CachedBuffer(CachingAllocator& allocator, MemoryCategory category, std::size_t count)
      : CachedBuffer(allocator, category, count, nullptr, false) {}
  // Zeroed asynchronously on `stream` (a device stream handle): ordered before later work on
  // that stream only.
  CachedBuffer(CachingAllocator& allocator, MemoryCategory category, std::size_t count, void* stream)
      : CachedBuffer(allocator, category, count, stream, true) {}
  CachedBuffer(const CachedBuffer&) = delete;
  CachedBuffer& operator=(const CachedBuffer&) = delete;
  CachedBuffer(CachedBuffer&& o) noexcept { swap(o); }
  CachedBuffer& operator=(CachedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~CachedBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  // count * sizeof(T); the tracker is charged CachingAllocator::round_size(bytes()).
  std::size_t bytes() const { return count_ * sizeof(T); }
  bool empty() const { return count_ == 0; }
  MemoryCategory category() const { return category_; }

  // Copies of the first `count` elements (count <= size(), else Error) on `stream` (a device
  // stream handle; nullptr the default one), ordered after the work enqueued on it before and
  // complete on return.
  void copy_from_host(const T* src, std::size_t count, void* stream) {
    if (count > 0) allocator_->backend().copy_from_host(data_, src, checked_bytes(count), stream);
  }
  void copy_to_host(T* dst, std::size_t count, void* stream) const {
    if (count > 0) allocator_->backend().copy_to_host(dst, data_, checked_bytes(count), stream);
  }
  void copy_from_host(const std::vector<T>& src, void* stream) { copy_from_host(src.data(), src.size(), stream); }
  std::vector<T> to_host(void* stream) const {
    std::vector<T> out(count_);
    copy_to_host(out.data(), count_, stream);
    return out;
  }

 private:
  // Throws the allocator's out-of-memory Error (also when count * sizeof(T) overflows).
  CachedBuffer(CachingAllocator& allocator, MemoryCategory category, std::size_t count, void* stream, bool async)
      : allocator_(&allocator), category_(category) {
    if (count == 0) return;
    if (count > SIZE_MAX / sizeof(T)) {
      throw Error(allocator.backend().name() + ": out of memory allocating " + std::to_string(count) + " elements of " +
                  std::to_string(sizeof(T)) + " bytes for " + std::string(category_name(category)) +
                  " (size overflows)");
    }
    data_ = static_cast<T*>(allocator.allocate_zeroed(count * sizeof(T), category, stream, async));
    count_ = count;
  }

  std::size_t checked_bytes(std::size_t count) const {
    if (count > count_) {
      throw Error("CachedBuffer: a copy of " + std::to_string(count) + " elements does not fit a buffer of " +
                  std::to_string(count_));
    }
    return count * sizeof(T);
  }

  void release() noexcept {
    if (data_ != nullptr) {
      allocator_->release(data_);
      data_ = nullptr;
      count_ = 0;
    }
  }
  void swap(CachedBuffer& o) noexcept {
    std::swap(allocator_, o.allocator_);
    std::swap(category_, o.category_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }

  CachingAllocator* allocator_ = nullptr;
  MemoryCategory category_ = MemoryCategory::parameters;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace dpbench
