// Tests of the cnn workload on the GPU (workloads/cnn.hpp on cuda/cuda_model_ops.hpp) against
// the same model on the CPU: both start from the same initialisation and see the same random batch;
// logits, every parameter's gradient, the BatchNorm running statistics and the order of the
// gradient-ready calls are compared, in training and in evaluation mode, and with SyncBatchNorm
// over two identical "ranks"; and that the launches of a step do not depend on the batch.
// Shapes: 1x8x8 input, channels 4 and 6, hidden 16, 5 classes, batch 6. Without a usable GPU,
// or in a build without CUDA, every test is skipped with the reason (tests/cuda_test_util.hpp).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/device_memory.hpp"
#include "core/error.hpp"
#include "core/memory.hpp"
#include "tests/cuda_test_util.hpp"
#include "workloads/cnn.hpp"
#include "cuda/cuda_model_ops.hpp"
#include "cuda/cuda_kernels.hpp"

#include <cuda_runtime.h>

namespace dpbench {
namespace {

using testing::DeviceBuffer;  // tests/cuda_test_util.hpp (not core's DeviceBuffer)
using testing::random_floats;

// Relative L2 error ||got - want|| / ||want||. fp32 cuBLAS and OpenBLAS add the same products
// in different orders, and the BatchNorm sums are added in another order (in double on both
// sides); each rounding is 2^-24 (6e-8) relative, and over six layers and GEMMs of k <= 96 the
// two models end ~1e-6 apart. 1e-5 leaves a margin and still catches a wrong index, a missing
// term or batch statistics used in place of running ones (errors of 1e-2 and more).
constexpr double kFp32Tolerance = 1e-5;

const SampleShape kShape{1, 8, 8};
constexpr std::size_t kC1 = 4, kC2 = 6, kHidden = 16, kCudaCnnClasses = 5, kBatch = 6;
constexpr std::uint64_t kSeed = 1234;

// Infinity when the lengths differ or got holds a NaN (an output never written).
double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return std::numeric_limits<double>::infinity();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double d = static_cast<double>(got[i]) - static_cast<double>(want[i]);
    if (!std::isfinite(d)) return std::numeric_limits<double>::infinity();
    diff += d * d;
    norm += static_cast<double>(want[i]) * static_cast<double>(want[i]);
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<float> slice(const std::vector<float>& v, std::size_t offset, std::size_t size) {
  return {v.begin() + static_cast<std::ptrdiff_t>(offset), v.begin() + static_cast<std::ptrdiff_t>(offset + size)};
}

using testing::cuda_ok;

// n floats at a device pointer the test does not own (the model's buffers), after all work.
std::vector<float> device_floats(const float* ptr, std::size_t n) {
  cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  std::vector<float> host(n);
  cuda_ok(cudaMemcpy(host.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return host;
}

int current_device() {
  int device = 0;
  cuda_ok(cudaGetDevice(&device), "cudaGetDevice");
  return device;
}

bool is_device_pointer(const void* ptr) {
  cudaPointerAttributes attr{};
  return cudaPointerGetAttributes(&attr, ptr) == cudaSuccess && attr.type == cudaMemoryTypeDevice;
}

// SyncBatchNorm over two ranks that hold the same data, on the host (for Cnn).
class TwinHostSync final : public BatchNormSync {
 public:
  int world_size() const override { return 2; }
  void allgather(const float* send, float* recv, std::size_t n) override {
    std::memcpy(recv, send, n * sizeof(float));
    std::memcpy(recv + n, send, n * sizeof(float));
  }
  void allreduce_sum(float* buf, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) buf[i] += buf[i];
  }
};

// The same on device pointers (for the GPU model); counts calls and non-device pointers.
class TwinDeviceSync final : public BatchNormSync {
 public:
  int world_size() const override { return 2; }
  void allgather(const float* send, float* recv, std::size_t n) override {
    ++allgathers;
    if (!is_device_pointer(send) || !is_device_pointer(recv)) ++host_pointers;
    cuda_ok(cudaMemcpy(recv, send, n * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    cuda_ok(cudaMemcpy(recv + n, send, n * sizeof(float), cudaMemcpyDeviceToDevice), "cudaMemcpy");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // a blocking collective
  }
  void allreduce_sum(float* buf, std::size_t n) override {
    ++allreduces;
    if (!is_device_pointer(buf)) ++host_pointers;
    std::vector<float> host = device_floats(buf, n);
    for (float& x : host) x += x;
    cuda_ok(cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  int allgathers = 0, allreduces = 0, host_pointers = 0;
};

// Skips without a usable CUDA device; a stream per test. Each test builds the CPU and the GPU
// model with make_models() after SetUp, so nothing touches CUDA when the test is skipped.
class CudaCnnModel : public testing::CudaStreamTest {
 protected:
  void make_models(std::size_t reserve_batch = kBatch) {
    cpu_ = std::make_unique<Cnn>(kShape, kC1, kC2, kHidden, kCudaCnnClasses);
    cpu_->reserve(kBatch, host_tracker_);
    allocator_ = std::make_unique<DeviceAllocator>(current_device(), device_tracker_);
    blas_ = std::make_unique<cuda::Blas>(stream(), Precision::fp32);
    gpu_ = std::make_unique<Cnn>(kShape, kC1, kC2, kHidden, kCudaCnnClasses);
    gpu_->reserve(reserve_batch, make_cuda_model_ops(*blas_, *allocator_));
    params_.resize(cpu_->num_params());
    cpu_->init_params(params_.data(), kSeed);
    d_params_ = std::make_unique<DeviceBuffer<float>>(params_);
  }
  void TearDown() override {
    gpu_.reset();  // before the allocator and the Blas it uses
    blas_.reset();
    allocator_.reset();
    testing::CudaStreamTest::TearDown();
  }

  MemoryTracker host_tracker_, device_tracker_;
  std::unique_ptr<Cnn> cpu_;
  std::unique_ptr<DeviceAllocator> allocator_;
  std::unique_ptr<cuda::Blas> blas_;
  std::unique_ptr<Model> gpu_;
  std::vector<float> params_;
  std::unique_ptr<DeviceBuffer<float>> d_params_;
};

// One training step's forward + backward on both models; returns nothing, checks everything.
void expect_step_matches(Cnn& cpu, Model& gpu, const std::vector<float>& params, const float* d_params,
                         std::uint64_t seed) {
  const auto x = random_floats(kBatch * kShape.features(), seed);
  const auto dlogits = random_floats(kBatch * kCudaCnnClasses, seed + 1, 0.1f);

  std::vector<float> logits(kBatch * kCudaCnnClasses), grads(cpu.num_params());
  std::vector<std::size_t> cpu_order, gpu_order;
  cpu.forward(params.data(), x.data(), kBatch, logits.data());
  cpu.backward(params.data(), x.data(), dlogits.data(), kBatch, grads.data(),
               [&](std::size_t i) { cpu_order.push_back(i); });

  const DeviceBuffer<float> d_x(x), d_dlogits(dlogits);
  DeviceBuffer<float> d_logits(kBatch * kCudaCnnClasses), d_grads(cpu.num_params());  // 0xFF: NaN
  gpu.forward(d_params, d_x.get(), kBatch, d_logits.get());
  gpu.backward(d_params, d_x.get(), d_dlogits.get(), kBatch, d_grads.get(),
               [&](std::size_t i) { gpu_order.push_back(i); });

  // Tolerance: kFp32Tolerance (summation order only, see above).
  EXPECT_LT(rel_l2(d_logits.to_host(), logits), kFp32Tolerance) << "logits";
  const auto got = d_grads.to_host();
  for (const ParamView& v : cpu.params()) {
    EXPECT_LT(rel_l2(slice(got, v.offset, v.size), slice(grads, v.offset, v.size)), kFp32Tolerance)
        << "gradient of " << v.name;
  }
  EXPECT_EQ(gpu_order, cpu_order);
  EXPECT_EQ(cpu_order, (std::vector<std::size_t>{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
}

// The four running-statistics segments of the buffers, compared one by one.
void expect_buffers_match(Cnn& cpu, Model& gpu) {
  ASSERT_EQ(gpu.num_buffers(), cpu.num_buffers());
  const auto got = device_floats(gpu.buffers(), gpu.num_buffers());
  const std::vector<float> want(cpu.buffers(), cpu.buffers() + cpu.num_buffers());
  struct Segment {
    const char* name;
    std::size_t offset, size;
  };
  for (const Segment& s : {Segment{"bn1.running_mean", 0, kC1}, Segment{"bn1.running_var", kC1, kC1},
                           Segment{"bn2.running_mean", 2 * kC1, kC2}, Segment{"bn2.running_var", 2 * kC1 + kC2, kC2}}) {
    // Running statistics come from double sums on both sides, then float: 1e-5 as above.
    EXPECT_LT(rel_l2(slice(got, s.offset, s.size), slice(want, s.offset, s.size)), kFp32Tolerance) << s.name;
  }
}

TEST_F(CudaCnnModel, ForwardAndBackwardMatchCpu) {
  make_models();
  ASSERT_EQ(gpu_->num_params(), cpu_->num_params());
  ASSERT_EQ(gpu_->params().size(), cpu_->params().size());
  for (std::size_t i = 0; i < cpu_->params().size(); ++i) {
    EXPECT_EQ(gpu_->params()[i].name, cpu_->params()[i].name);
    EXPECT_EQ(gpu_->params()[i].offset, cpu_->params()[i].offset);
  }
  // The same initialisation bit for bit.
  std::vector<float> gpu_init(gpu_->num_params());
  gpu_->init_params(gpu_init.data(), kSeed);
  EXPECT_EQ(std::memcmp(gpu_init.data(), params_.data(), params_.size() * sizeof(float)), 0);

  expect_step_matches(*cpu_, *gpu_, params_, d_params_->get(), 11);
  // A second step reuses every activation buffer (and updates the running statistics again).
  expect_step_matches(*cpu_, *gpu_, params_, d_params_->get(), 21);
}

TEST_F(CudaCnnModel, EvalModeUsesRunningStatistics) {
  make_models();
  // Before any forward: running_mean 0, running_var 1 on both.
  expect_buffers_match(*cpu_, *gpu_);
  const auto x = random_floats(kBatch * kShape.features(), 31, 1.0f, 0.5f);
  std::vector<float> logits(kBatch * kCudaCnnClasses);
  const DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_logits(kBatch * kCudaCnnClasses);
  cpu_->forward(params_.data(), x.data(), kBatch, logits.data());
  gpu_->forward(d_params_->get(), d_x.get(), kBatch, d_logits.get());
  expect_buffers_match(*cpu_, *gpu_);  // one momentum-0.1 update from the batch statistics

  cpu_->set_training(false);
  gpu_->set_training(false);
  const auto x2 = random_floats(kBatch * kShape.features(), 32);
  const DeviceBuffer<float> d_x2(x2);
  cpu_->forward(params_.data(), x2.data(), kBatch, logits.data());
  gpu_->forward(d_params_->get(), d_x2.get(), kBatch, d_logits.get());
  // Tolerance: kFp32Tolerance (summation order only). Normalising with x2's batch statistics
  // instead of the running ones (0.1 of the first batch's, x shifted by 0.5) would be far off.
  EXPECT_LT(rel_l2(d_logits.to_host(), logits), kFp32Tolerance) << "eval logits";
  expect_buffers_match(*cpu_, *gpu_);  // evaluation leaves the running statistics alone
}

TEST_F(CudaCnnModel, SyncBatchNormOverIdenticalRanksMatchesCpu) {
  make_models();
  TwinHostSync host_sync;
  TwinDeviceSync device_sync;
  cpu_->set_batchnorm_sync(&host_sync);
  gpu_->set_batchnorm_sync(&device_sync);
  expect_step_matches(*cpu_, *gpu_, params_, d_params_->get(), 41);
  expect_buffers_match(*cpu_, *gpu_);    // running_var from the combined count (2 * n * HW)
  EXPECT_EQ(device_sync.allgathers, 2);  // one per BatchNorm layer in forward
  EXPECT_EQ(device_sync.allreduces, 2);  // and one in backward
  EXPECT_EQ(device_sync.host_pointers, 0);
}

TEST_F(CudaCnnModel, LaunchesPerStepDoNotDependOnTheBatch) {
  // Batched convolution (one chunk per conv at these sizes): a forward + backward enqueues the
  // same launches (cuda::launch_count(): kernels and cuBLAS calls) for 1 sample as for 6.
  // Forward, per block: conv 3 (im2col, GEMM, permute) + BatchNorm sums 2 (2-D grid, second
  // pass) + finalize + normalize + ReLU + pool = 9, twice; two linear layers 2 each: 22.
  // Backward: two linear layers 3 each, ReLU 1; block 2: pool + ReLU + BatchNorm reduce 2 +
  // elemt + conv 5 (im2col, permute, dW GEMM, dcol GEMM, col2im) = 10; block 1 (no dx) 8: 25.
  make_models();
  auto launches = [&](std::size_t n) {
    const DeviceBuffer<float> d_x(random_floats(n * kShape.features(), 61));
    const DeviceBuffer<float> d_dlogits(random_floats(n * kCudaCnnClasses, 62, 0.1f));
    DeviceBuffer<float> d_logits(n * kCudaCnnClasses), d_grads(gpu_->num_params());
    const std::uint64_t before = cuda::launch_count();
    gpu_->forward(d_params_->get(), d_x.get(), n, d_logits.get());
    gpu_->backward(d_params_->get(), d_x.get(), d_dlogits.get(), n, d_grads.get(), {});
    return cuda::launch_count() - before;
  };
  const std::uint64_t one = launches(1), full = launches(kBatch);
  EXPECT_EQ(one, full);
  EXPECT_EQ(full, 47u);
}

TEST_F(CudaCnnModel, BatchBeyondReservedThrows) {
  make_models(4);
  const DeviceBuffer<float> d_x(random_floats(5 * kShape.features(), 51));
  const DeviceBuffer<float> d_dlogits(random_floats(5 * kCudaCnnClasses, 52));
  DeviceBuffer<float> d_logits(5 * kCudaCnnClasses), d_grads(gpu_->num_params());
  EXPECT_THROW(gpu_->forward(d_params_->get(), d_x.get(), 5, d_logits.get()), Error);
  EXPECT_THROW(gpu_->backward(d_params_->get(), d_x.get(), d_dlogits.get(), 5, d_grads.get(), {}), Error);
  // The reserved size itself is fine.
  EXPECT_NO_THROW(gpu_->forward(d_params_->get(), d_x.get(), 4, d_logits.get()));
  EXPECT_TRUE(std::isfinite(d_logits.to_host()[0]));
}

}  // namespace
}  // namespace dpbench
