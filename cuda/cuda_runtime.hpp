// Thin RAII wrappers over the parts of the CUDA runtime the GPU trainers use: the current
// device, streams, events (ordering between streams, and timing), page-locked host memory and
// asynchronous copies. No CUDA header is included here, so plain C++ translation units (the
// trainers) can use them; every cudaStream_t / cudaEvent_t crosses this header as void*.
// Every failure throws Error("cuda: <what>: <cause>").
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

#include "core/memory.hpp"

namespace dpbench::cuda {

// Number of CUDA devices (cudaGetDeviceCount); 0 when there is no driver or no device.
// Never throws.
int device_count();
// cudaSetDevice for the calling thread.
void set_device(int device);
// cudaGetDevice of the calling thread.
int current_device();
// The device a pointer from cudaMalloc belongs to (cudaPointerGetAttributes); -1 for host memory,
// page-locked or not.
int pointer_device(const void* ptr);

// A non-blocking stream (cudaStreamNonBlocking: no implicit ordering with the legacy default
// stream) on the device current when it was created. Move-only.
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept : stream_(std::exchange(o.stream_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept;
  void* handle() const { return stream_; }
  // Blocks until all work enqueued so far has finished (cudaStreamSynchronize).
  void synchronize() const;

 private:
  void* stream_ = nullptr;
};

// A CUDA event with timing enabled, on the device current when it was created. Move-only.
class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : event_(std::exchange(o.event_, nullptr)) {}
  Event& operator=(Event&& o) noexcept;
  void* handle() const { return event_; }

  // cudaEventRecord on `stream` (a cudaStream_t as void*).
  void record(void* stream);
  // Makes later work on `stream` wait for this event's work (cudaStreamWaitEvent); the host
  // does not block.
  void wait_on(void* stream) const;
  // Blocks the host until the event's work has finished (cudaEventSynchronize).
  void synchronize() const;
  // Milliseconds from `start` to `end`, both recorded and complete (cudaEventElapsedTime).
  static float elapsed_ms(const Event& start, const Event& end);

 private:
  void* event_ = nullptr;
};

// Copies `bytes` from src to dst on `stream`; either may be host or device memory of any device
// (cudaMemcpyAsync with cudaMemcpyDefault, which unified addressing routes). Asynchronous with
// respect to the host only for page-locked host memory.
void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream);
// cudaMemcpyPeerAsync: `bytes` from src on src_device to dst on dst_device, on `stream`. Works
// within one device as well.
void memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device,
                       std::size_t bytes, void* stream);

// cudaHostAlloc / cudaFreeHost.
void* pinned_alloc(std::size_t bytes);
void pinned_free(void* ptr) noexcept;

// An owning array of `count` T in page-locked host memory (cudaHostAlloc), charged to one
// category of a MemoryTracker for as long as it lives: the staging buffers that make
// host-to-device copies asynchronous (DataLoader's pin_memory). Zero-initialised. Move-only.
template <typename T>
class PinnedBuffer {
  static_assert(std::is_trivially_copyable_v<T>, "PinnedBuffer holds trivially copyable types");

 public:
  PinnedBuffer() = default;
  PinnedBuffer(MemoryTracker& tracker, MemoryCategory category, std::size_t count)
      : tracker_(&tracker), category_(category), count_(count) {
    if (count_ == 0) return;
    data_ = static_cast<T*>(pinned_alloc(count_ * sizeof(T)));
    for (std::size_t i = 0; i < count_; ++i) data_[i] = T{};
    tracker_->on_alloc(category_, count_ * sizeof(T));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept { swap(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      swap(o);
    }
    return *this;
  }
  ~PinnedBuffer() { release(); }

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  void release() noexcept {
    if (data_ == nullptr) return;
    pinned_free(data_);
    tracker_->on_free(category_, count_ * sizeof(T));
    data_ = nullptr;
    count_ = 0;
  }
  void swap(PinnedBuffer& o) noexcept {
    std::swap(tracker_, o.tracker_);
    std::swap(category_, o.category_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }
  MemoryTracker* tracker_ = nullptr;
  MemoryCategory category_ = MemoryCategory::data_staging;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace dpbench::cuda
