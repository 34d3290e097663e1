// The kernels a model runs and the memory its activations live in, behind one interface, so that
// each model (workloads/mlp.hpp, workloads/cnn.hpp) is written once for every device: the layer
// sequence, parameter layout, buffers, BatchNorm stages and evaluation mode live in the model,
// and a device supplies a ModelOps. The CPU's (workloads/cpu_model_ops.hpp) calls the OpenBLAS
// and plain C++ kernels of workloads/cpu_kernels.hpp and cnn_kernels.hpp on host memory; the
// CUDA target's (cuda/cuda_model_ops.hpp) enqueues the CUDA launchers on a rank's compute stream.
// A model makes one virtual call per kernel (per layer and step), never one per element.
// Not for: the loss, optimizer and communication ops a strategy uses (train/rank_context.hpp).
//
// Every pointer a ModelOps takes is DEVICE memory of its device (host memory on the CPU) unless
// its name says host; kernels only enqueue work on the ops' stream (the CPU's completes on
// return), in call order. Errors throw dpbench::Error (InputError where the cpu:: kernel does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "workloads/cnn_kernels.hpp"
#include "workloads/dlrm_kernels.hpp"

namespace dpbench {

// Where a model's activations and buffers live: host memory charged to a MemoryTracker on the
// CPU, a caching allocator's blocks on GPUs. Byte counts throughout.
class ModelMemory {
 public:
  virtual ~ModelMemory() = default;
  // `bytes` (> 0) of memory charged to `category`, zeroed before any later kernel of these ops
  // runs. Throws Error when out of memory.
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  // Returns a block from allocate() with the same bytes and category. Never throws.
  virtual void release(void* ptr, std::size_t bytes, MemoryCategory category) noexcept = 0;
  // Copies `bytes` from device memory to the host, after every kernel enqueued before it;
  // complete on return (on GPUs the host waits for the stream).
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;
  // Copies `bytes` from the host to device memory, in order with the kernels; complete on return
  // (host_src may be reused at once).
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
};

// An owning, zero-initialised array of `count` T in a ModelMemory, charged to one category while
// it lives; it keeps the memory alive. Move-only. Throws Error when count * sizeof(T) overflows
// or the memory refuses.
template <typename T>
class ModelBuffer {
 public:
  ModelBuffer() = default;
  ModelBuffer(std::shared_ptr<ModelMemory> memory, MemoryCategory category, std::size_t count)
      : data_(nullptr, Release{std::move(memory), category, 0}) {
    if (count == 0) return;
    if (count > SIZE_MAX / sizeof(T)) throw Error("model buffer: " + std::to_string(count) + " elements overflow");
    data_.reset(static_cast<T*>(data_.get_deleter().memory->allocate(count * sizeof(T), category)));
    data_.get_deleter().bytes = count * sizeof(T);
    count_ = count;
  }

  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }
  std::size_t size() const { return count_; }

 private:
  struct Release {
    std::shared_ptr<ModelMemory> memory;
    MemoryCategory category = MemoryCategory::activations;
    std::size_t bytes = 0;
    void operator()(T* ptr) const noexcept { memory->release(ptr, bytes, category); }
  };
  std::unique_ptr<T, Release> data_;
  std::size_t count_ = 0;
};

// The kernels of the workloads' models, each as its cpu:: counterpart in
// workloads/cpu_kernels.hpp and cnn_kernels.hpp (same arguments, shapes and semantics; see
// there), on device pointers. T: float (both devices) or double (CPU; finite-difference checks).
template <typename T>
class ModelOps : public ModelMemory {
 public:
  // ---- Linear (row-major, nn.Linear layout)
  // y[batch, out] = x[batch, in] . W[out, in]^T + b[out], then max(y, 0) if relu.
  virtual void linear_forward(const T* x, const T* W, const T* b, T* y, std::size_t batch, std::size_t in,
                              std::size_t out, bool relu) = 0;
  // Given dy[batch, out]: overwrites dW[out, in], db[out] and, if dx is not null, dx[batch, in].
  virtual void linear_backward(const T* x, const T* W, const T* dy, T* dx, T* dW, T* db, std::size_t batch,
                               std::size_t in, std::size_t out) = 0;
  // In place over n elements: y = max(y, 0); its backward zeroes dy where the output y <= 0.
  virtual void relu_inplace(T* y, std::size_t n) = 0;
  virtual void relu_backward_inplace(const T* y, T* dy, std::size_t n) = 0;

