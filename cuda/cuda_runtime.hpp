// Thin RAII wrappers over the parts of the CUDA runtime the GPU trainers use: the current
// device, streams, events (ordering between streams, and timing), page-locked host memory and
// asynchronous copies. No CUDA header is included here, so plain C++ translation units (the
// trainers) can use them; every cudaStream_t / cudaEvent_t crosses this header as void*.
// Every failure throws Error("cuda: <what>: <cause>").
#pragma once

#include <cstddef>
#include <functional>
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

// A CUDA event on the device current when it was created. Move-only. Timing::off
// (cudaEventDisableTiming) is for events used only to order streams or wait on the host: they
// record and wait without a timestamp; elapsed_ms needs two Timing::on events.
class Event {
 public:
  enum class Timing { on, off };
  explicit Event(Timing timing = Timing::on);
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

// A CUDA graph of the work one capture enqueued on a stream, instantiated for replay: the
// launches of a whole step become one cudaGraphLaunch (PyTorch's torch.cuda.graph does the same).
// Move-only.
class Graph {
 public:
  // Captures what `enqueue` puts on `stream` (a non-default stream; cudaStreamBeginCapture in
  // relaxed mode, so nothing it enqueues runs now), then instantiates it. Run `enqueue` once
  // outside a capture first, so that libraries allocate their workspaces. Throws Error naming the
  // failing call (e.g. work that cannot be captured); `enqueue`'s own exception ends the capture
  // and is rethrown.
  Graph(void* stream, const std::function<void()>& enqueue);
  ~Graph();
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)) {}
  Graph& operator=(Graph&&) = delete;
  // Enqueues the captured work on `stream` (cudaGraphLaunch), counted as one launch in
  // launch_count().
  void launch(void* stream) const;

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t
};

// Copies `bytes` from src to dst on `stream`; either may be host or device memory of any device
// (cudaMemcpyAsync with cudaMemcpyDefault, which unified addressing routes). Asynchronous with
// respect to the host only for page-locked host memory.
void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream);
// cudaMemcpyPeerAsync: `bytes` from src on src_device to dst on dst_device, on `stream`. Works
// within one device as well.
void memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes, void* stream);

// Page-locked host memory (cudaHostAlloc / cudaFreeHost) for TrackedBuffer<T>: the staging
// buffers that make host-to-device copies asynchronous (DataLoader's pin_memory), e.g.
// `TrackedBuffer<float>(tracker, MemoryCategory::data_staging, n, &cuda::pinned_memory())`.
const HostMemory& pinned_memory();

}  // namespace dpbench::cuda
