// The CPU's ModelOps (workloads/model_ops.hpp): the OpenBLAS and plain C++ kernels of
// workloads/cpu_kernels.hpp and cnn_kernels.hpp on host memory charged to a MemoryTracker
// (64-byte aligned, zeroed, exactly as TrackedBuffer). Work completes when a call returns.
#include <cstring>
#include <new>

#include "workloads/cnn_kernels.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/model_ops.hpp"

namespace dpbench {
namespace {

template <typename T>
class CpuModelOps final : public ModelOps<T> {
 public:
  explicit CpuModelOps(MemoryTracker& tracker) : tracker_(tracker) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    void* p = ::operator new[](bytes, std::align_val_t{64});
    std::memset(p, 0, bytes);
    tracker_.on_alloc(category, bytes);
    return p;
  }
  void release(void* ptr, std::size_t bytes, MemoryCategory category) noexcept override {
    tracker_.on_free(category, bytes);
    ::operator delete[](ptr, std::align_val_t{64});
  }
  void download(void* host_dst, const void* src, std::size_t bytes) override {
    if (bytes > 0 && host_dst != src) std::memcpy(host_dst, src, bytes);
  }
  void upload(void* dst, const void* host_src, std::size_t bytes) override {
    if (bytes > 0 && dst != host_src) std::memcpy(dst, host_src, bytes);
  }

  void linear_forward(const T* x, const T* W, const T* b, T* y, std::size_t batch, std::size_t in, std::size_t out,
                      bool relu) override {
    cpu::linear_forward(x, W, b, y, batch, in, out, relu);
  }
  void linear_backward(const T* x, const T* W, const T* dy, T* dx, T* dW, T* db, std::size_t batch, std::size_t in,
                       std::size_t out) override {
    cpu::linear_backward(x, W, dy, dx, dW, db, batch, in, out);
  }
  void relu_inplace(T* y, std::size_t n) override { cpu::relu_inplace(y, n); }
  void relu_backward_inplace(const T* y, T* dy, std::size_t n) override { cpu::relu_backward_inplace(y, dy, n); }

  void conv2d_forward(const T* x, const T* w, const T* b, T* y, const cpu::ConvShape& s, T* ws) override {
    cpu::conv2d_forward(x, w, b, y, s, ws);
  }
  void conv2d_backward(const T* x, const T* w, const T* dy, T* dx, T* dw, T* db, const cpu::ConvShape& s,
                       T* ws) override {
    cpu::conv2d_backward(x, w, dy, dx, dw, db, s, ws);
  }
  void maxpool2x2_forward(const T* x, T* y, std::int32_t* argmax, std::size_t N, std::size_t C, std::size_t H,
                          std::size_t W) override {
    cpu::maxpool2x2_forward(x, y, argmax, N, C, H, W);
  }
  void maxpool2x2_backward(const T* dy, const std::int32_t* argmax, T* dx, std::size_t N, std::size_t C, std::size_t H,
                           std::size_t W) override {
    cpu::maxpool2x2_backward(dy, argmax, dx, N, C, H, W);
  }

  void batchnorm_local_sums(const T* x, std::size_t N, std::size_t C, std::size_t HW, double* sum,
                            double* sumsq) override {
    cpu::batchnorm_local_sums(x, N, C, HW, sum, sumsq);
  }
  void batchnorm_finalize_stats(const double* sum, const double* sumsq, double count, std::size_t C, T eps, T momentum,
                                T* mean, T* invstd, T* running_mean, T* running_var) override {
    cpu::batchnorm_finalize_stats(sum, sumsq, count, C, eps, momentum, mean, invstd, running_mean, running_var);
  }
  void batchnorm_normalize(const T* x, const T* mean, const T* invstd, const T* gamma, const T* beta, T* y,
                           std::size_t N, std::size_t C, std::size_t HW) override {
    cpu::batchnorm_normalize(x, mean, invstd, gamma, beta, y, N, C, HW);
  }
  void batchnorm_backward_reduce(const T* dy, const T* x, const T* mean, const T* invstd, std::size_t N, std::size_t C,
                                 std::size_t HW, double* sum_dy, double* sum_dy_xmu, T* dgamma, T* dbeta) override {
    cpu::batchnorm_backward_reduce(dy, x, mean, invstd, N, C, HW, sum_dy, sum_dy_xmu, dgamma, dbeta);
  }
  void batchnorm_backward_elemt(const T* dy, const T* x, const T* mean, const T* invstd, const T* gamma,
                                const double* sum_dy, const double* sum_dy_xmu, double count, T* dx, std::size_t N,
                                std::size_t C, std::size_t HW) override {
    cpu::batchnorm_backward_elemt(dy, x, mean, invstd, gamma, sum_dy, sum_dy_xmu, count, dx, N, C, HW);
  }

  void embedding_bag_sum_forward(const T* tables, const T* x, T* out, std::size_t batch,
                                 const cpu::BagShape& s) override {
    cpu::embedding_bag_sum_forward(tables, x, out, batch, s);
  }
  void embedding_bag_sum_backward(const T* x, const T* d_out, T* dtables, std::size_t batch,
                                  const cpu::BagShape& s) override {
    cpu::embedding_bag_sum_backward(x, d_out, dtables, batch, s);
  }
  void dot_interaction_forward(const T* z, const T* bags, T* r, std::size_t batch, std::size_t tables,
                               std::size_t dim) override {
    cpu::dot_interaction_forward(z, bags, r, batch, tables, dim);
  }
  void dot_interaction_backward(const T* z, const T* bags, const T* dr, T* dz, T* dbags, std::size_t batch,
                                std::size_t tables, std::size_t dim) override {
    cpu::dot_interaction_backward(z, bags, dr, dz, dbags, batch, tables, dim);
  }
  void copy_columns(const T* src, std::size_t src_stride, T* dst, std::size_t width, std::size_t rows) override {
    cpu::copy_columns(src, src_stride, dst, width, rows);
  }

 private:
  MemoryTracker& tracker_;
};

}  // namespace

template <typename T>
std::shared_ptr<ModelOps<T>> make_cpu_model_ops(MemoryTracker& tracker) {
  return std::make_shared<CpuModelOps<T>>(tracker);
}

template std::shared_ptr<ModelOps<float>> make_cpu_model_ops<float>(MemoryTracker&);
template std::shared_ptr<ModelOps<double>> make_cpu_model_ops<double>(MemoryTracker&);

}  // namespace dpbench
