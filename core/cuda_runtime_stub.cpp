// core/cuda_runtime.hpp in a build without CUDA: the same functions, saying that there is no
// CUDA (device_count() is 0 and pinned_free() does nothing, so that callers may ask and clean up
// in every build). With CUDA this file is empty and core/cuda_runtime.cu defines them.
#include "core/cuda_runtime.hpp"

#include <string>

#include "core/error.hpp"

namespace dpbench::cuda {

#ifndef DPBENCH_HAVE_CUDA

namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) + ": dpbench was built without CUDA");
}

}  // namespace

int device_count() { return 0; }

void set_device(int) { no_cuda("set_device"); }

int current_device() { no_cuda("current_device"); }

int pointer_device(const void*) { no_cuda("pointer_device"); }

Stream::Stream() { no_cuda("Stream"); }

// Never holds a stream: the constructor throws.
Stream::~Stream() = default;

Stream& Stream::operator=(Stream&& o) noexcept {
  stream_ = std::exchange(o.stream_, nullptr);
  return *this;
}

void Stream::synchronize() const { no_cuda("Stream::synchronize"); }

Event::Event() { no_cuda("Event"); }

// Never holds an event: the constructor throws.
Event::~Event() = default;

Event& Event::operator=(Event&& o) noexcept {
  event_ = std::exchange(o.event_, nullptr);
  return *this;
}

void Event::record(void*) { no_cuda("Event::record"); }

void Event::wait_on(void*) const { no_cuda("Event::wait_on"); }

void Event::synchronize() const { no_cuda("Event::synchronize"); }

float Event::elapsed_ms(const Event&, const Event&) { no_cuda("Event::elapsed_ms"); }

void memcpy_async(void*, const void*, std::size_t, void*) { no_cuda("memcpy_async"); }

void memcpy_peer_async(void*, int, const void*, int, std::size_t, void*) {
  no_cuda("memcpy_peer_async");
}

void* pinned_alloc(std::size_t) { no_cuda("pinned_alloc"); }

void pinned_free(void*) noexcept {}

#endif  // DPBENCH_HAVE_CUDA

}  // namespace dpbench::cuda
