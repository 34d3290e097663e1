// make_cuda_model_ops (cuda/cuda_model_ops.hpp): ModelOps<float> over the CUDA launchers.
#include "cuda/cuda_model_ops.hpp"

#include <optional>

#include "cuda/cuda_cnn_kernels.hpp"
#include "cuda/cuda_runtime.hpp"

namespace dpbench {
namespace {

class CudaModelOps final : public ModelOps<float> {
 public:
  CudaModelOps(cuda::Blas& blas, DeviceAllocator& allocator) : blas_(blas), allocator_(allocator) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    return allocator_.allocate_zeroed(bytes, category, stream(), true);
  }
  void release(void* ptr, std::size_t, MemoryCategory) noexcept override {
    try {
      allocator_.free(ptr);
    } catch (const std::exception&) {
      // cannot happen: the block came from this allocator
    }
  }
  void download(void* host_dst, const void* src, std::size_t bytes) override { copy_and_wait(host_dst, src, bytes); }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { copy_and_wait(dst, host_src, bytes); }

  void linear_forward(const float* x, const float* W, const float* b, float* y, std::size_t batch, std::size_t in,
                      std::size_t out, bool relu) override {
    cuda::linear_forward(blas_, x, W, b, y, batch, in, out, relu, stream());
  }
  void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW, float* db,
                       std::size_t batch, std::size_t in, std::size_t out) override {
    cuda::linear_backward(blas_, x, W, dy, dx, dW, db, batch, in, out, stream());
  }
  void relu_inplace(float* y, std::size_t n) override { cuda::relu_inplace(y, n, stream()); }
  void relu_backward_inplace(const float* y, float* dy, std::size_t n) override {
    cuda::relu_backward_inplace(y, dy, n, stream());
  }
  void conv2d_forward(const float* x, const float* w, const float* b, float* y, const cpu::ConvShape& s,
                      float* col) override {
    cuda::conv2d_forward(blas_, x, w, b, y, s, col, stream());
  }
  void conv2d_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, float* db,
                       const cpu::ConvShape& s, float* col) override {
    cuda::conv2d_backward(blas_, x, w, dy, dx, dw, db, s, col, stream());
  }
  void maxpool2x2_forward(const float* x, float* y, std::int32_t* argmax, std::size_t N, std::size_t C,
                          std::size_t H, std::size_t W) override {
    cuda::maxpool2x2_forward(x, y, argmax, N, C, H, W, stream());
  }
  void maxpool2x2_backward(const float* dy, const std::int32_t* argmax, float* dx, std::size_t N, std::size_t C,
                           std::size_t H, std::size_t W) override {
    cuda::maxpool2x2_backward(dy, argmax, dx, N, C, H, W, stream());
  }
  void batchnorm_local_sums(const float* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                            double* sumsq) override {
    cuda::batchnorm_local_sums(x, N, C, HW, sum, sumsq, stream());
  }
  void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, float eps,
                                float momentum, float* mean, float* invstd, float* running_mean,
                                float* running_var) override {
    cuda::batchnorm_finalize_stats(sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var,
                                   stream());
  }
  void batchnorm_normalize(const float* x, const float* mean, const float* invstd, const float* gamma,
                           const float* beta, float* y, std::size_t N, std::size_t C, std::size_t HW) override {
    cuda::batchnorm_normalize(x, mean, invstd, gamma, beta, y, N, C, HW, stream());
  }
  void batchnorm_backward_reduce(const float* dy, const float* x, const float* mean, const float* invstd,
                                 std::size_t N, std::size_t C, std::size_t HW, double* sum_dy, double* sum_dy_xmu,
                                 float* dgamma, float* dbeta) override {
    cuda::batchnorm_backward_reduce(dy, x, mean, invstd, N, C, HW, sum_dy, sum_dy_xmu, dgamma, dbeta, stream());
  }
  void batchnorm_backward_elemt(const float* dy, const float* x, const float* mean, const float* invstd,
                                const float* gamma, const double* sum_dy, const double* sum_dy_xmu, double count,
                                float* dx, std::size_t N, std::size_t C, std::size_t HW) override {
    cuda::batchnorm_backward_elemt(dy, x, mean, invstd, gamma, sum_dy, sum_dy_xmu, count, dx, N, C, HW, stream());
  }

 private:
  void* stream() const { return blas_.stream(); }
  // The copy on the stream, then the host waits for it (an event, created on first use).
  void copy_and_wait(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) cuda::memcpy_async(dst, src, bytes, stream());
    if (!event_) event_.emplace();
    event_->record(stream());
    event_->synchronize();
  }

  cuda::Blas& blas_;
  DeviceAllocator& allocator_;
  std::optional<cuda::Event> event_;
};

}  // namespace

std::shared_ptr<ModelOps<float>> make_cuda_model_ops(cuda::Blas& blas, DeviceAllocator& allocator) {
  return std::make_shared<CudaModelOps>(blas, allocator);
}

}  // namespace dpbench
