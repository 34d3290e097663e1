// Micro-benchmarks of the CPU training kernels one data-parallel rank runs per step: the Linear
// layer's forward (OpenBLAS SGEMM + bias + ReLU) and backward (two SGEMMs), softmax
// cross-entropy, the SGD-momentum update over the default MLP's 535,818 parameters, and one
// whole training step of that MLP (784-512-256-10: forward, loss, backward, SGD) and of the
// default CNN. The MLP's step also reports its SGEMMs alone (gemm_ms) and their share of the
// step (gemm_share = gemm_ms / step_ms).
// How: inputs are random-initialised outside the timed loop; the GEMM-based benchmarks use wall
// time (UseRealTime, since OpenBLAS may run several threads), the single-threaded kernels CPU
// time; "flops" counts 2*M*N*K per GEMM (bias, ReLU and loss work
// not counted) as a rate in FLOP/s; memory-bound kernels report bytes/s through
// SetBytesProcessed. GEMM benchmarks run with blas_threads 1 (what one rank gets when ranks fill
// the cores) and with every core.
// Not for: CUDA kernels, or comparing synchronisation modes (see dpbench_collectives and the
// `dpbench` command).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>
#include <cblas.h>

#include "bench/micro/micro_main.hpp"

#include "core/memory.hpp"
#include "workloads/cnn.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {
namespace {

// The default MLP of `dpbench run`: Fashion-MNIST 784 -> 512 -> 256 -> 10.
const std::vector<std::size_t> kDefaultMlp{784, 512, 256, 10};
constexpr std::size_t kDefaultMlpParams = 535818;

std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<std::int32_t> random_labels(std::size_t n, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, classes - 1);
  std::vector<std::int32_t> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

int all_cores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// Args {batch, in, out, blas_threads}: the default MLP's two large layers at batch 64 and 256,
// each with 1 BLAS thread and with every core.
void linear_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "in", "out", "blas_threads"});
  std::vector<int> threads{1};
  if (all_cores() > 1) threads.push_back(all_cores());
  for (int t : threads) {
    for (std::int64_t batch : {64, 256}) {
      b->Args({batch, 784, 512, t});
      b->Args({batch, 512, 256, t});
    }
  }
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// Args {batch, blas_threads}: batch 64 and 256, 1 BLAS thread and every core.
void train_step_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "blas_threads"});
  std::vector<int> threads{1};
  if (all_cores() > 1) threads.push_back(all_cores());
  for (int t : threads) {
    for (std::int64_t batch : {64, 256}) b->Args({batch, t});
  }
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}

// Records OpenBLAS's description of itself (version, core, threading) in the output's context.
const bool kBlasContext = [] {
  benchmark::AddCustomContext("blas", cpu::blas_config());
  return true;
}();

}  // namespace
}  // namespace dpbench

using namespace dpbench;

// Linear forward: y[batch, out] = relu(x[batch, in] . W^T + b), one SGEMM of 2*batch*in*out FLOPs.
static void BM_Sgemm(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const auto in = static_cast<std::size_t>(state.range(1));
  const auto out = static_cast<std::size_t>(state.range(2));
  cpu::set_blas_threads(static_cast<int>(state.range(3)));
  const std::vector<float> x = random_floats(batch * in, 1);
  const std::vector<float> W = random_floats(out * in, 2);
  const std::vector<float> b = random_floats(out, 3);
  std::vector<float> y(batch * out);
  for (auto _ : state) {
    cpu::linear_forward(x.data(), W.data(), b.data(), y.data(), batch, in, out, true);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.counters["flops"] = benchmark::Counter(2.0 * static_cast<double>(batch * in * out),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
}
BENCHMARK(BM_Sgemm)->Apply(linear_args);

// Linear backward with the input gradient: dW = dy^T . x and dx = dy . W (2 SGEMMs, together
// 4*batch*in*out FLOPs) plus db = column sums of dy.
static void BM_LinearBackward(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const auto in = static_cast<std::size_t>(state.range(1));
  const auto out = static_cast<std::size_t>(state.range(2));
  cpu::set_blas_threads(static_cast<int>(state.range(3)));
  const std::vector<float> x = random_floats(batch * in, 1);
  const std::vector<float> W = random_floats(out * in, 2);
  const std::vector<float> dy = random_floats(batch * out, 3);
  std::vector<float> dx(batch * in), dW(out * in), db(out);
  for (auto _ : state) {
    cpu::linear_backward(x.data(), W.data(), dy.data(), dx.data(), dW.data(), db.data(), batch, in, out);
    benchmark::DoNotOptimize(dx.data());
    benchmark::DoNotOptimize(dW.data());
    benchmark::ClobberMemory();
  }
  state.counters["flops"] = benchmark::Counter(4.0 * static_cast<double>(batch * in * out),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
}
BENCHMARK(BM_LinearBackward)->Apply(linear_args);

// Softmax cross-entropy with its gradient over logits[batch, classes]. Bytes: the logits read and
// the gradient written (labels not counted).
static void BM_SoftmaxCrossEntropy(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  const auto classes = static_cast<std::size_t>(state.range(1));
  const std::vector<float> logits = random_floats(batch * classes, 1, -5.0f, 5.0f);
  const std::vector<std::int32_t> labels = random_labels(batch, static_cast<int>(classes), 2);
  std::vector<float> dlogits(batch * classes);
  double loss = 0;
  for (auto _ : state) {
    loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), batch, classes, dlogits.data(),
                                      1.0f / static_cast<float>(batch));
    benchmark::DoNotOptimize(loss);
    benchmark::ClobberMemory();
  }
  if (!std::isfinite(loss)) state.SkipWithError("loss is not finite");
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(2 * batch * classes * sizeof(float)));
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
}
BENCHMARK(BM_SoftmaxCrossEntropy)->ArgNames({"batch", "classes"})->Args({64, 10})->Args({256, 10})->Args({256, 1000});

