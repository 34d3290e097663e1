// Per-rank GPU memory: the caching allocator of core/caching_allocator.hpp (block cache, 512-byte
// rounding, tracker charges, out-of-memory retry; tested on the CPU) over cudaMalloc/cudaFree,
// and DeviceBuffer<T>, its owning array zeroed with cudaMemset and copied with cudaMemcpy.
// device_mem_info() is the device's own view (cudaMemGetInfo), which also sees the cache, the
// CUDA context, cuBLAS workspaces and NCCL's buffers.
// Every CUDA call runs with the allocator's device current and restores the caller's device
// after, so that a rank thread's own cudaSetDevice is never disturbed. Blocks are not
// stream-ordered (see CachingAllocator). No CUDA headers here: the CUDA calls are in
// cuda/device_memory.cu.
#pragma once

#include <cstdint>

#include "core/caching_allocator.hpp"

namespace dpbench {

// A CachingAllocator on one CUDA device. Its backend names the device in errors ("device D:
// out of memory allocating N bytes for <category> (M bytes in use, K cached); the device has F
// of T bytes free"; "device D: <cudaCall>: <cause> at <file>:<line>").
class DeviceAllocator : public CachingAllocator {
 public:
  // device: a CUDA device ordinal. Throws Error with the reason in words when that device
  // cannot be used (no driver, no such device). The tracker must outlive the allocator.
  DeviceAllocator(int device, MemoryTracker& tracker);
  int device() const { return device_; }

 private:
  int device_;
};

// An owning, zero-initialised array of `count` T in device memory from a DeviceAllocator,
// charged to one category of its tracker while it lives. The synchronous constructor's zeros
// (cudaMemset, then a wait for the legacy default stream) are in place on return; the one taking
// a stream (a cudaStream_t) zeroes with cudaMemsetAsync on it. copy_from_host / copy_to_host /
// to_host take a stream too: cudaMemcpyAsync on it, then a wait for it, complete on return.
template <typename T>
using DeviceBuffer = CachedBuffer<T>;

// The device's own view of its memory: cudaMemGetInfo on `device`.
struct DeviceMemInfo {
  std::int64_t free_bytes = 0;
  std::int64_t total_bytes = 0;
  std::int64_t used_bytes() const { return total_bytes - free_bytes; }
};

// cudaSetDevice(device), cudaMemGetInfo, then the calling thread's previous device again.
// Throws Error with the reason in words when CUDA fails.
DeviceMemInfo device_mem_info(int device);

}  // namespace dpbench
