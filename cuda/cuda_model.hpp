// The models on GPUs: workloads/model.hpp's Model on device memory. A CudaModel has the same
// parameter views, parameter order and initialisation as its CPU counterpart (Mlp, Cnn), so one
// flat parameter buffer means the same on both devices and a run can start from the same bits. Parameters, gradients, inputs, logits and buffers are DEVICE
// pointers on the model's device; the model owns only its activations (and BatchNorm buffers).
//
// Streams: every kernel and GEMM runs on the stream of the cuda::Blas the model was built with
// (its compute stream). Calls only enqueue work; nothing waits for the device unless a
// BatchNormSync is set (see set_batchnorm_sync).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/device_memory.hpp"
#include "cuda/cuda_kernels.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

struct TrainConfig;

// A Model whose parameters, gradients, inputs, logits and buffers are device pointers, and
// whose init_params() writes HOST memory (the caller uploads it). backward() calls
// on_grad_ready(i) once the kernels that write parameter i's gradient have been ENQUEUED (not
// finished): a caller records an event on the compute stream there. With a BatchNormSync set,
// the model synchronises its compute stream before each call into it, and the sync returns with
// its output complete (a blocking collective on device pointers).
class CudaModel : public Model {
 public:
  // Allocates device activations for batches of up to max_batch samples from `allocator`
  // (charged to activations; BatchNorm buffers to parameters). The allocator must outlive the
  // model's use of them.
  virtual void reserve(std::size_t max_batch, DeviceAllocator& allocator) = 0;
  // Model's host-tracker form does not apply to device memory: throws Error.
  void reserve(std::size_t max_batch, MemoryTracker& tracker) override;
};

// The GPU version of make_model(): config.workload "mlp" or "cnn" with the same shapes and
// checks (InputError), computing on `blas` (its stream and precision).
std::unique_ptr<CudaModel> make_cuda_model(const TrainConfig& config, const SampleShape& shape,
                                           std::size_t num_classes, cuda::Blas& blas);

}  // namespace dpbench
