// The code behind cuda/cuda_local_ops.hpp: the local backend's copies and additions between GPU
// ranks that are threads of one process.
//
// Every copy and kernel runs on the rank's stream; fence() synchronises it before the group's
// barrier, so what a rank wrote is complete when its peers read it, and what it read is no
// longer needed when a peer overwrites it. Peers' pointers are plain device pointers of the same
// process (unified addressing):
//   copy: cudaMemcpyPeerAsync from the peer's device (it works within one device too);
//   add:  on the same device a kernel reads the peer's buffer directly (one context per device
//         per process); from another device the peer's slice is first copied into a staging
//         buffer on this device, then the kernel adds.
#include "cuda/cuda_local_ops.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <memory>

#include <fmt/format.h>

#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "core/error.hpp"
#include "cuda/cuda_check.cuh"
#include "cuda/cuda_kernels.hpp"

namespace dpbench {

namespace {

using cuda::detail::check_cuda;

class CudaMemOps final : public LocalMemOps {
 public:
  CudaMemOps(int device, DeviceAllocator& allocator, void* stream, int peer_devices)
      : device_(device), allocator_(&allocator), stream_(stream) {
    if (allocator.device() != device) {
      throw Error(fmt::format("local backend on GPU: the allocator is on device {}, the rank on "
                              "device {}",
                              allocator.device(), device));
    }
    cuda::set_device(device_);
    enable_peer_access(peer_devices);
  }

  void copy(float* dst, const float* src, std::size_t n) override {
    if (n == 0) return;
    cuda::set_device(device_);
    copy_into(dst, src, n);
  }

  void add(float* out, const float* peer_in, const float* own, std::size_t n) override {
    if (n == 0) return;
    cuda::set_device(device_);
    const float* in = peer_in;
    if (cuda::pointer_device(peer_in) != device_) {
      // Another device's memory (or host memory): bring the slice here first.
      float* staging = grown(staging_, n);
      copy_into(staging, peer_in, n);
      in = staging;
    }
    cuda::add(out, in, own, n, stream_);
  }

  void fence() override {
    DPBENCH_CUDA_CHECK("local backend: fence", cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)));
  }

  float* scratch(std::size_t n) override {
    cuda::set_device(device_);
    return grown(scratch_, n);
  }

 private:
  // dst (this device) <- src (any device, or host memory), on the stream.
  void copy_into(float* dst, const float* src, std::size_t n) {
    const std::size_t bytes = n * sizeof(float);
    const int src_device = cuda::pointer_device(src);
    if (src_device < 0) {
      cuda::memcpy_async(dst, src, bytes, stream_);
    } else {
      cuda::memcpy_peer_async(dst, device_, src, src_device, bytes, stream_);
    }
  }

  // buffer, reallocated to n floats when smaller. Work already queued on the stream may still
  // use the old block, which goes back to the allocator's cache: wait for it first.
  float* grown(DeviceBuffer<float>& buffer, std::size_t n) {
    if (buffer.size() < n) {
      fence();
      buffer = DeviceBuffer<float>(*allocator_, MemoryCategory::comm_buffers, n, stream_);
    }
    return buffer.data();
  }

  // Lets cudaMemcpyPeerAsync copy directly between this device and every other one of the
  // group's devices that supports it, rather than staging through host memory. Best effort: a
  // pair without peer access still copies, only slower.
  void enable_peer_access(int peer_devices) {
    const int count = std::min(peer_devices, cuda::device_count());
    for (int peer = 0; peer < count; ++peer) {
      if (peer == device_) continue;
      int can = 0;
      if (cudaDeviceCanAccessPeer(&can, device_, peer) == cudaSuccess && can != 0) {
        // cudaErrorPeerAccessAlreadyEnabled when another rank on this device got there first.
        cudaDeviceEnablePeerAccess(peer, 0);
      }
      cudaGetLastError();
    }
  }

  int device_;
  DeviceAllocator* allocator_;
  void* stream_;
  DeviceBuffer<float> scratch_;  // handed to the communicator (relay slices)
  DeviceBuffer<float> staging_;  // a peer's slice from another device, for add()
};

}  // namespace

std::unique_ptr<LocalMemOps> make_cuda_mem_ops(int device, DeviceAllocator& allocator, void* stream, int peer_devices) {
  return std::make_unique<CudaMemOps>(device, allocator, stream, peer_devices);
}

}  // namespace dpbench
