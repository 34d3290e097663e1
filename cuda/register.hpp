// The CUDA target's entry points for the rest of dpbench. A build with CUDA calls
// register_cuda_device() once at start-up (the dpbench command, the test and benchmark mains):
// it registers the CUDA probe behind probe_cuda() (core/device.hpp) and the "cuda" rank launcher
// behind run_rank_contexts() (train/rank_context.hpp). A CPU-only build compiles none of this
// folder; there `--device cuda` is refused as a device the build cannot train on.
#pragma once

#include "core/device.hpp"

namespace dpbench {

// Registers the CUDA device. Idempotent; never throws (probing happens when asked).
void register_cuda_device();

// The probe registered by register_cuda_device() (cuda/cuda_probe.cu). Never throws.
CudaProbe probe_cuda_runtime();

}  // namespace dpbench
