// The CUDA target's probe behind core/device.hpp's probe_cuda(): asks the runtime for its
// version, the driver and the devices, without creating a context on any of them. Links the static runtime, so a machine without a driver
// still runs the binary and gets a reason in words.
#include <cuda_runtime.h>

#include <string>

#include "core/device.hpp"
#include "cuda/register.hpp"
#ifdef DPBENCH_HAVE_NCCL
#include <nccl.h>
#endif

namespace dpbench {

CudaProbe probe_cuda_runtime() {
  CudaProbe probe;
  probe.built_with_cuda = true;
#ifdef DPBENCH_HAVE_NCCL
  probe.nccl_version_code = NCCL_VERSION_CODE;
#endif
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
  // A GPU this build has no kernel image for (built for sm_90, run on an older GPU, say) would
  // fail at the first launch: not usable, with the reason. Decided from the properties against
  // the built architectures, so that probing creates no context on any device (a context costs
  // ~0.5 GB per process and GPU, skews cudaMemGetInfo and fails under EXCLUSIVE_PROCESS).
  for (const GpuInfo& g : probe.gpus) {
    cudaDeviceProp prop{};
    cudaGetDeviceProperties(&prop, g.index);
    if (!cuda_build_runs_on(DPBENCH_CUDA_ARCHITECTURES, prop.major, prop.minor)) {
      probe.usable = false;
      probe.reason = std::string("GPU ") + std::to_string(g.index) + " (" + g.name + ", compute capability " +
                     std::to_string(prop.major) + "." + std::to_string(prop.minor) +
                     ") cannot run this build's kernels (built for " + DPBENCH_CUDA_ARCHITECTURES +
                     "; rebuild with CMAKE_CUDA_ARCHITECTURES including it)";
      break;
    }
  }
  return probe;
}

}  // namespace dpbench