// SGD with momentum over n parameters (PyTorch semantics, lr 0.01, momentum 0.9, weight decay
// 5e-4). Bytes: params, grads and velocity read, velocity and params written: 5 * 4 * n.
static void BM_SgdMomentum(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  std::vector<float> params = random_floats(n, 1, -0.05f, 0.05f);
  const std::vector<float> grads = random_floats(n, 2, -0.01f, 0.01f);
  std::vector<float> velocity = random_floats(n, 3, -0.01f, 0.01f);
  for (auto _ : state) {
    cpu::sgd_momentum(params.data(), grads.data(), velocity.data(), n, 0.01f, 0.9f, 5e-4f);
    benchmark::ClobberMemory();
  }
  if (!std::isfinite(params[n / 2])) state.SkipWithError("parameters are not finite");
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(5 * n * sizeof(float)));
}
BENCHMARK(BM_SgdMomentum)->ArgName("n")->Arg(static_cast<std::int64_t>(kDefaultMlpParams));

// Seconds per step of the MLP's SGEMMs alone, `dims` at `batch`: the same cblas_sgemm calls
// (shapes, transposes, leading dimensions) as cpu::linear_forward and cpu::linear_backward make
// in one training step (forward and dW for every layer, dx for every layer but the first), on
// random operands, `reps` times after one untimed pass; the mean.
static double mlp_gemm_seconds(const std::vector<std::size_t>& dims, std::size_t batch, int reps) {
  struct Layer {
    std::size_t in, out;
    std::vector<float> x, W, y, dy, dW, dx;
  };
  std::vector<Layer> layers;
  for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
    const std::size_t in = dims[l], out = dims[l + 1];
    layers.push_back({in, out, random_floats(batch * in, 1), random_floats(out * in, 2),
                      std::vector<float>(batch * out), random_floats(batch * out, 3), std::vector<float>(out * in),
                      std::vector<float>(batch * in)});
  }
  const auto step = [&] {
    for (Layer& L : layers) {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(batch), static_cast<int>(L.out),
                  static_cast<int>(L.in), 1.0f, L.x.data(), static_cast<int>(L.in), L.W.data(), static_cast<int>(L.in),
                  0.0f, L.y.data(), static_cast<int>(L.out));
    }
    for (std::size_t l = layers.size(); l-- > 0;) {
      Layer& L = layers[l];
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(L.out), static_cast<int>(L.in),
                  static_cast<int>(batch), 1.0f, L.dy.data(), static_cast<int>(L.out), L.x.data(),
                  static_cast<int>(L.in), 0.0f, L.dW.data(), static_cast<int>(L.in));
      if (l == 0) continue;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(batch), static_cast<int>(L.in),
                  static_cast<int>(L.out), 1.0f, L.dy.data(), static_cast<int>(L.out), L.W.data(),
                  static_cast<int>(L.in), 0.0f, L.dx.data(), static_cast<int>(L.in));
    }
  };
  step();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// One training step on one rank per iteration: forward, mean softmax cross-entropy, backward,
