// The GPU training step of one rank, for "dpbench no slower than PyTorch eager": the MLP's
// forward, softmax cross-entropy, backward and SGD-momentum update on device buffers (Mlp,
// workloads/mlp.hpp, on cuda/cuda_model_ops.hpp), one step per iteration: the same work and shapes as
// bench/reference/pytorch_reference.py's `plain` mode (784-4096-4096-10, batch 1024), whose step
// time it is compared with. Precision: both default to tf32; compare the fp32 row with the
// reference's `--precision fp32`. And the default CNN's step (workloads/cnn.hpp), with its
// launches per step counted (launches_per_step: kernels of dpbench's launchers and cuBLAS calls,
// cuda::launch_count()), which batched convolution makes independent of the batch size.
// Timing as the reference (and `dpbench run`) time a step: wall clock from fetching the batch (a
// copy out of a device-resident training set, as the reference gathers its batch from one) to the
// host having synchronised with the step's end, each iteration one sample (UseManualTime). The
// reported time is Google Benchmark's mean of them; step_p50_ms and samples_per_s_p50 are the
// medians the reference reports; gpu_ms is the CUDA-event time of the step on the stream.
// Counters: samples/s and the GEMMs' FLOP/s (each benchmark states its FLOPs per step), and the
// FLOP/s over the card's datasheet peak. Rows with graph:1 replay each step as a CUDA graph
// captured from the same launches (one launch per step instead of 18 or 49).
// Without a usable GPU every benchmark reports "no CUDA device: <reason>" as its error.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/micro/micro_main.hpp"

#include "cuda/cuda_runtime.hpp"
#include "core/device.hpp"
#include "cuda/device_memory.hpp"
#include "core/stats.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_model_ops.hpp"
#include "workloads/cnn.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {
namespace {

// The card's dense peak in TFLOP/s for `precision` from NVIDIA's datasheets (tensor-core TF32
// without sparsity, i.e. half the datasheet's sparse figure; FP32 on the CUDA cores), matched on
// the device name; 0 for a card not listed. H100 SXM5 and H200 SXM: 494.7 TF32, 66.9 FP32; H100
// PCIe: 378 and 51; A100: 156 and 19.5.
double datasheet_peak_tflops(const std::string& name, Precision precision) {
  struct Peak {
    const char* name_part;
    double tf32, fp32;
  };
  static const Peak kPeaks[] = {
      {"H200", 494.7, 66.9}, {"H100 PCIe", 378.0, 51.0}, {"H100", 494.7, 66.9}, {"A100", 156.0, 19.5}};
  for (const Peak& p : kPeaks) {
    if (name.find(p.name_part) != std::string::npos) return precision == Precision::tf32 ? p.tf32 : p.fp32;
  }
  return 0.0;
}

// Batches of the device-resident training set; each step copies the next one into its batch.
constexpr std::size_t kSetBatches = 4;

// `rows` samples of `features` floats in [0, 1) and labels in [0, classes), seeded.
std::pair<std::vector<float>, std::vector<std::int32_t>> random_set(std::size_t rows, std::size_t features,
                                                                    std::size_t classes) {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  std::vector<float> x(rows * features);
  for (float& v : x) v = pixel(rng);
  std::vector<std::int32_t> y(rows);
  for (auto& label : y) label = static_cast<std::int32_t>(rng() % classes);
  return {std::move(x), std::move(y)};
}

// One step's device buffers: parameters, gradients and momentum [n], the device-resident set
// (kSetBatches batches), this step's batch, logits and their gradient [batch, classes], the loss.
struct StepBuffers {
  StepBuffers(DeviceAllocator& a, std::size_t n, std::size_t batch, std::size_t features, std::size_t classes)
      : params(a, MemoryCategory::parameters, n),
        grads(a, MemoryCategory::gradients, n),
        velocity(a, MemoryCategory::optimizer_state, n),
        set_x(a, MemoryCategory::data_staging, kSetBatches * batch * features),
        set_y(a, MemoryCategory::data_staging, kSetBatches * batch),
        x(a, MemoryCategory::data_staging, batch * features),
        y(a, MemoryCategory::data_staging, batch),
        logits(a, MemoryCategory::activations, batch * classes),
        dlogits(a, MemoryCategory::activations, batch * classes),
        loss(a, MemoryCategory::activations, 1) {}
  DeviceBuffer<float> params, grads, velocity, set_x;
  DeviceBuffer<std::int32_t> set_y;
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> y;
  DeviceBuffer<float> logits, dlogits, loss;
};

// samples/s and flops (rates over the iterations), step_p50_ms and samples_per_s_p50 (the median
// of `wall`, each step's seconds).
void set_step_counters(benchmark::State& state, std::size_t batch, double step_flops, std::vector<double> wall) {
  state.counters["samples_per_s"] = benchmark::Counter(static_cast<double>(batch),
                                                       benchmark::Counter::kIsIterationInvariantRate);
  state.counters["flops"] = benchmark::Counter(step_flops, benchmark::Counter::kIsIterationInvariantRate);
  const double p50 = median(wall);
  state.counters["step_p50_ms"] = 1e3 * p50;
  state.counters["samples_per_s_p50"] = p50 > 0 ? static_cast<double>(batch) / p50 : 0.0;
}

// peak_tflops and of_peak (the steps' GEMM FLOP rate over the peak; `wall`: each step's
// seconds), unless the peak is unknown (0).
void set_peak_counters(benchmark::State& state, double peak_tflops, double step_flops,
                       const std::vector<double>& wall) {
  double timed_s = 0;
  for (double w : wall) timed_s += w;
  if (!(peak_tflops > 0) || !(timed_s > 0)) return;
  state.counters["peak_tflops"] = peak_tflops;
  state.counters["of_peak"] = step_flops * static_cast<double>(wall.size()) / timed_s / (peak_tflops * 1e12);
}

// The benchmark's loop: iteration i runs step b = i % kSetBatches (enqueue(b), or with `graph`
// the replay of a CUDA graph captured from enqueue(b) before the loop, after one step outside a
// capture) between two events on `stream`, waits for it and records its wall time as the
// iteration's (SetIterationTime). Sets launches_per_step (a graph's replay counts one) and gpu_ms
// (the events' time). Returns each step's wall seconds. Throws cuda's Error (e.g. a capture
// failing).
std::vector<double> run_timed_steps(benchmark::State& state, cuda::Stream& stream,
                                    const std::function<void(std::size_t)>& enqueue, bool graph) {
  std::vector<cuda::Graph> graphs;
  if (graph) {
    enqueue(0);
    stream.synchronize();
    for (std::size_t b = 0; b < kSetBatches; ++b) graphs.emplace_back(stream.handle(), [&] { enqueue(b); });
  }
  cuda::Event start, stop;
  std::vector<double> wall;
  double gpu_s = 0;
  std::size_t step = 0;
  const std::uint64_t launches_before = cuda::launch_count();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    start.record(stream.handle());
    const std::size_t b = step++ % kSetBatches;
    if (graphs.empty()) {
      enqueue(b);
    } else {
      graphs[b].launch(stream.handle());
    }
    stop.record(stream.handle());
    stop.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(seconds);
    wall.push_back(seconds);
    gpu_s += static_cast<double>(cuda::Event::elapsed_ms(start, stop)) / 1e3;
  }
  const double steps = static_cast<double>(std::max<std::size_t>(step, 1));
  state.counters["launches_per_step"] = static_cast<double>(cuda::launch_count() - launches_before) / steps;
  state.counters["gpu_ms"] = benchmark::Counter(1e3 * gpu_s, benchmark::Counter::kAvgIterations);
  return wall;
}

