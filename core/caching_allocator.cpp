// The caching allocator of core/caching_allocator.hpp: block cache, in-use map, tracker charges
// and the out-of-memory retry, over whatever backend a device supplies.
#include "core/caching_allocator.hpp"

#include <exception>

#include <fmt/format.h>

namespace dpbench {

CachingAllocator::CachingAllocator(std::unique_ptr<MemoryBackend> backend, MemoryTracker& tracker)
    : backend_(std::move(backend)), tracker_(&tracker) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  auto free_quietly = [&](void* p) {
    try {
      backend_->raw_free(p);
    } catch (const std::exception&) {
    }
  };
  for (auto& [size, blocks] : cache_) {
    for (void* p : blocks) free_quietly(p);
  }
  for (auto& [p, block] : in_use_) {
    tracker_->on_free(block.category, block.bytes);
    free_quietly(p);
  }
}

void* CachingAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  void* ptr = nullptr;
  if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded;
  } else {
    if (rounded % kRoundBytes == 0) {  // otherwise too close to SIZE_MAX to round: cannot fit
      ptr = backend_->raw_alloc(rounded);
      if (ptr == nullptr) {
        // As PyTorch does: give the cache back to the backend and try once more.
        release_cache_locked();
        ptr = backend_->raw_alloc(rounded);
      }
    }
    if (ptr == nullptr) {
      throw Error(fmt::format("{}: out of memory allocating {} bytes for {} ({} bytes in use, {} cached){}",
                              backend_->name(), rounded, category_name(category), in_use_bytes_, cached_bytes_,
                              backend_->memory_view()));
    }
  }

  try {
    in_use_.emplace(ptr, Block{rounded, category});
  } catch (...) {
    // Keep the block for later rather than leak it.
    cache_[rounded].push_back(ptr);
    cached_bytes_ += rounded;
    throw;
  }
  in_use_bytes_ += rounded;
  tracker_->on_alloc(category, rounded);
  return ptr;
}

void* CachingAllocator::allocate_zeroed(std::size_t bytes, MemoryCategory category, void* stream, bool async) {
  void* p = allocate(bytes, category);
  try {
    backend_->zero(p, bytes, stream, async);
  } catch (...) {
    free(p);
    throw;
  }
  return p;
}

void CachingAllocator::release(void* ptr) noexcept {
  try {
    free(ptr);
  } catch (const std::exception&) {
    // not one of this allocator's blocks: nothing to give back
  }
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    throw Error(fmt::format("{}: free of {} which this allocator did not hand out (or which was freed already)",
                            backend_->name(), ptr));
  }
  const Block block = it->second;
  in_use_.erase(it);
  in_use_bytes_ -= block.bytes;
  tracker_->on_free(block.category, block.bytes);
  try {
    cache_[block.bytes].push_back(ptr);
    cached_bytes_ += block.bytes;
  } catch (...) {
    // No room to remember it: give it back to the backend instead.
    try {
      backend_->raw_free(ptr);
    } catch (const std::exception&) {
    }
  }
}

std::size_t CachingAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

std::size_t CachingAllocator::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_bytes_;
}

void CachingAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  // Free everything, then report the first failure.
  std::exception_ptr first;
  for (auto& [size, blocks] : cache_) {
    for (void* p : blocks) {
      try {
        backend_->raw_free(p);
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
  }
  cache_.clear();
  cached_bytes_ = 0;
  if (first) std::rethrow_exception(first);
}

}  // namespace dpbench
