// core/device_memory.hpp in a build without CUDA: the same functions, saying that there is no
// CUDA. With CUDA this file is empty and core/device_memory.cu defines them.
#include "core/device_memory.hpp"

#include <string>

#include "core/error.hpp"

namespace dpbench {

#ifndef DPBENCH_HAVE_CUDA

namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string(what) + ": dpbench was built without CUDA");
}

}  // namespace

DeviceAllocator::DeviceAllocator(int device, MemoryTracker& tracker)
    : device_(device), tracker_(&tracker) {
  no_cuda("DeviceAllocator");
}

// Never reached: the constructor throws, so no allocator exists to destroy.
DeviceAllocator::~DeviceAllocator() = default;

void* DeviceAllocator::allocate(std::size_t, MemoryCategory) { no_cuda("DeviceAllocator::allocate"); }

void DeviceAllocator::free(void* ptr) {
  if (ptr != nullptr) no_cuda("DeviceAllocator::free");
}

std::size_t DeviceAllocator::cached_bytes() const { return 0; }

std::size_t DeviceAllocator::in_use_bytes() const { return 0; }

void DeviceAllocator::release_cache() {}

void DeviceAllocator::release_cache_locked() {}

namespace device_memory_detail {

void zero(int, void*, std::size_t, void*, bool) { no_cuda("DeviceBuffer"); }

void copy_to_device(int, void*, const void*, std::size_t) { no_cuda("DeviceBuffer"); }

void copy_to_host(int, void*, const void*, std::size_t) { no_cuda("DeviceBuffer"); }

}  // namespace device_memory_detail

DeviceMemInfo device_mem_info(int) { no_cuda("device_mem_info"); }

#endif  // DPBENCH_HAVE_CUDA

}  // namespace dpbench
