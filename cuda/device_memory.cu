// The code behind cuda/device_memory.hpp: the caching allocator's cudaMalloc/cudaFree, the zeroing
// and copies behind DeviceBuffer<T>, and cudaMemGetInfo.
// Every call runs with the allocator's device current and restores the caller's device after,
// so that a rank thread's own cudaSetDevice is never disturbed.
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/device.hpp"
#include "cuda/device_memory.hpp"
#include "core/error.hpp"
#include "core/error_location.hpp"
#include "cuda/cuda_check.cuh"

namespace dpbench {

namespace {

// Throws Error("device D: <call>: <cause> at <file>:<line>") for a failed call, after clearing
// CUDA's last error so that it does not resurface in an unrelated call.
void check_cuda(cudaError_t err, int device, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  throw Error(fmt::format("device {}: {}", device, cuda::detail::cuda_failure(err, call, file, line)));
}

#define DEVMEM_CUDA_CHECK(device, call) check_cuda((call), (device), #call, __FILE__, __LINE__)

// Makes `device` current for the guard's lifetime, then restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) DEVMEM_CUDA_CHECK(device, cudaSetDevice(device));
    switched_ = previous_ >= 0 && previous_ != device;
  }
  ~DeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// Throws Error naming why `device` cannot be used, in words (no driver, no such device).
void require_device(int device) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    cudaGetLastError();
    const CudaProbe probe = probe_cuda();
    throw Error(fmt::format("device {}: no usable CUDA device: {}", device,
                            probe.reason.empty() ? std::string(cudaGetErrorString(err))
                                                 : probe.reason));
  }
  if (device < 0 || device >= count) {
    throw Error(fmt::format("device {}: no such CUDA device ({} visible)", device, count));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// DeviceAllocator

DeviceAllocator::DeviceAllocator(int device, MemoryTracker& tracker)
    : device_(device), tracker_(&tracker) {
  require_device(device);
}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard<std::mutex> lock(mutex_);
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  cudaSetDevice(device_);
  for (auto& [size, blocks] : cache_) {
    for (void* p : blocks) cudaFree(p);
  }
  for (auto& [p, block] : in_use_) {
    tracker_->on_free(block.category, block.bytes);
    cudaFree(p);
  }
  cudaGetLastError();
  if (previous >= 0 && previous != device_) cudaSetDevice(previous);
}

void* DeviceAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  if (bytes == 0) return nullptr;
  const std::size_t rounded = round_size(bytes);
  std::lock_guard<std::mutex> lock(mutex_);

  void* ptr = nullptr;
  if (auto it = cache_.find(rounded); it != cache_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= rounded;
  } else {
    cudaError_t err = cudaErrorMemoryAllocation;
    if (rounded % kRoundBytes == 0) {  // otherwise too close to SIZE_MAX to round: cannot fit
      DeviceGuard guard(device_);
      err = cudaMalloc(&ptr, rounded);
      if (err == cudaErrorMemoryAllocation) {
        // As PyTorch does: give the cache back to the driver and try once more.
        cudaGetLastError();
        release_cache_locked();
        err = cudaMalloc(&ptr, rounded);
      }
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::string device_view;
      std::size_t free_b = 0;
      std::size_t total_b = 0;
      {
        DeviceGuard guard(device_);
        if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
          device_view = fmt::format("; the device has {} of {} bytes free", free_b, total_b);
        }
        cudaGetLastError();
      }
      throw Error(fmt::format("device {}: out of memory allocating {} bytes for {} ({} bytes in "
                              "use, {} cached){}",
                              device_, rounded, category_name(category), in_use_bytes_,
                              cached_bytes_, device_view));
    }
    check_cuda(err, device_, "cudaMalloc", __FILE__, __LINE__);
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

void DeviceAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = in_use_.find(ptr);
  if (it == in_use_.end()) {
    throw Error(fmt::format("device {}: free of {} which this allocator did not hand out (or "
                            "which was freed already)",
                            device_, ptr));
  }
  const Block block = it->second;
  in_use_.erase(it);
  in_use_bytes_ -= block.bytes;
  tracker_->on_free(block.category, block.bytes);
  try {
    cache_[block.bytes].push_back(ptr);
    cached_bytes_ += block.bytes;
  } catch (...) {
    // No room to remember it: give it back to the driver instead.
    DeviceGuard guard(device_);
    cudaFree(ptr);
    cudaGetLastError();
  }
}

std::size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

std::size_t DeviceAllocator::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_bytes_;
}

void DeviceAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  release_cache_locked();
}

void DeviceAllocator::release_cache_locked() {
  // The caller has made device_ current. Free everything, then report the first failure.
  cudaError_t first = cudaSuccess;
  for (auto& [size, blocks] : cache_) {
    for (void* p : blocks) {
      const cudaError_t err = cudaFree(p);
      if (err != cudaSuccess && first == cudaSuccess) first = err;
    }
  }
  cache_.clear();
  cached_bytes_ = 0;
  check_cuda(first, device_, "cudaFree", __FILE__, __LINE__);
}

// ---------------------------------------------------------------------------------------------
// DeviceBuffer's CUDA work

namespace device_memory_detail {

void zero(int device, void* ptr, std::size_t bytes, void* stream, bool async) {
  if (ptr == nullptr || bytes == 0) return;
  DeviceGuard guard(device);
  if (async) {
    DEVMEM_CUDA_CHECK(device, cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream)));
  } else {
    // cudaMemset on device memory may return before the zeros land, and work on a non-blocking
    // stream is not ordered after it: wait for the default stream so that the buffer is zero on
    // return, whichever stream uses it next.
    DEVMEM_CUDA_CHECK(device, cudaMemset(ptr, 0, bytes));
    DEVMEM_CUDA_CHECK(device, cudaStreamSynchronize(nullptr));
  }
}

void copy_to_device(int device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  DEVMEM_CUDA_CHECK(device, cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  // A pageable upload may return before its DMA has landed; finish it so that any stream sees it.
  DEVMEM_CUDA_CHECK(device, cudaStreamSynchronize(nullptr));
}

void copy_to_host(int device, void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  DEVMEM_CUDA_CHECK(device, cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace device_memory_detail

// ---------------------------------------------------------------------------------------------
// The device's own view

DeviceMemInfo device_mem_info(int device) {
  require_device(device);
  DeviceGuard guard(device);
  std::size_t free_b = 0;
  std::size_t total_b = 0;
  DEVMEM_CUDA_CHECK(device, cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<std::int64_t>(free_b), static_cast<std::int64_t>(total_b)};
}

}  // namespace dpbench
