// The model interface the trainers use. A model does not own its parameters: parameters and
// gradients live in flat buffers owned by the trainer (one allocation each, as in llm.c), and a
// model describes them as named views (ParamView) into those buffers, in parameter order.
// One flat gradient buffer is what lets one all-reduce (or a few buckets) cover the model.
// A model instance holds the activations of one replica, for batches up to reserve()'s size.
// A model is written once for every device over a ModelOps (workloads/model_ops.hpp): the ops
// given to reserve() decide where its activations live and which kernels run. Parameters,
// gradients, inputs, logits and buffers are then that device's pointers (host memory on the
// CPU; on a GPU device memory, with work only enqueued on the ops' stream); init_params() always
// writes host memory (the caller uploads it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "workloads/model_ops.hpp"

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
  // Parameter indices in the order backward finalises their gradients (DDP's buckets follow it):
  // reverse parameter order unless the model says otherwise (a described model's observed order).
  virtual std::vector<std::size_t> grad_ready_order() const {
    std::vector<std::size_t> order(params().size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
    return order;
  }
  // Per parameter index, the share of backward's time elapsed when its gradient is ready, in
  // [0, 1]; empty when the model does not know (the step schedule then cuts backward in
  // proportion to bucket size).
  virtual std::vector<double> grad_ready_times() const { return {}; }

  // Allocates activation storage for batches of up to max_batch samples from `ops`' memory
  // (activations; BatchNorm buffers as parameters); every later forward() and backward() runs
  // ops' kernels. The model keeps ops alive. A second call replaces the activations.
  virtual void reserve(std::size_t max_batch, std::shared_ptr<ModelOps<T>> ops) = 0;
  // The activation bytes reserve(max_batch) allocates (what it charges to activations), for the
  // memory model (train/memory_model.hpp).
  virtual std::size_t activation_bytes(std::size_t max_batch) const = 0;
  // The same on the CPU: host memory charged to `tracker` (which must outlive the model).
  void reserve(std::size_t max_batch, MemoryTracker& tracker) { reserve(max_batch, make_cpu_model_ops<T>(tracker)); }
  // Writes PyTorch's default initialisation into params[num_params()], from seed.
  virtual void init_params(T* params, std::uint64_t seed) const = 0;
  // x: [batch, input_features]; writes logits [batch, num_classes]. batch <= reserved size.
  virtual void forward(const T* params, const T* x, std::size_t batch, T* logits) = 0;
  // Backward of the last forward(): dlogits: [batch, num_classes]; overwrites grads
  // [num_params()]. Calls on_grad_ready(i) once the kernels that write parameter i's gradient
  // have been issued (on a GPU enqueued, not finished: a caller records an event there), in the
  // order gradients become ready (reverse parameter order), so that buckets can launch early.
  virtual void backward(const T* params, const T* x, const T* dlogits, std::size_t batch, T* grads,
                        const std::function<void(std::size_t)>& on_grad_ready) = 0;

  // Buffers: state that is not trained by gradients (BatchNorm running statistics), [num_buffers()]
  // floats owned by the model, reserved by reserve(). Replicas copy them from the master/rank 0.
  virtual std::size_t num_buffers() const { return 0; }
  virtual T* buffers() { return nullptr; }
  // The buffers as named views into buffers() (PyTorch state_dict names, e.g. "bn1.running_mean"),
  // and their values before any training (running_mean 0, running_var 1).
  virtual std::vector<ParamView> buffer_views() const { return {}; }
  virtual std::vector<T> initial_buffers() const { return {}; }
  // Training mode normalises with batch statistics and updates the running ones; evaluation mode
  // uses the running statistics (nn.Module.train() / eval()).
  virtual void set_training(bool) {}
  // SyncBatchNorm: combine BatchNorm statistics through `sync` (null: local statistics). The
  // sync gets device pointers; the model waits for the ops' stream before each call into it, and
  // the sync returns with its output complete (a blocking collective).
  virtual void set_batchnorm_sync(BatchNormSync*) {}
};

using Model = ModelT<float>;

}  // namespace dpbench
