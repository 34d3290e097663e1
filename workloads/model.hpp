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
};

using Model = ModelT<float>;

}  // namespace dpbench
