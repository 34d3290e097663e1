// The GPU training step of one rank, for "dpbench no slower than PyTorch eager": the MLP's
// forward, softmax cross-entropy, backward and SGD-momentum update on device buffers (CudaMlp,
// workloads/cuda_mlp.hpp), one step per iteration, timed with CUDA events on the compute stream
// (UseManualTime): the same work, shapes and precision as bench/reference/pytorch_reference.py's
// `plain` mode (784-4096-4096-10, batch 1024, tf32 by default), whose step time it is compared
// with. Counters: samples/s and the GEMMs' FLOP/s (6 * batch * weights per step: forward, and
// the input and weight gradients).
// Without a usable GPU every benchmark reports "no CUDA device: <reason>" as its error.
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/micro/micro_main.hpp"

#include "core/cuda_runtime.hpp"
#include "core/device.hpp"
#include "core/device_memory.hpp"
#include "workloads/cuda_kernels.hpp"
#include "workloads/cuda_mlp.hpp"

namespace dpbench {
namespace {

// One training step per iteration. range(0): batch; range(1): 1 for tf32, 0 for fp32;
// range(2), range(3): the two hidden widths.
void BM_CudaMlpTrainStep(benchmark::State& state) {
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    state.SkipWithError(("no CUDA device: " + probe.reason).c_str());
    return;
  }
  const auto batch = static_cast<std::size_t>(state.range(0));
  const auto precision = state.range(1) != 0 ? cuda::Precision::tf32 : cuda::Precision::fp32;
  const std::vector<std::size_t> dims{784, static_cast<std::size_t>(state.range(2)),
                                      static_cast<std::size_t>(state.range(3)), 10};
  cuda::set_device(0);
  MemoryTracker tracker;
  DeviceAllocator allocator(0, tracker);
  cuda::Stream stream;
  cuda::Blas blas(stream.handle(), precision);
  CudaMlp model(dims, blas);
  model.reserve(batch, allocator);
  const std::size_t n = model.num_params();

  std::vector<float> host_params(n);
  model.init_params(host_params.data(), 0);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> host_x(batch * dims.front());
  for (float& v : host_x) v = pixel(rng);
  std::vector<std::int32_t> host_y(batch);
  for (auto& y : host_y) y = static_cast<std::int32_t>(rng() % dims.back());

  DeviceBuffer<float> params(allocator, MemoryCategory::parameters, n);
  DeviceBuffer<float> grads(allocator, MemoryCategory::gradients, n);
  DeviceBuffer<float> velocity(allocator, MemoryCategory::optimizer_state, n);
  DeviceBuffer<float> x(allocator, MemoryCategory::data_staging, host_x.size());
  DeviceBuffer<std::int32_t> y(allocator, MemoryCategory::data_staging, batch);
  DeviceBuffer<float> logits(allocator, MemoryCategory::activations, batch * dims.back());
  DeviceBuffer<float> dlogits(allocator, MemoryCategory::activations, batch * dims.back());
  DeviceBuffer<float> loss(allocator, MemoryCategory::activations, 1);
  params.copy_from_host(host_params);
  x.copy_from_host(host_x);
  y.copy_from_host(host_y);

  cuda::Event start, stop;
  for (auto _ : state) {
    start.record(stream.handle());
    model.forward(params.data(), x.data(), batch, logits.data());
    cuda::softmax_cross_entropy(logits.data(), y.data(), batch, dims.back(), dlogits.data(),
                                1.0f / static_cast<float>(batch), loss.data(), stream.handle());
    model.backward(params.data(), x.data(), dlogits.data(), batch, grads.data(), nullptr);
    cuda::sgd_momentum(params.data(), grads.data(), velocity.data(), n, 0.01f, 0.9f, 0.0f, stream.handle());
    stop.record(stream.handle());
    stop.synchronize();
    state.SetIterationTime(static_cast<double>(cuda::Event::elapsed_ms(start, stop)) / 1e3);
  }
  double weights = 0;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) weights += static_cast<double>(dims[l] * dims[l + 1]);
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["flops"] = benchmark::Counter(6.0 * static_cast<double>(batch) * weights,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(cuda::to_string(precision)) + " " + probe.gpus.front().name);
}

BENCHMARK(BM_CudaMlpTrainStep)
    ->ArgNames({"batch", "tf32", "h1", "h2"})
    ->Args({1024, 1, 4096, 4096})
    ->Args({1024, 0, 4096, 4096})
    ->Args({256, 1, 512, 256})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinWarmUpTime(0.5);

}  // namespace
}  // namespace dpbench

DPBENCH_BENCHMARK_MAIN()
