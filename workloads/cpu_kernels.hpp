// CPU training kernels: Linear (OpenBLAS GEMM), bias + ReLU, softmax cross-entropy and the
// SGD-momentum and Adam/AdamW updates. All tensors are row-major; T is float (training) or double (the
// finite-difference checks). CUDA versions of the same kernels keep these signatures.
// Not for: layers beyond what the workloads use.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dpbench::cpu {

// y[batch, out] = x[batch, in] . W^T + b, with W: [out, in] (PyTorch nn.Linear layout), b: [out].
// If relu, y = max(y, 0) (fused).
template <typename T>
void linear_forward(const T* x, const T* W, const T* b, T* y, std::size_t batch, std::size_t in, std::size_t out,
                    bool relu);

// Backward of linear_forward without ReLU: given dy[batch, out], writes (overwrites)
// dW[out, in] = dy^T . x, db[out] = sum over batch of dy, and, if dx != nullptr,
// dx[batch, in] = dy . W.
template <typename T>
void linear_backward(const T* x, const T* W, const T* dy, T* dx, T* dW, T* db, std::size_t batch, std::size_t in,
                     std::size_t out);

// In place: dy[i] = 0 where the ReLU output y[i] <= 0 (ReLU backward given its output).
template <typename T>
void relu_backward_inplace(const T* y, T* dy, std::size_t n);

// Softmax cross-entropy over logits[batch, classes] with integer labels[batch].
// Returns the SUM of per-sample losses. If dlogits != nullptr, writes
// dlogits = (softmax(logits) - onehot(labels)) * grad_scale  (grad_scale = 1/N for a mean loss
// over N samples). Throws Error on a label outside [0, classes).
template <typename T>
double softmax_cross_entropy(const T* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                             T* dlogits, T grad_scale);

// Number of rows of logits[batch, classes] whose arg-max equals the label.
template <typename T>
std::size_t count_correct(const T* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes);

// SGD with momentum, PyTorch torch/optim/sgd.py semantics (dampening 0, no Nesterov):
//   d = g + weight_decay * p;  v = momentum * v + d;  p -= lr * v      over n elements.
// (PyTorch sets v = d on the first step; v starts at zero here, which is the same.)
template <typename T>
void sgd_momentum(T* params, const T* grads, T* velocity, std::size_t n, T lr, T momentum, T weight_decay);

// The per-step scalars of Adam / AdamW at step t (1-based), computed in double from the
// hyper-parameters and rounded to float once, as torch/optim/adam.py and adamw.py (1.13,
// single-tensor path) compute them in Python before the tensor ops:
//   step_size = lr / (1 - beta1^t),  bias_correction2_sqrt = sqrt(1 - beta2^t),
//   decay = 1 - lr * weight_decay (AdamW's decoupled decay; 1 for Adam).
struct AdamScalars {
  float beta1 = 0.9f, beta2 = 0.999f;
  float one_minus_beta1 = 0.1f, one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // Adam: L2, added to the gradient; 0 for AdamW
  float decay = 1.0f;         // AdamW: the parameters' factor; 1 for Adam
  float step_size = 0.0f;
  float bias_correction2_sqrt = 1.0f;
};

// AdamScalars of step t >= 1; decoupled: AdamW. Throws std::invalid_argument when t < 1.
AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, long t,
                         bool decoupled);

// Adam / AdamW (Kingma & Ba 2015; Loshchilov & Hutter 2019), PyTorch torch.optim.Adam / AdamW
// semantics (amsgrad off) over n elements, each operation rounded separately:
//   p = decay * p;  g = grad + weight_decay * p;
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;
//   p = p - step_size * m / (sqrt(v) / bias_correction2_sqrt + eps).
// exp_avg (m) and exp_avg_sq (v) start at zero.
template <typename T>
void adam(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, std::size_t n, const AdamScalars& s);

// y[i] += x[i] over n elements.
template <typename T>
void add_inplace(T* y, const T* x, std::size_t n);

// Sets the number of threads OpenBLAS may use for one GEMM (process-wide).
void set_blas_threads(int threads);
int blas_threads();
// OpenBLAS's description of itself (version, core, threading), for results.
const char* blas_config();
// The kernel family OpenBLAS chose at load time, e.g. "SkylakeX" or "Prescott".
const char* blas_core_name();

}  // namespace dpbench::cpu
