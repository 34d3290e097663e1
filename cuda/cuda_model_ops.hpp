// The CUDA device's ModelOps (workloads/model_ops.hpp): what the models of workloads/ (Mlp,
// Cnn, written once for every device) run on a GPU. Each kernel is the CUDA launcher of
// cuda/cuda_kernels.hpp or cuda/cuda_cnn_kernels.hpp with the cpu:: kernel's arguments,
// enqueued on the stream of the cuda::Blas the ops were made with (a rank's compute stream):
// cuda::ModelLaunchers (cuda/cuda_cnn_kernels.hpp), plus device memory and host copies.
#pragma once

#include <memory>

#include "cuda/cuda_kernels.hpp"
#include "cuda/device_memory.hpp"
#include "workloads/model_ops.hpp"

namespace dpbench {

// Kernels and GEMMs on blas (its stream and precision); memory from `allocator`, zeroed with
// cudaMemsetAsync on that stream (ordered before every later kernel). download/upload are
// cudaMemcpyAsync on that stream, then the host waits for an event recorded after the copy.
// blas and allocator must outlive the ops and every buffer from them. float only.
std::shared_ptr<ModelOps<float>> make_cuda_model_ops(cuda::Blas& blas, DeviceAllocator& allocator);

}  // namespace dpbench