// SGD-momentum update, on a fixed random batch in [0, 1). gemm_flops: the step's GEMM FLOPs
// (the "flops" rate counter). A non-finite loss after the last step fails the benchmark.
// Returns the mean wall seconds of a step.
static double run_train_steps(benchmark::State& state, Model& model, std::size_t batch, double gemm_flops) {
  // Outlives every model: the caller's model frees the activations reserved here into it later.
  static MemoryTracker tracker;
  model.reserve(batch, tracker);
  const std::size_t n = model.num_params();
  TrackedBuffer<float> params(tracker, MemoryCategory::parameters, n);
  TrackedBuffer<float> grads(tracker, MemoryCategory::gradients, n);
  TrackedBuffer<float> velocity(tracker, MemoryCategory::optimizer_state, n);
  model.init_params(params.data(), 42);
  const std::size_t features = model.input_features(), classes = model.num_classes();
  const std::vector<float> x = random_floats(batch * features, 1, 0.0f, 1.0f);
  const std::vector<std::int32_t> labels = random_labels(batch, static_cast<int>(classes), 2);
  std::vector<float> logits(batch * classes), dlogits(batch * classes);
  const std::function<void(std::size_t)> no_hook;
  double loss = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    model.forward(params.data(), x.data(), batch, logits.data());
    loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), batch, classes, dlogits.data(),
                                      1.0f / static_cast<float>(batch));
    model.backward(params.data(), x.data(), dlogits.data(), batch, grads.data(), no_hook);
    cpu::sgd_momentum(params.data(), grads.data(), velocity.data(), n, 0.01f, 0.9f, 0.0f);
    benchmark::ClobberMemory();
  }
  const double step_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() /
                        static_cast<double>(std::max<benchmark::IterationCount>(state.iterations(), 1));
  state.counters["flops"] = benchmark::Counter(gemm_flops, benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(batch));
  if (!std::isfinite(loss)) state.SkipWithError("training loss is not finite");
  return step_s;
}

// One training step of the default MLP (784-512-256-10). FLOPs: the forward GEMMs
// (2*batch*in*out per layer), the weight-gradient GEMMs (same) and the input-gradient GEMMs of
// every layer but the first.
static void BM_MlpTrainStep(benchmark::State& state) {
  const auto batch = static_cast<std::size_t>(state.range(0));
  cpu::set_blas_threads(static_cast<int>(state.range(1)));
  Mlp<float> model(kDefaultMlp);
  if (model.num_params() != kDefaultMlpParams) {
    state.SkipWithError("the default MLP no longer has 535818 parameters");
    return;
  }
  double gemm_flops = 0;
  for (std::size_t l = 0; l + 1 < kDefaultMlp.size(); ++l) {
    const double layer = 2.0 * static_cast<double>(batch * kDefaultMlp[l] * kDefaultMlp[l + 1]);
    gemm_flops += (l == 0 ? 2 : 3) * layer;  // forward + dW (+ dx except for the first layer)
  }
  const double step_s = run_train_steps(state, model, batch, gemm_flops);
  // The step against its own GEMMs (issue goal: gemm_share >= 0.9): gemm_ms is the mean time of
  // the step's SGEMMs alone, as many steps as were timed (at least 10).
  const auto reps = static_cast<int>(std::max<benchmark::IterationCount>(state.iterations(), 10));
  const double gemm_s = mlp_gemm_seconds(kDefaultMlp, batch, reps);
  state.counters["step_ms"] = 1e3 * step_s;
  state.counters["gemm_ms"] = 1e3 * gemm_s;
  state.counters["gemm_share"] = step_s > 0 ? gemm_s / step_s : 0.0;
}
BENCHMARK(BM_MlpTrainStep)->Apply(train_step_args);

// One training step of the default CNN of `dpbench run --workload cnn` (1x28x28 Fashion-MNIST,
// channels 16 and 32, hidden 128, 10 classes): batched im2col convolutions
// (workloads/conv_layout.hpp), BatchNorm, pooling, two linear layers. FLOPs: per conv layer
// 2*N*P*Q*K*C*R*S for the forward GEMM, as much for dW and for dx (not the first layer), and the
// linear layers as in BM_MlpTrainStep.
static void BM_CnnTrainStep(benchmark::State& state) {
  const auto batch = static_cast<double>(state.range(0));
  cpu::set_blas_threads(static_cast<int>(state.range(1)));
  Cnn model(SampleShape{1, 28, 28}, 16, 32, 128, 10);
  const double conv1 = 2.0 * batch * 28 * 28 * 16 * 1 * 9;
  const double conv2 = 2.0 * batch * 14 * 14 * 32 * 16 * 9;
  const double fc1 = 2.0 * batch * (32 * 7 * 7) * 128, fc2 = 2.0 * batch * 128 * 10;
  run_train_steps(state, model, static_cast<std::size_t>(state.range(0)), 2 * conv1 + 3 * conv2 + 3 * fc1 + 3 * fc2);
}
BENCHMARK(BM_CnnTrainStep)->Apply(train_step_args);

DPBENCH_BENCHMARK_MAIN()
