// The cnn workload on the GPU: workloads/cnn.hpp's model (same layers, parameter views, buffers
// and initialisation) as a CudaModel on the CUDA kernels of cuda/cuda_cnn_kernels.hpp and
// cuda/cuda_kernels.hpp. BatchNorm semantics as on the CPU: batch statistics in training,
// running statistics in evaluation, SyncBatchNorm through a BatchNormSync on device pointers.
#pragma once

#include <memory>
#include <vector>

#include "cuda/cuda_model.hpp"

namespace dpbench {

// channels {c1, c2}, hidden {h, ...} (first value used), as make_cnn; InputError as make_cnn.
// The model computes on `blas` (its stream and precision), which must outlive it. forward and
// backward only enqueue work, except in evaluation mode (running_var -> invstd on the host) and
// with a BatchNormSync of world_size > 1, where they wait for the compute stream around each
// host step and each call into the sync. Throws Error for a batch beyond reserve()'s.
std::unique_ptr<CudaModel> make_cuda_cnn(const std::vector<int>& channels,
                                         const std::vector<int>& hidden, const SampleShape& shape,
                                         std::size_t classes, cuda::Blas& blas);

}  // namespace dpbench
