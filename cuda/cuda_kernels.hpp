// CUDA training kernels: the GPU side of workloads/cpu_kernels.hpp (Linear via cuBLAS, fused bias
// + ReLU, softmax cross-entropy, arg-max counting, the SGD-momentum update, element-wise adds).
// Each launcher keeps its cpu:: counterpart's argument order and semantics, plus a cuBLAS handle
// (Linear only) and a stream, so one test compares the two. float only.
// Not for: memory management, multi-GPU code or layers the workloads do not use.
//
// Every pointer here is a DEVICE pointer; every `void* stream` is a cudaStream_t passed as void*
// (nullptr: the default stream). Launchers only enqueue work: nothing is synchronised, so a
// fault inside a kernel surfaces at the caller's next synchronising call. Launchers throw
// dpbench::Error("cuda: <launcher>: <cause> at <file>:<line>") when a launch or a cuBLAS call
// is refused.
//
// This header includes no CUDA header, so plain C++ files of the CUDA target can include it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/names.hpp"
#include "workloads/cpu_kernels.hpp"

struct cublasContext;  // cuBLAS's handle type: cublasHandle_t is cublasContext*

namespace dpbench::cuda {

// True when this build has the CUDA kernels. Whether a device is usable is probe_cuda()'s
// question (core/device.hpp).
bool available();

// Launches the calling thread has enqueued through this target's launchers since it started:
// one per kernel (every launch passes the launch check of cuda/cuda_check.cuh) and one per cuBLAS
// GEMM call (which may run more than one kernel inside); memsets and copies are not counted. Per
// thread, so each rank (a thread) counts its own: the difference across a training step is that
// step's launches.
std::uint64_t launch_count();

// How cuBLAS multiplies float matrices (dpbench::Precision, core/names.hpp; --precision):
//   fp32: CUBLAS_COMPUTE_32F, IEEE single precision throughout.
//   tf32: CUBLAS_COMPUTE_32F_FAST_TF32, inputs rounded to TF32 (10-bit mantissa) for the tensor
//         cores, products accumulated in fp32; what PyTorch's allow_tf32 = True does.

// One cuBLAS handle, created on the current device and bound to a stream; destroyed with the
// object. Not thread-safe: one Blas per thread (cuBLAS's own rule for handles).
class Blas {
 public:
  // stream: cudaStream_t as void* (nullptr: default stream). Throws Error when cuBLAS cannot
  // create a handle (no device, out of memory).
  Blas(void* stream, Precision precision);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  Blas(Blas&& other) noexcept;
  Blas& operator=(Blas&& other) noexcept;

  Precision precision() const { return precision_; }
  void* stream() const { return stream_; }
  // Rebinds the handle to another stream (cublasSetStream). The Linear launchers call this when
  // their stream differs from the bound one, so a GEMM always runs on the launcher's stream.
  void set_stream(void* stream);
  // The stream cuBLAS itself has the handle on (cublasGetStream), as cudaStream_t.
  void* bound_stream() const;
  // The raw handle, for callers that need a cuBLAS call not wrapped here.
  cublasContext* handle() const { return handle_; }

 private:
  cublasContext* handle_ = nullptr;
  void* stream_ = nullptr;
  Precision precision_ = Precision::fp32;
};

// y[batch, out] = x[batch, in] . W^T + b, with W: [out, in] (nn.Linear layout), b: [out],
// all row-major. If relu, y = max(y, 0) (fused into the bias kernel). As cpu::linear_forward.
// One GEMM on blas (rebound to stream) and one element-wise kernel on stream.
void linear_forward(Blas& blas, const float* x, const float* W, const float* b, float* y, std::size_t batch,
                    std::size_t in, std::size_t out, bool relu, void* stream);

// Backward of linear_forward without ReLU, as cpu::linear_backward: given dy[batch, out],
// overwrites dW[out, in] = dy^T . x, db[out] = sum over batch of dy and, if dx != nullptr,
// dx[batch, in] = dy . W. batch == 0 writes zeros to dW and db.
void linear_backward(Blas& blas, const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                     std::size_t batch, std::size_t in, std::size_t out, void* stream);

// In place over n elements: dy[i] = 0 where the ReLU output y[i] <= 0. As
// cpu::relu_backward_inplace (bit-identical).
void relu_backward_inplace(const float* y, float* dy, std::size_t n, void* stream);

// Softmax cross-entropy over logits[batch, classes] with labels[batch] (int32, device), one warp
// per row, max-subtracted, sums and logarithms in double like cpu::softmax_cross_entropy.
// ADDS the sum of the per-sample losses to *loss_sum (one float on the device; atomicAdd, one
// per block, so the order of the additions is not fixed). If dlogits != nullptr, writes
// dlogits[batch, classes] = (softmax(logits) - onehot(labels)) * grad_scale.
// A kernel cannot throw: a label outside [0, classes) makes that row's loss and dlogits NaN,
// so *loss_sum becomes NaN (cpu::softmax_cross_entropy throws instead).
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                           float* dlogits, float grad_scale, float* loss_sum, void* stream);

// ADDS to *correct (one int on the device) the number of rows of logits[batch, classes] whose
// arg-max equals the label; ties go to the lowest index (std::max_element's rule). As
// cpu::count_correct.
void count_correct(const float* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                   int* correct, void* stream);

// SGD with momentum, PyTorch torch/optim/sgd.py semantics (dampening 0, no Nesterov), over n
// elements:  d = g + weight_decay * p;  v = momentum * v + d;  p -= lr * v.
// Every operation rounds separately (no fused multiply-add), so the result is bit-identical to
// cpu::sgd_momentum<float>.
void sgd_momentum(float* params, const float* grads, float* velocity, std::size_t n, float lr, float momentum,
                  float weight_decay, void* stream);

// Adam / AdamW with the step's scalars (cpu::adam_scalars), over n elements, as cpu::adam<float>:
// every operation rounds separately (IEEE sqrt and division), so the result is bit-identical.
void adam(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
          const cpu::AdamScalars& s, void* stream);

// y[i] += x[i] over n elements. As cpu::add_inplace (bit-identical).
void add_inplace(float* y, const float* x, std::size_t n, void* stream);

// out[i] = a[i] + b[i] over n elements; out may alias a or b.
void add(float* out, const float* a, const float* b, std::size_t n, void* stream);

// y[i] *= alpha over n elements (e.g. 1/world_size after a summing all-reduce).
void scale_inplace(float* y, float alpha, std::size_t n, void* stream);

}  // namespace dpbench::cuda
