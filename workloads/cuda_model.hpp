// The model interface of the GPU trainers: workloads/model.hpp's ModelT on device memory. A
// CudaModel has the same parameter views, parameter order and initialisation as its CPU
// counterpart (Mlp, Cnn), so one flat parameter buffer means the same on both devices and a run
// can start from the same bits. Parameters, gradients, inputs, logits and buffers are DEVICE
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

#include "core/device_memory.hpp"
#include "workloads/cuda_kernels.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

struct TrainConfig;

class CudaModel {
 public:
  virtual ~CudaModel() = default;
  virtual std::string name() const = 0;
  // Parameter views in parameter order, identical to the CPU model's.
  virtual const std::vector<ParamView>& params() const = 0;
  virtual std::size_t num_params() const = 0;
  virtual std::size_t input_features() const = 0;
  virtual std::size_t num_classes() const = 0;

  // Allocates device activations for batches of up to max_batch samples from `allocator`
  // (charged to activations; BatchNorm buffers to parameters). The allocator must outlive the
  // model's use of them.
  virtual void reserve(std::size_t max_batch, DeviceAllocator& allocator) = 0;
  // Writes the CPU model's initialisation (bit for bit) into HOST memory params[num_params()].
  virtual void init_params(float* host_params, std::uint64_t seed) const = 0;
  // x: [batch, input_features]; writes logits [batch, num_classes]. batch <= reserved size,
  // else Error.
  virtual void forward(const float* params, const float* x, std::size_t batch, float* logits) = 0;
  // Backward of the last forward(): dlogits [batch, num_classes]; overwrites grads
  // [num_params()]. Calls on_grad_ready(i) on the host once the kernels that write parameter i's
  // gradient have been ENQUEUED (not finished), in reverse parameter order: a caller records an
  // event on the compute stream there and lets its communication stream wait on it.
  virtual void backward(const float* params, const float* x, const float* dlogits,
                        std::size_t batch, float* grads,
                        const std::function<void(std::size_t)>& on_grad_ready) = 0;

  // BatchNorm running statistics as in ModelT, [num_buffers()] device floats owned by the model.
  virtual std::size_t num_buffers() const { return 0; }
  virtual float* buffers() { return nullptr; }
  virtual void set_training(bool) {}
  // SyncBatchNorm through `sync`, whose pointers are then device pointers of this model's
  // device. The model synchronises its compute stream before each call into `sync`, and `sync`
  // returns with its output complete (a blocking collective).
  virtual void set_batchnorm_sync(BatchNormSync*) {}
};

// The GPU version of make_model(): config.workload "mlp" or "cnn" with the same shapes and
// checks (InputError), computing on `blas` (its stream and precision).
std::unique_ptr<CudaModel> make_cuda_model(const TrainConfig& config, const SampleShape& shape,
                                           std::size_t num_classes, cuda::Blas& blas);

}  // namespace dpbench
