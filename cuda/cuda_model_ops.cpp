// make_cuda_model_ops (cuda/cuda_model_ops.hpp): the launchers of cuda/cuda_cnn_kernels.hpp's
// ModelLaunchers, plus device memory from the caching allocator and host copies on the stream.
#include "cuda/cuda_model_ops.hpp"

#include <optional>

#include "cuda/cuda_cnn_kernels.hpp"
#include "cuda/cuda_runtime.hpp"

namespace dpbench {
namespace {

class CudaModelOps final : public cuda::ModelLaunchers {
 public:
  CudaModelOps(cuda::Blas& blas, DeviceAllocator& allocator) : ModelLaunchers(blas, allocator), allocator_(allocator) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    return allocator_.allocate_zeroed(bytes, category, stream(), true);
  }
  void release(void* ptr, std::size_t, MemoryCategory) noexcept override { allocator_.release(ptr); }
  void download(void* host_dst, const void* src, std::size_t bytes) override { copy_and_wait(host_dst, src, bytes); }
  void upload(void* dst, const void* host_src, std::size_t bytes) override { copy_and_wait(dst, host_src, bytes); }

 private:
  // The copy on the stream, then the host waits for it (an event, created on first use).
  void copy_and_wait(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) cuda::memcpy_async(dst, src, bytes, stream());
    if (!event_) event_.emplace(cuda::Event::Timing::off);
    event_->record(stream());
    event_->synchronize();
  }

  DeviceAllocator& allocator_;
  std::optional<cuda::Event> event_;
};

}  // namespace

std::shared_ptr<ModelOps<float>> make_cuda_model_ops(cuda::Blas& blas, DeviceAllocator& allocator) {
  return std::make_shared<CudaModelOps>(blas, allocator);
}

}  // namespace dpbench