  // ---- convolution (NCHW, stride 1, zero padding) and 2x2 max-pooling
  // y[N, K, P, Q] = conv(x[N, C, H, W], w[K, C, R, S]) + b[K] (b may be null), over the whole
  // batch in chunks (workloads/conv_layout.hpp); ws: workspace of s.workspace_size() elements.
  virtual void conv2d_forward(const T* x, const T* w, const T* b, T* y, const cpu::ConvShape& s, T* ws) = 0;
  // Given dy[N, K, P, Q]: overwrites dw, db (if not null) and, if not null, dx[N, C, H, W].
  virtual void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const cpu::ConvShape& s,
                               T* ws) = 0;
  // x[N, C, H, W] -> y[N, C, H/2, W/2] and int32 argmax[N, C, H/2, W/2] (flat index into x).
  virtual void maxpool2x2_forward(const T* x, T* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                                  std::size_t W) = 0;
  // dx[N, C, H, W] = 0 except dx[argmax[i]] = dy[i].
  virtual void maxpool2x2_backward(const T* dy, const std::int32_t* argmax, T* dx, std::size_t N, std::size_t C,
                                   std::size_t H, std::size_t W) = 0;

  // ---- BatchNorm over x[N, C, HW], the stages of PyTorch's SyncBatchNorm; the double sums
  // [C] are device memory too.
  virtual void batchnorm_local_sums(const T* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                                    double* sumsq) = 0;
  virtual void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, T eps,
                                        T momentum, T* mean, T* invstd, T* running_mean, T* running_var) = 0;
  virtual void batchnorm_normalize(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, T* y,
                                   std::size_t N, std::size_t C, std::size_t HW) = 0;
  virtual void batchnorm_backward_reduce(const T* dy, const T* x, const T* mean, const T* invstd, std::size_t N,
                                         std::size_t C, std::size_t HW, double* sum_dy, double* sum_dy_xmu, T* dgamma,
                                         T* dbeta) = 0;
  virtual void batchnorm_backward_elemt(const T* dy, const T* x, const T* mean, const T* invstd, const T* gamma,
                                        const double* sum_dy, const double* sum_dy_xmu, double count, T* dx,
                                        std::size_t N, std::size_t C, std::size_t HW) = 0;

  // ---- DLRM (workloads/dlrm_kernels.hpp): embedding bags with sum pooling, the dot interaction,
  // and a column block of the input rows.
  virtual void embedding_bag_sum_forward(const T* tables, const T* x, T* out, std::size_t batch,
                                         const cpu::BagShape& s) = 0;
  virtual void embedding_bag_sum_backward(const T* x, const T* d_out, T* dtables, std::size_t batch,
                                          const cpu::BagShape& s) = 0;
  virtual void dot_interaction_forward(const T* z, const T* bags, T* r, std::size_t batch, std::size_t tables,
                                       std::size_t dim) = 0;
  virtual void dot_interaction_backward(const T* z, const T* bags, const T* dr, T* dz, T* dbags, std::size_t batch,
                                        std::size_t tables, std::size_t dim) = 0;
  virtual void copy_columns(const T* src, std::size_t src_stride, T* dst, std::size_t width, std::size_t rows) = 0;
};

// The CPU's ModelOps: the cpu:: kernels on host memory (64-byte aligned), charged to `tracker`,
// which must outlive the ops and every buffer from them. Defined in workloads/cpu_model_ops.cpp.
template <typename T>
std::shared_ptr<ModelOps<T>> make_cpu_model_ops(MemoryTracker& tracker);

}  // namespace dpbench
