// The model interface the trainers use. A model does not own its parameters: parameters and
// gradients live in flat buffers owned by the trainer (one allocation each, as in llm.c), and a
// model describes them as named views (ParamView) into those buffers, in parameter order.
// One flat gradient buffer is what lets one all-reduce (or a few buckets) cover the model.
// A model instance holds the activations of one replica, for batches up to reserve()'s size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/memory.hpp"

namespace dpbench {

// One parameter tensor as a view into the flat buffer: elements [offset, offset + size).
struct ParamView {
  std::string name;                // e.g. "fc1.weight"
  std::vector<std::size_t> shape;  // e.g. {out, in}
  std::size_t offset = 0;          // in elements
  std::size_t size = 0;            // in elements
};

// How BatchNorm layers combine statistics across ranks (SyncBatchNorm, PyTorch
// torch/nn/modules/_functions.py): forward all-gathers each rank's (mean, invstd, count), backward
// all-reduces (sum_dy, sum_dy_xmu). A model without one uses each rank's local statistics.
class BatchNormSync {
 public:
  virtual ~BatchNormSync() = default;
  virtual int world_size() const = 0;
  // send: [n] floats of this rank; recv: [world_size * n], rank r's at r * n.
  virtual void allgather(const float* send, float* recv, std::size_t n) = 0;
  virtual void allreduce_sum(float* buf, std::size_t n) = 0;
};

template <typename T>
class ModelT {
 public:
  virtual ~ModelT() = default;
  virtual std::string name() const = 0;
  // Parameter views in parameter order (the order of the flat buffer).
  virtual const std::vector<ParamView>& params() const = 0;
  virtual std::size_t num_params() const = 0;
  virtual std::size_t input_features() const = 0;
  virtual std::size_t num_classes() const = 0;

  // Allocates activation storage for batches of up to max_batch samples, charged to tracker.
  virtual void reserve(std::size_t max_batch, MemoryTracker& tracker) = 0;
  // Writes PyTorch's default initialisation into params[num_params()], from seed.
  virtual void init_params(T* params, std::uint64_t seed) const = 0;
  // x: [batch, input_features]; writes logits [batch, num_classes]. batch <= reserved size.
  virtual void forward(const T* params, const T* x, std::size_t batch, T* logits) = 0;
  // Backward of the last forward(): dlogits: [batch, num_classes]; overwrites grads
  // [num_params()]. Calls on_grad_ready(i) once parameter i's gradient is final, in the order
  // gradients become ready (reverse parameter order), so that buckets can launch early.
  virtual void backward(const T* params, const T* x, const T* dlogits, std::size_t batch,
                        T* grads, const std::function<void(std::size_t)>& on_grad_ready) = 0;

  // Buffers: state that is not trained by gradients (BatchNorm running statistics), [num_buffers()]
  // floats owned by the model, reserved by reserve(). Replicas copy them from the master/rank 0.
  virtual std::size_t num_buffers() const { return 0; }
  virtual T* buffers() { return nullptr; }
  // Training mode normalises with batch statistics and updates the running ones; evaluation mode
  // uses the running statistics (nn.Module.train() / eval()).
  virtual void set_training(bool) {}
  // SyncBatchNorm: combine BatchNorm statistics through `sync` (null: local statistics).
  virtual void set_batchnorm_sync(BatchNormSync*) {}
};

using Model = ModelT<float>;

}  // namespace dpbench
