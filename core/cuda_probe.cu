// CUDA half of core/device.hpp: asks the runtime for its version, the driver and the devices.
// Compiled only when the build has CUDA; links the static runtime, so a machine without a
// driver still runs the binary and gets a reason in words.
#include <cuda_runtime.h>

#include <string>

#include "core/device.hpp"

namespace dpbench {

CudaProbe probe_cuda() {
  CudaProbe probe;
  probe.built_with_cuda = true;
  cudaRuntimeGetVersion(&probe.runtime_version);
  if (cudaDriverGetVersion(&probe.driver_version) != cudaSuccess || probe.driver_version == 0) {
    probe.reason = "no NVIDIA driver is installed (libcuda not found)";
    return probe;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    probe.reason = std::string(cudaGetErrorString(err));
    cudaGetLastError();
    return probe;
  }
  if (count == 0) {
    probe.reason = "the driver reports no devices";
    return probe;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    char bus[32] = {0};
    cudaDeviceGetPCIBusId(bus, sizeof(bus), i);
    probe.gpus.push_back({i, prop.name, static_cast<std::int64_t>(prop.totalGlobalMem), bus});
  }
  probe.usable = !probe.gpus.empty();
  if (!probe.usable) probe.reason = "no device answered cudaGetDeviceProperties";
  return probe;
}

}  // namespace dpbench
