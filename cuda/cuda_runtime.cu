// The code behind cuda/cuda_runtime.hpp: devices, streams, events, page-locked host memory and
// asynchronous copies over the CUDA runtime.
// A failure throws Error("cuda: <what>: <call>: <cause> at <file>:<line>") and clears CUDA's
// last error, so that it does not resurface in an unrelated call.
#include "cuda/cuda_runtime.hpp"

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/error.hpp"
#include "cuda/cuda_check.cuh"

namespace dpbench::cuda {

using detail::as_stream;
using detail::check_cuda;

namespace {
cudaEvent_t as_event(void* event) { return static_cast<cudaEvent_t>(event); }
}  // namespace

// ---------------------------------------------------------------------------------------------
// Devices and pointers

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void set_device(int device) { DPBENCH_CUDA_CHECK("set_device", cudaSetDevice(device)); }

int current_device() {
  int device = -1;
  DPBENCH_CUDA_CHECK("current_device", cudaGetDevice(&device));
  return device;
}

int pointer_device(const void* ptr) {
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err == cudaErrorInvalidValue) {
    // Runtimes before CUDA 11 refuse pointers they do not know (plain host memory).
    cudaGetLastError();
    return -1;
  }
  check_cuda(err, "pointer_device", "cudaPointerGetAttributes", __FILE__, __LINE__);
  switch (attr.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return attr.device;
    default:  // cudaMemoryTypeHost (page-locked) or cudaMemoryTypeUnregistered
      return -1;
  }
}

// ---------------------------------------------------------------------------------------------
// Stream

Stream::Stream() {
  cudaStream_t stream = nullptr;
  DPBENCH_CUDA_CHECK("Stream", cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_ = stream;
}

Stream::~Stream() {
  if (stream_ == nullptr) return;
  // Errors ignored: this may run while the process shuts CUDA down, or while unwinding.
  if (cudaStreamDestroy(as_stream(stream_)) != cudaSuccess) cudaGetLastError();
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (stream_ != nullptr && cudaStreamDestroy(as_stream(stream_)) != cudaSuccess) {
      cudaGetLastError();
    }
    stream_ = std::exchange(o.stream_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  DPBENCH_CUDA_CHECK("Stream::synchronize", cudaStreamSynchronize(as_stream(stream_)));
}

// ---------------------------------------------------------------------------------------------
// Event

Event::Event(Timing timing) {
  cudaEvent_t event = nullptr;
  DPBENCH_CUDA_CHECK("Event", cudaEventCreateWithFlags(&event, timing == Timing::on ? cudaEventDefault
                                                                                    : cudaEventDisableTiming));
  event_ = event;
}

Event::~Event() {
  if (event_ == nullptr) return;
  if (cudaEventDestroy(as_event(event_)) != cudaSuccess) cudaGetLastError();
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr && cudaEventDestroy(as_event(event_)) != cudaSuccess) {
      cudaGetLastError();
    }
    event_ = std::exchange(o.event_, nullptr);
  }
  return *this;
}

void Event::record(void* stream) {
  DPBENCH_CUDA_CHECK("Event::record", cudaEventRecord(as_event(event_), as_stream(stream)));
}

Graph::Graph(void* stream, const std::function<void()>& enqueue) {
  DPBENCH_CUDA_CHECK("Graph", cudaStreamBeginCapture(as_stream(stream), cudaStreamCaptureModeRelaxed));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    if (cudaStreamEndCapture(as_stream(stream), &graph) == cudaSuccess && graph != nullptr) cudaGraphDestroy(graph);
    cudaGetLastError();
    throw;
  }
  DPBENCH_CUDA_CHECK("Graph", cudaStreamEndCapture(as_stream(stream), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  check_cuda(made, "Graph", "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
  exec_ = exec;
}

Graph::~Graph() {
  if (exec_ != nullptr && cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_)) != cudaSuccess) cudaGetLastError();
}

void Graph::launch(void* stream) const {
  DPBENCH_CUDA_CHECK("Graph::launch", cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(stream)));
  detail::note_launch();
}

void Event::wait_on(void* stream) const {
  DPBENCH_CUDA_CHECK("Event::wait_on", cudaStreamWaitEvent(as_stream(stream), as_event(event_), 0));
}

void Event::synchronize() const { DPBENCH_CUDA_CHECK("Event::synchronize", cudaEventSynchronize(as_event(event_))); }

float Event::elapsed_ms(const Event& start, const Event& end) {
  float ms = 0.0f;
  DPBENCH_CUDA_CHECK("Event::elapsed_ms", cudaEventElapsedTime(&ms, as_event(start.event_), as_event(end.event_)));
  return ms;
}

// ---------------------------------------------------------------------------------------------
// Copies

void memcpy_async(void* dst, const void* src, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  DPBENCH_CUDA_CHECK("memcpy_async", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)));
}

void memcpy_peer_async(void* dst, int dst_device, const void* src, int src_device, std::size_t bytes, void* stream) {
  if (bytes == 0) return;
  DPBENCH_CUDA_CHECK("memcpy_peer_async",
                     cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, as_stream(stream)));
}

// ---------------------------------------------------------------------------------------------
// Page-locked host memory

namespace {
void* pinned_alloc(std::size_t bytes) {
  void* ptr = nullptr;
  DPBENCH_CUDA_CHECK("pinned_alloc", cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault));
  return ptr;
}

void pinned_free(void* ptr) noexcept {
  if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}
}  // namespace

const HostMemory& pinned_memory() {
  static const HostMemory memory{&pinned_alloc, &pinned_free};
  return memory;
}

}  // namespace dpbench::cuda
