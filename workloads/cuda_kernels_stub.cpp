// The CUDA kernels (workloads/cuda_kernels.hpp) in a build without CUDA: available() is false
// and every other function throws Error saying so, so code that names them links in every
// build. With CUDA this file is empty and workloads/cuda_kernels.cu defines them.
#include "workloads/cuda_kernels.hpp"

#include <string>

#include "core/error.hpp"

namespace dpbench::cuda {

#ifndef DPBENCH_HAVE_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("cuda: ") + what + ": this build has no CUDA");
}
}  // namespace

bool available() { return false; }

Blas::Blas(void*, Precision) { no_cuda("Blas"); }
Blas::~Blas() = default;
Blas::Blas(Blas&& other) noexcept
    : handle_(other.handle_), stream_(other.stream_), precision_(other.precision_) {}
Blas& Blas::operator=(Blas&& other) noexcept {
  handle_ = other.handle_;
  stream_ = other.stream_;
  precision_ = other.precision_;
  return *this;
}
void Blas::set_stream(void*) { no_cuda("Blas::set_stream"); }
void* Blas::bound_stream() const { no_cuda("Blas::bound_stream"); }

void linear_forward(Blas&, const float*, const float*, const float*, float*, std::size_t,
                    std::size_t, std::size_t, bool, void*) {
  no_cuda("linear_forward");
}

void linear_backward(Blas&, const float*, const float*, const float*, float*, float*, float*,
                     std::size_t, std::size_t, std::size_t, void*) {
  no_cuda("linear_backward");
}

void relu_backward_inplace(const float*, float*, std::size_t, void*) {
  no_cuda("relu_backward_inplace");
}

void softmax_cross_entropy(const float*, const std::int32_t*, std::size_t, std::size_t, float*,
                           float, float*, void*) {
  no_cuda("softmax_cross_entropy");
}

void count_correct(const float*, const std::int32_t*, std::size_t, std::size_t, int*, void*) {
  no_cuda("count_correct");
}

void sgd_momentum(float*, const float*, float*, std::size_t, float, float, float, void*) {
  no_cuda("sgd_momentum");
}

void add_inplace(float*, const float*, std::size_t, void*) { no_cuda("add_inplace"); }

void add(float*, const float*, const float*, std::size_t, void*) { no_cuda("add"); }

void scale_inplace(float*, float, std::size_t, void*) { no_cuda("scale_inplace"); }

#endif  // DPBENCH_HAVE_CUDA

}  // namespace dpbench::cuda