// Times one training step of the model make_model() builds per iteration on GPU 0: range(0) samples
// (the batch) of model.input_features() floats in [0, 1) and random labels, copied out of a
// device-resident set of kSetBatches batches, forward, loss, backward, SGD momentum; range(1): 1
// for tf32, 0 for fp32. step_flops: the step's GEMM FLOPs (the "flops" rate counter, and
// of_peak: that rate over the card's datasheet peak, datasheet_peak_tflops, where listed). Also counts
// the step's launches (cuda::launch_count(): every kernel of dpbench's launchers and every cuBLAS
// call) as launches_per_step. Without a usable GPU: SkipWithError with the reason. The model is
// built here, after the allocator and cuBLAS handle its kernels hold, so that it releases its
// activations before they go. With `graph`, each step replays a CUDA graph of its launches
// (run_timed_steps); a step that cannot be captured reports the error.
void time_train_steps(benchmark::State& state, const std::function<std::unique_ptr<Model>()>& make_model,
                      double step_flops, bool graph) {
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) {
    state.SkipWithError(("no CUDA device: " + probe.reason).c_str());
    return;
  }
  const auto batch = static_cast<std::size_t>(state.range(0));
  const auto precision = state.range(1) != 0 ? Precision::tf32 : Precision::fp32;
  cuda::set_device(0);
  MemoryTracker tracker;
  DeviceAllocator allocator(0, tracker);
  cuda::Stream stream;
  cuda::Blas blas(stream.handle(), precision);
  const std::unique_ptr<Model> owned = make_model();
  Model& model = *owned;
  model.reserve(batch, make_cuda_model_ops(blas, allocator));
  const std::size_t n = model.num_params(), features = model.input_features(), classes = model.num_classes();

  std::vector<float> host_params(n);
  model.init_params(host_params.data(), 0);
  const std::size_t batch_floats = batch * features;
  const auto [host_x, host_y] = random_set(kSetBatches * batch, features, classes);

  StepBuffers d(allocator, n, batch, features, classes);
  auto& [params, grads, velocity, set_x, set_y, x, y, logits, dlogits, loss] = d;
  params.copy_from_host(host_params, stream.handle());
  set_x.copy_from_host(host_x, stream.handle());
  set_y.copy_from_host(host_y, stream.handle());

  // One step on batch b of the set, enqueued on the stream.
  const auto enqueue = [&](std::size_t b) {
    cuda::memcpy_async(x.data(), set_x.data() + b * batch_floats, batch_floats * sizeof(float), stream.handle());
    cuda::memcpy_async(y.data(), set_y.data() + b * batch, batch * sizeof(std::int32_t), stream.handle());
    model.forward(params.data(), x.data(), batch, logits.data());
    cuda::softmax_cross_entropy(logits.data(), y.data(), batch, classes, dlogits.data(),
                                1.0f / static_cast<float>(batch), loss.data(), stream.handle());
    model.backward(params.data(), x.data(), dlogits.data(), batch, grads.data(), nullptr);
    cuda::sgd_momentum(params.data(), grads.data(), velocity.data(), n, 0.01f, 0.9f, 0.0f, stream.handle());
  };
  std::vector<double> wall;
  try {
    wall = run_timed_steps(state, stream, enqueue, graph);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  set_step_counters(state, batch, step_flops, wall);
  set_peak_counters(state, datasheet_peak_tflops(probe.gpus.front().name, precision), step_flops, wall);
  state.SetLabel(std::string(name(precision)) + " " + probe.gpus.front().name);
}

