#include "workloads/cpu_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/blas_gemm.hpp"

namespace dpbench::cpu {

namespace {
using detail::gemm;
}  // namespace

template <typename T>
void linear_forward(const T* x, const T* W, const T* b, T* y, std::size_t batch, std::size_t in, std::size_t out,
                    bool relu) {
  if (batch == 0) return;
  gemm(CblasNoTrans, CblasTrans, batch, out, in, x, in, W, in, T(0), y, out);
  for (std::size_t r = 0; r < batch; ++r) {
    T* row = y + r * out;
    if (relu) {
      for (std::size_t o = 0; o < out; ++o) row[o] = std::max(row[o] + b[o], T(0));
    } else {
      for (std::size_t o = 0; o < out; ++o) row[o] += b[o];
    }
  }
}

template <typename T>
void linear_backward(const T* x, const T* W, const T* dy, T* dx, T* dW, T* db, std::size_t batch, std::size_t in,
                     std::size_t out) {
  if (batch == 0) {
    std::fill(dW, dW + out * in, T(0));
    std::fill(db, db + out, T(0));
    return;
  }
  gemm(CblasTrans, CblasNoTrans, out, in, batch, dy, out, x, in, T(0), dW, in);
  std::fill(db, db + out, T(0));
  for (std::size_t r = 0; r < batch; ++r) {
    const T* row = dy + r * out;
    for (std::size_t o = 0; o < out; ++o) db[o] += row[o];
  }
  if (dx != nullptr) gemm(CblasNoTrans, CblasNoTrans, batch, in, out, dy, out, W, in, T(0), dx, in);
}

template <typename T>
void relu_backward_inplace(const T* y, T* dy, std::size_t n) {
  // A select, not a branch: the signs are data-dependent and a branch would mispredict.
  for (std::size_t i = 0; i < n; ++i) dy[i] = y[i] <= T(0) ? T(0) : dy[i];
}

template <typename T>
double softmax_cross_entropy(const T* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes,
                             T* dlogits, T grad_scale) {
  double total = 0.0;
  for (std::size_t r = 0; r < batch; ++r) {
    const T* z = logits + r * classes;
    const std::int32_t label = labels[r];
    if (label < 0 || static_cast<std::size_t>(label) >= classes) {
      throw Error(fmt::format("label {} out of range [0, {})", label, classes));
    }
    const T zmax = *std::max_element(z, z + classes);
    double sum = 0.0;
    for (std::size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
    const double log_sum = std::log(sum);
    total += log_sum - static_cast<double>(z[label] - zmax);
    if (dlogits != nullptr) {
      T* d = dlogits + r * classes;
      for (std::size_t c = 0; c < classes; ++c) {
        const double p = std::exp(static_cast<double>(z[c] - zmax) - log_sum);
        d[c] = static_cast<T>((p - (static_cast<std::int32_t>(c) == label ? 1.0 : 0.0)) *
                              static_cast<double>(grad_scale));
      }
    }
  }
  return total;
}

template <typename T>
std::size_t count_correct(const T* logits, const std::int32_t* labels, std::size_t batch, std::size_t classes) {
  std::size_t correct = 0;
  for (std::size_t r = 0; r < batch; ++r) {
    const T* z = logits + r * classes;
    const auto pred = std::max_element(z, z + classes) - z;
    if (pred == labels[r]) ++correct;
  }
  return correct;
}

template <typename T>
void sgd_momentum(T* params, const T* grads, T* velocity, std::size_t n, T lr, T momentum, T weight_decay) {
  for (std::size_t i = 0; i < n; ++i) {
    const T d = grads[i] + weight_decay * params[i];
    velocity[i] = momentum * velocity[i] + d;
    params[i] -= lr * velocity[i];
  }
}

AdamScalars adam_scalars(double lr, double beta1, double beta2, double eps, double weight_decay, long t,
                         bool decoupled) {
  if (t < 1) throw std::invalid_argument("adam_scalars: step must be >= 1");
  AdamScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  s.eps = static_cast<float>(eps);
  s.weight_decay = decoupled ? 0.0f : static_cast<float>(weight_decay);
  s.decay = decoupled ? static_cast<float>(1.0 - lr * weight_decay) : 1.0f;
  const auto step = static_cast<double>(t);
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, step)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step)));
  return s;
}

template <typename T>
void adam(T* params, const T* grads, T* exp_avg, T* exp_avg_sq, std::size_t n, const AdamScalars& s) {
  const T decay = s.decay, wd = s.weight_decay, b1 = s.beta1, b2 = s.beta2, c1 = s.one_minus_beta1,
          c2 = s.one_minus_beta2, eps = s.eps, step_size = s.step_size, bc2 = s.bias_correction2_sqrt;
  for (std::size_t i = 0; i < n; ++i) {
    T p = params[i];
    if (decay != T(1)) p = decay * p;
    T g = grads[i];
    if (wd != T(0)) g = g + wd * p;
    const T m = b1 * exp_avg[i] + c1 * g;
    const T gg = g * g;
    const T v = b2 * exp_avg_sq[i] + c2 * gg;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const T denom = std::sqrt(v) / bc2 + eps;
    const T ratio = m / denom;
    params[i] = p - step_size * ratio;
  }
}

template <typename T>
void add_inplace(T* y, const T* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) y[i] += x[i];
}

void set_blas_threads(int threads) { openblas_set_num_threads(std::max(threads, 1)); }
int blas_threads() { return openblas_get_num_threads(); }
const char* blas_config() { return openblas_get_config(); }
const char* blas_core_name() { return openblas_get_corename(); }

#define DPBENCH_INSTANTIATE(T)                                                                                       \
  template void linear_forward<T>(const T*, const T*, const T*, T*, std::size_t, std::size_t, std::size_t, bool);    \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, std::size_t, std::size_t, std::size_t); \
  template void relu_backward_inplace<T>(const T*, T*, std::size_t);                                                 \
  template double softmax_cross_entropy<T>(const T*, const std::int32_t*, std::size_t, std::size_t, T*, T);          \
  template std::size_t count_correct<T>(const T*, const std::int32_t*, std::size_t, std::size_t);                    \
  template void sgd_momentum<T>(T*, const T*, T*, std::size_t, T, T, T);                                             \
  template void adam<T>(T*, const T*, T*, T*, std::size_t, const AdamScalars&);                                      \
  template void add_inplace<T>(T*, const T*, std::size_t);
DPBENCH_INSTANTIATE(float)
DPBENCH_INSTANTIATE(double)
#undef DPBENCH_INSTANTIATE

}  // namespace dpbench::cpu
