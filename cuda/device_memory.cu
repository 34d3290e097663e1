// The CUDA backend behind cuda/device_memory.hpp: cudaMalloc/cudaFree for the caching
// allocator, the zeroing and copies behind DeviceBuffer<T>, and cudaMemGetInfo.
#include <cuda_runtime.h>

#include <string>

#include <fmt/format.h>

#include "core/device.hpp"
#include "core/error.hpp"
#include "cuda/cuda_check.cuh"
#include "cuda/device_memory.hpp"

namespace dpbench {

namespace {

// A failed call throws Error("device D: <call>: <cause> at <file>:<line>").
cuda::detail::OnDevice on(int device) { return {device}; }

// Makes `device` current for the guard's lifetime, then restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) DPBENCH_CUDA_CHECK(on(device), cudaSetDevice(device));
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
                            probe.reason.empty() ? std::string(cudaGetErrorString(err)) : probe.reason));
  }
  if (device < 0 || device >= count) {
    throw Error(fmt::format("device {}: no such CUDA device ({} visible)", device, count));
  }
}

class CudaMemoryBackend final : public MemoryBackend {
 public:
  explicit CudaMemoryBackend(int device) : device_(device) { require_device(device); }

  std::string name() const override { return fmt::format("device {}", device_); }

  void* raw_alloc(std::size_t bytes) override {
    DeviceGuard guard(device_);
    void* ptr = nullptr;
    const cudaError_t err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    cuda::detail::check_cuda(err, on(device_), "cudaMalloc", __FILE__, __LINE__);
    return ptr;
  }

  void raw_free(void* ptr) override {
    DeviceGuard guard(device_);
    DPBENCH_CUDA_CHECK(on(device_), cudaFree(ptr));
  }

  std::string memory_view() noexcept override {
    std::string view;
    try {
      DeviceGuard guard(device_);
      std::size_t free_b = 0, total_b = 0;
      if (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
        view = fmt::format("; the device has {} of {} bytes free", free_b, total_b);
      }
    } catch (const std::exception&) {
    }
    cudaGetLastError();
    return view;
  }

  void zero(void* ptr, std::size_t bytes, void* stream, bool async) override {
    if (ptr == nullptr || bytes == 0) return;
    DeviceGuard guard(device_);
    if (async) {
      DPBENCH_CUDA_CHECK(on(device_), cudaMemsetAsync(ptr, 0, bytes, static_cast<cudaStream_t>(stream)));
    } else {
      // cudaMemset on device memory may return before the zeros land, and work on a
      // non-blocking stream is not ordered after it: wait for the default stream so that the
      // buffer is zero on return, whichever stream uses it next.
      DPBENCH_CUDA_CHECK(on(device_), cudaMemset(ptr, 0, bytes));
      DPBENCH_CUDA_CHECK(on(device_), cudaStreamSynchronize(nullptr));
    }
  }

  // On the caller's stream, so that the copy is ordered after that stream's work (a copy on the
  // legacy stream is not ordered with non-blocking streams); then the host waits for it, which
  // also lets a pageable upload's DMA land before any stream uses the data.
  void copy_from_host(void* dst, const void* src, std::size_t bytes, void* stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    const auto s = static_cast<cudaStream_t>(stream);
    DPBENCH_CUDA_CHECK(on(device_), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
    DPBENCH_CUDA_CHECK(on(device_), cudaStreamSynchronize(s));
  }

  void copy_to_host(void* dst, const void* src, std::size_t bytes, void* stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(device_);
    const auto s = static_cast<cudaStream_t>(stream);
    DPBENCH_CUDA_CHECK(on(device_), cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s));
    DPBENCH_CUDA_CHECK(on(device_), cudaStreamSynchronize(s));
  }

 private:
  int device_;
};

}  // namespace

DeviceAllocator::DeviceAllocator(int device, MemoryTracker& tracker)
    : CachingAllocator(std::make_unique<CudaMemoryBackend>(device), tracker), device_(device) {}

DeviceMemInfo device_mem_info(int device) {
  require_device(device);
  DeviceGuard guard(device);
  std::size_t free_b = 0;
  std::size_t total_b = 0;
  DPBENCH_CUDA_CHECK(on(device), cudaMemGetInfo(&free_b, &total_b));
  return {static_cast<std::int64_t>(free_b), static_cast<std::int64_t>(total_b)};
}

}  // namespace dpbench
