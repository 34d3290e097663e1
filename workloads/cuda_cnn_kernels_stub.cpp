// The CUDA CNN kernels (workloads/cuda_cnn_kernels.hpp) in a build without CUDA: every function
// throws Error saying so, so code that names them links in every build. With CUDA this file is
// empty and workloads/cuda_cnn_kernels.cu defines them.
#include "workloads/cuda_cnn_kernels.hpp"

#include <string>

#include "core/error.hpp"

namespace dpbench::cuda {

#ifndef DPBENCH_HAVE_CUDA

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("cuda: ") + what + ": this build has no CUDA");
}
}  // namespace

void conv2d_forward(Blas&, const float*, const float*, const float*, float*, const cpu::ConvShape&,
                    float*, void*) {
  no_cuda("conv2d_forward");
}

void conv2d_backward(Blas&, const float*, const float*, const float*, float*, float*, float*,
                     const cpu::ConvShape&, float*, void*) {
  no_cuda("conv2d_backward");
}

void maxpool2x2_forward(const float*, float*, std::int32_t*, std::size_t, std::size_t,
                        std::size_t, std::size_t, void*) {
  no_cuda("maxpool2x2_forward");
}

void maxpool2x2_backward(const float*, const std::int32_t*, float*, std::size_t, std::size_t,
                         std::size_t, std::size_t, void*) {
  no_cuda("maxpool2x2_backward");
}

void relu_inplace(float*, std::size_t, void*) { no_cuda("relu_inplace"); }

void batchnorm_local_sums(const float*, std::size_t, std::size_t, std::size_t, double*, double*,
                          void*) {
  no_cuda("batchnorm_local_sums");
}

void batchnorm_finalize_stats(const double*, const double*, double, std::size_t, float, float,
                              float*, float*, float*, float*, void*) {
  no_cuda("batchnorm_finalize_stats");
}

void batchnorm_normalize(const float*, const float*, const float*, const float*, const float*,
                         float*, std::size_t, std::size_t, std::size_t, void*) {
  no_cuda("batchnorm_normalize");
}

void batchnorm_backward_reduce(const float*, const float*, const float*, const float*,
                               std::size_t, std::size_t, std::size_t, double*, double*, float*,
                               float*, void*) {
  no_cuda("batchnorm_backward_reduce");
}

void batchnorm_backward_elemt(const float*, const float*, const float*, const float*,
                              const float*, const double*, const double*, double, float*,
                              std::size_t, std::size_t, std::size_t, void*) {
  no_cuda("batchnorm_backward_elemt");
}

#endif  // DPBENCH_HAVE_CUDA

}  // namespace dpbench::cuda
