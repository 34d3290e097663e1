// Micro-benchmark of the DataLoader's throughput: samples/s delivered by iterating a DataLoader
// (batch 256, prefetch_factor 2) over a synthetic 1x28x28, 10-class dataset, for num_workers
// 0, 1, 2, 4 and an emulated decode cost of 0, 50 and 200 microseconds per sample
// (DataLoaderOptions::decode_cost_us: the loading thread busy-waits that much of its own CPU time
// after generating each sample, the knob --decode-cost-us describes). It shows when worker
// threads pay off: with no decode cost the loader is limited by generating and copying samples;
// with a decode cost, num_workers > 0 overlaps decoding and scales until the workers run out of
// cores.
// How: wall time of next() on the consuming thread, which does nothing else (so this is the
// loader's ceiling, not its effect on a training step), one iteration per round of
// max(1, num_workers) batches; items/s = samples/s. After the timed loop a few samples of the
// last batch are compared with loading them directly (counter "wrong").
// Not for: the effect of data loading on training throughput (`dpbench run --num-workers`
// records data wait per step).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include <benchmark/benchmark.h>

#include "bench/micro/micro_main.hpp"

#include "core/memory.hpp"
#include "workloads/dataloader.hpp"
#include "workloads/dataset.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

constexpr std::size_t kBatchSize = 256;
constexpr std::int64_t kDatasetSize = 60000;  // Fashion-MNIST's training set

}  // namespace
}  // namespace dpbench

// num_workers: state.range(0); decode cost in microseconds per sample: state.range(1).
static void BM_DataLoader(benchmark::State& state) {
  using namespace dpbench;
  const int num_workers = static_cast<int>(state.range(0));
  const int decode_us = static_cast<int>(state.range(1));
  try {
    const std::unique_ptr<Dataset> owned = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, kDatasetSize, 7);
    const Dataset& dataset = *owned;
    // An iteration takes one round of batches, one per worker (1 when loading in place): the
    // workers start together and deliver in rounds, so timing whole rounds neither credits nor
    // charges a partial one. One epoch covers every timed round plus a warm-up round, cycling
    // over the dataset in order.
    const auto per_iteration = static_cast<std::size_t>(std::max(1, num_workers));
    const auto batches = (static_cast<std::size_t>(state.max_iterations) + 1) * per_iteration;
    std::vector<std::int64_t> indices(batches * kBatchSize);
    for (std::size_t i = 0; i < indices.size(); ++i) {
      indices[i] = static_cast<std::int64_t>(i % static_cast<std::size_t>(kDatasetSize));
    }
    MemoryTracker tracker;
    DataLoaderOptions options;
    options.num_workers = num_workers;
    options.prefetch_factor = 2;
    options.decode_cost_us = decode_us;
    DataLoader loader(dataset, indices, kBatchSize, options, /*seed=*/0, tracker);
    const Batch* batch = nullptr;
    for (std::size_t b = 0; b < per_iteration; ++b) batch = &loader.next();  // warm-up round
    for (auto _ : state) {
      for (std::size_t b = 0; b < per_iteration; ++b) {
        batch = &loader.next();
        benchmark::DoNotOptimize(batch->inputs.data());
      }
    }

    // Check a few samples of the last batch against loading them directly.
    const std::size_t features = dataset.shape().features();
    std::vector<float> expect(features);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < 4 && i < batch->size; ++i) {
      const std::int64_t index = indices[static_cast<std::size_t>(batch->index) * kBatchSize + i];
      const int label = dataset.load(index, expect.data());
      if (label != batch->labels[i] ||
          std::memcmp(expect.data(), batch->inputs.data() + i * features, features * sizeof(float)) != 0) {
        ++wrong;
      }
    }
    state.counters["wrong"] = static_cast<double>(wrong);
    const auto samples = state.iterations() * static_cast<std::int64_t>(per_iteration * kBatchSize);
    state.SetItemsProcessed(samples);
    state.SetBytesProcessed(samples * static_cast<std::int64_t>(features * sizeof(float)));
    if (wrong != 0) state.SkipWithError("a batch differs from loading its samples directly");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}
BENCHMARK(BM_DataLoader)
    ->ArgNames({"workers", "decode_us"})
    ->ArgsProduct({{0, 1, 2, 4}, {0, 50, 200}})
    ->UseRealTime()
    ->MinTime(0.5)
    ->Unit(benchmark::kMillisecond);

DPBENCH_BENCHMARK_MAIN()