// One MLP training step per iteration. range(0): batch; range(1): 1 for tf32, 0 for fp32;
// range(2), range(3): the two hidden widths; range(4): 1 to replay the step as a CUDA graph. FLOPs per step: 2 * batch * weights for the forward
// and as much for each of the weight and input gradients, but no input gradient for the first
// layer.
void BM_CudaMlpTrainStep(benchmark::State& state) {
  const std::vector<std::size_t> dims{784, static_cast<std::size_t>(state.range(2)),
                                      static_cast<std::size_t>(state.range(3)), 10};
  double weights = 0;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) weights += static_cast<double>(dims[l] * dims[l + 1]);
  const double first_layer = static_cast<double>(dims[0] * dims[1]);  // no input gradient
  time_train_steps(
      state, [&] { return std::make_unique<Mlp<float>>(dims); },
      static_cast<double>(state.range(0)) * (6.0 * weights - 2.0 * first_layer), state.range(4) != 0);
}

BENCHMARK(BM_CudaMlpTrainStep)
    ->ArgNames({"batch", "tf32", "h1", "h2", "graph"})
    ->Args({1024, 1, 4096, 4096, 0})
    ->Args({1024, 0, 4096, 4096, 0})
    ->Args({256, 1, 512, 256, 0})
    ->Args({1024, 1, 4096, 4096, 1})
    ->Args({256, 1, 512, 256, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinWarmUpTime(0.5);

// One training step of the default CNN of `dpbench run --workload cnn` (1x28x28, channels 16 and
// 32, hidden 128, 10 classes) per iteration. range(0): batch; range(1): 1 for tf32, 0 for fp32;
// range(2): 1 to replay the step as a CUDA graph.
// Its convolutions run over the whole batch (workloads/conv_layout.hpp), so launches_per_step is
// the same for every batch whose convolutions fit one chunk (up to 486 samples here). FLOPs: per
// conv 2*N*P*Q*K*C*R*S for the forward GEMM, as much for dW and dx (not the first layer), and
// the linear layers as for the MLP.
void BM_CudaCnnTrainStep(benchmark::State& state) {
  const double n = static_cast<double>(state.range(0));
  const double conv1 = 2.0 * n * 28 * 28 * 16 * 1 * 9, conv2 = 2.0 * n * 14 * 14 * 32 * 16 * 9;
  const double fc1 = 2.0 * n * (32 * 7 * 7) * 128, fc2 = 2.0 * n * 128 * 10;
  time_train_steps(
      state,
      [] {
    return std::make_unique<Cnn>(SampleShape{1, 28, 28}, 16, 32, 128, 10);
      },
      2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2, state.range(2) != 0);
}

BENCHMARK(BM_CudaCnnTrainStep)
    ->ArgNames({"batch", "tf32", "graph"})
    ->Args({64, 1, 0})
    ->Args({256, 1, 0})
    ->Args({256, 0, 0})
    ->Args({64, 1, 1})
    ->Args({256, 1, 1})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinWarmUpTime(0.5);

}  // namespace
}  // namespace dpbench

DPBENCH_BENCHMARK_MAIN()
