// Tests of the data module: DistributedSampler's partitioning against PyTorch's rules, the
// DataLoader's ordering, determinism across worker counts, shutdown and error propagation,
// epochs with and without persistent workers, augmentation (random crop and flip against a
// reference) and the decode-cost knob, the Fashion-MNIST reader's validation on small fake IDX
// files (and the real files when the Debian package is installed), and the synthetic dataset's
// determinism and shape parsing.
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/memory.hpp"
#include "workloads/dataloader.hpp"
#include "workloads/distributed_sampler.hpp"
#include "workloads/fashion_mnist.hpp"
#include "workloads/synthetic.hpp"
#include "tests/fixtures.hpp"

namespace dpbench {
namespace {

namespace fs = std::filesystem;
using namespace dpbench::testing;  // NOLINT: test fixtures

// ---- DistributedSampler -----------------------------------------------------------------------

// The list before the rank split, rebuilt from all ranks: list[r + R * i] = rank r's i-th index.
std::vector<std::int64_t> interleave_ranks(std::int64_t n, int replicas, bool shuffle, std::uint64_t seed,
                                           bool drop_last, std::int64_t epoch) {
  std::vector<std::vector<std::int64_t>> per_rank;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(n, replicas, r, shuffle, seed, drop_last);
    s.set_epoch(epoch);
    per_rank.push_back(s.indices());
    EXPECT_EQ(static_cast<std::int64_t>(per_rank.back().size()), s.num_samples());
  }
  std::vector<std::int64_t> list;
  for (std::size_t i = 0; i < per_rank[0].size(); ++i) {
    for (int r = 0; r < replicas; ++r) list.push_back(per_rank[r][i]);
  }
  return list;
}

TEST(DistributedSampler, ShuffledIndicesMatchReferenceFisherYates) {
  // Values from an independent Python mt19937_64 + the same Fisher-Yates (j = rng() % (i + 1)).
  EXPECT_EQ(shuffled_indices(10, 0), (std::vector<std::int64_t>{7, 2, 0, 8, 3, 9, 6, 1, 5, 4}));
  EXPECT_EQ(shuffled_indices(10, 1), (std::vector<std::int64_t>{1, 7, 3, 9, 4, 0, 5, 2, 6, 8}));
  std::vector<std::int64_t> big = shuffled_indices(1000, 42);
  std::sort(big.begin(), big.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(big[static_cast<std::size_t>(i)], i);
}

TEST(DistributedSampler, CoversEveryIndexOncePlusPadding) {
  // N = 10, 4 replicas: ceil(10/4) = 3 per rank, total 12, so 2 indices are repeated.
  DistributedSampler s(10, 4, 0, true, 7);
  EXPECT_EQ(s.num_samples(), 3);
  EXPECT_EQ(s.total_size(), 12);
  const std::vector<std::int64_t> list = interleave_ranks(10, 4, true, 7, false, 0);
  ASSERT_EQ(list.size(), 12u);
  std::map<std::int64_t, int> count;
  for (std::int64_t i : list) ++count[i];
  ASSERT_EQ(count.size(), 10u);
  const std::vector<std::int64_t> perm = shuffled_indices(10, 7);
  // The padded entries are the head of the permuted list.
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(list[i], perm[i]);
  EXPECT_EQ(list[10], perm[0]);
  EXPECT_EQ(list[11], perm[1]);
  for (const auto& [index, c] : count) {
    EXPECT_EQ(c, (index == perm[0] || index == perm[1]) ? 2 : 1) << "index " << index;
  }
}

TEST(DistributedSampler, PadsByRepeatingWholeListWhenPaddingExceedsSize) {
  // N = 3, 8 replicas: total 8, padding 5 > 3: torch repeats the list, then cuts.
  const std::vector<std::int64_t> list = interleave_ranks(3, 8, true, 11, false, 0);
  const std::vector<std::int64_t> p = shuffled_indices(3, 11);
  EXPECT_EQ(list, (std::vector<std::int64_t>{p[0], p[1], p[2], p[0], p[1], p[2], p[0], p[1]}));
}

TEST(DistributedSampler, DisjointAcrossRanksWhenDivisible) {
  std::set<std::int64_t> seen;
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(100, 4, r, true, 3);
    s.set_epoch(5);
    const std::vector<std::int64_t> mine = s.indices();
    ASSERT_EQ(mine.size(), 25u);
    for (std::int64_t i : mine) EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice";
  }
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(*seen.begin(), 0);
  EXPECT_EQ(*seen.rbegin(), 99);
}

TEST(DistributedSampler, SetEpochGivesNewOrderReproducibly) {
  DistributedSampler s(50, 2, 1, true, 100);
  s.set_epoch(0);
  const std::vector<std::int64_t> e0 = s.indices();
  s.set_epoch(1);
  const std::vector<std::int64_t> e1 = s.indices();
  EXPECT_NE(e0, e1);
  // The order is that of seed + epoch, rank 1 taking positions 1, 3, 5, ...
  const std::vector<std::int64_t> p = shuffled_indices(50, 101);
  for (std::size_t i = 0; i < e1.size(); ++i) EXPECT_EQ(e1[i], p[2 * i + 1]);
  s.set_epoch(0);
  EXPECT_EQ(s.indices(), e0);
  // The same set of samples over both ranks in each epoch.
  EXPECT_EQ(std::set<std::int64_t>(e0.begin(), e0.end()).size(), 25u);
}

TEST(DistributedSampler, DropLastCutsTailWithoutDuplicates) {
  DistributedSampler s(10, 4, 0, true, 9, true);
  EXPECT_EQ(s.num_samples(), 2);  // floor(10 / 4)
  EXPECT_EQ(s.total_size(), 8);
  const std::vector<std::int64_t> list = interleave_ranks(10, 4, true, 9, true, 0);
  const std::vector<std::int64_t> p = shuffled_indices(10, 9);
  EXPECT_EQ(list, std::vector<std::int64_t>(p.begin(), p.begin() + 8));
  EXPECT_EQ(std::set<std::int64_t>(list.begin(), list.end()).size(), 8u);
}

TEST(DistributedSampler, NoShuffleGivesRankStridedIndices) {
  // 0..9 padded with 0, 1 to 12; rank r takes r, r+3, r+6, r+9.
  EXPECT_EQ(DistributedSampler(10, 3, 0, false).indices(), (std::vector<std::int64_t>{0, 3, 6, 9}));
  EXPECT_EQ(DistributedSampler(10, 3, 1, false).indices(), (std::vector<std::int64_t>{1, 4, 7, 0}));
  EXPECT_EQ(DistributedSampler(10, 3, 2, false).indices(), (std::vector<std::int64_t>{2, 5, 8, 1}));
  DistributedSampler s(10, 3, 1, false);
  s.set_epoch(4);  // no effect without shuffle
  EXPECT_EQ(s.indices(), (std::vector<std::int64_t>{1, 4, 7, 0}));
}

TEST(DistributedSampler, PermutationIndependentOfNumReplicas) {
  DistributedSampler single(24, 1, 0, true, 5);
  single.set_epoch(2);
  EXPECT_EQ(single.indices(), interleave_ranks(24, 4, true, 5, false, 2));
  EXPECT_EQ(single.indices(), shuffled_indices(24, 7));
}

TEST(DistributedSampler, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(0, 1, 0), InputError);
  EXPECT_THROW(DistributedSampler(10, 0, 0), InputError);
  EXPECT_THROW(DistributedSampler(10, 4, 4), InputError);
  EXPECT_THROW(DistributedSampler(10, 4, -1), InputError);
  EXPECT_THROW(DistributedSampler(3, 4, 0, true, 0, true), InputError);
  EXPECT_NO_THROW(DistributedSampler(3, 4, 0, true, 0, false));
}

// ---- DataLoader -------------------------------------------------------------------------------

// Copies of every batch a loader delivers.
struct Epoch {
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<std::int32_t>> labels;
};

Epoch run_epoch(const Dataset& ds, const std::vector<std::int64_t>& indices, std::size_t bs, int workers,
                int prefetch) {
  MemoryTracker tracker;
  DataLoader loader(ds, indices, bs, DataLoaderOptions{workers, prefetch}, 0, tracker);
  Epoch e;
  for (std::size_t b = 0; b < loader.num_batches(); ++b) {
    const Batch& batch = loader.next();
    EXPECT_EQ(batch.index, static_cast<std::int64_t>(b));
    EXPECT_EQ(batch.size, bs);
    e.inputs.emplace_back(batch.inputs.begin(), batch.inputs.end());
    e.labels.emplace_back(batch.labels.begin(), batch.labels.end());
  }
  return e;
}

TEST(DataLoader, BatchesIdenticalForAnyNumWorkers) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 4, 5}, 7, 200, 13);
  std::vector<std::int64_t> indices = shuffled_indices(200, 3);
  indices.resize(190);
  const std::size_t bs = 8;  // 23 full batches, 6 samples left over
  const Epoch ref = run_epoch(*ds, indices, bs, 0, 2);
  ASSERT_EQ(ref.inputs.size(), 23u);
  // Batch 5, sample 2 is sample indices[42] loaded directly.
  std::vector<float> direct(20);
  const int label = ds->load(indices[42], direct.data());
  EXPECT_EQ(ref.labels[5][2], label);
  EXPECT_EQ(std::memcmp(ref.inputs[5].data() + 2 * 20, direct.data(), 20 * sizeof(float)), 0);
  for (auto [workers, prefetch] : {std::pair{1, 2}, std::pair{4, 2}, std::pair{3, 1}}) {
    const Epoch e = run_epoch(*ds, indices, bs, workers, prefetch);
    ASSERT_EQ(e.inputs.size(), ref.inputs.size());
    for (std::size_t b = 0; b < ref.inputs.size(); ++b) {
      EXPECT_EQ(e.labels[b], ref.labels[b]) << "batch " << b << ", num_workers " << workers;
      ASSERT_EQ(e.inputs[b].size(), ref.inputs[b].size());
      EXPECT_EQ(std::memcmp(e.inputs[b].data(), ref.inputs[b].data(), ref.inputs[b].size() * sizeof(float)), 0)
          << "batch " << b << ", num_workers " << workers;
    }
  }
}

TEST(DataLoader, NumBatchesDropsIncompleteLastBatch) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 3}, 5, 20, 1);
  const std::vector<std::int64_t> indices = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  for (int workers : {0, 2}) {
    MemoryTracker tracker;
    DataLoader loader(*ds, indices, 3, DataLoaderOptions{workers, 2}, 0, tracker);
    EXPECT_EQ(loader.num_batches(), 3u);
    const Batch* last = nullptr;
    for (int b = 0; b < 3; ++b) last = &loader.next();
    // The last full batch holds indices 3, 2, 1; index 0 is dropped.
    float x[3];
    for (int i = 0; i < 3; ++i) EXPECT_EQ(last->labels[i], ds->load(3 - i, x));
    EXPECT_EQ(last->index, 2);
    EXPECT_THROW(loader.next(), Error) << "num_workers " << workers;
    EXPECT_THROW(loader.next(), Error) << "num_workers " << workers;
  }
}

TEST(DataLoader, ChargesSlotsToDataStaging) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{2, 3, 4}, 3, 64, 1);
  std::vector<std::int64_t> indices(64);
  for (std::int64_t i = 0; i < 64; ++i) indices[static_cast<std::size_t>(i)] = i;
  MemoryTracker tracker;
  {
    DataLoader loader(*ds, indices, 4, DataLoaderOptions{3, 2}, 0, tracker);
    // 6 slots of 4 x 24 floats + 4 labels.
    EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 6 * (4 * 24 * 4 + 4 * 4));
    loader.next();
  }
  EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 0);
  {
    DataLoader loader(*ds, indices, 4, DataLoaderOptions{0, 2}, 0, tracker);
    EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 4 * 24 * 4 + 4 * 4);
  }
}

TEST(DataLoader, RejectsBadOptions) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 3}, 5, 20, 1);
  MemoryTracker tracker;
  EXPECT_THROW(DataLoader(*ds, {0, 1}, 0, DataLoaderOptions{}, 0, tracker), InputError);
  EXPECT_THROW(DataLoader(*ds, {0, 1}, 1, DataLoaderOptions{-1, 2}, 0, tracker), InputError);
  EXPECT_THROW(DataLoader(*ds, {0, 1}, 1, DataLoaderOptions{2, 0}, 0, tracker), InputError);
  EXPECT_THROW(DataLoader(*ds, {0, 20}, 1, DataLoaderOptions{}, 0, tracker), InputError);
}

// A dataset whose load() sleeps, to keep workers busy; or throws for one index.
class TestDataset final : public Dataset {
 public:
  TestDataset(std::int64_t size, std::chrono::microseconds delay, std::int64_t bad_index)
      : size_(size), delay_(delay), bad_index_(bad_index) {}
  std::int64_t size() const override { return size_; }
  SampleShape shape() const override { return SampleShape{1, 1, 2}; }
  int num_classes() const override { return 2; }
  int load(std::int64_t index, float* out) const override {
    if (index == bad_index_) throw std::runtime_error("decode failed for sample 37");
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    loads_.fetch_add(1);
    out[0] = static_cast<float>(index);
    out[1] = -1.0f;
    return static_cast<int>(index % 2);
  }
  std::string name() const override { return "test"; }
  std::int64_t loads() const { return loads_.load(); }

 private:
  std::int64_t size_;
  std::chrono::microseconds delay_;
  std::int64_t bad_index_;
  mutable std::atomic<std::int64_t> loads_{0};
};

TEST(DataLoader, DestroyWithUnconsumedBatchesReturnsPromptly) {
  // 4000 samples at 2 ms each: loading them all would take 2 s on 4 workers.
  TestDataset ds(4000, std::chrono::microseconds(2000), -1);
  std::vector<std::int64_t> indices(4000);
  for (std::int64_t i = 0; i < 4000; ++i) indices[static_cast<std::size_t>(i)] = i;
  for (int consumed : {0, 1, 3}) {
    MemoryTracker tracker;
    auto loader = std::make_unique<DataLoader>(ds, indices, 16, DataLoaderOptions{4, 2}, 0, tracker);
    for (int b = 0; b < consumed; ++b) EXPECT_EQ(loader->next().index, b);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the workers get busy
    const auto t0 = std::chrono::steady_clock::now();
    loader.reset();
    const auto destroy_time = std::chrono::steady_clock::now() - t0;
    EXPECT_LT(destroy_time, std::chrono::milliseconds(300)) << "after consuming " << consumed;
  }
  // Workers stopped at their prefetch limit instead of loading the whole epoch.
  EXPECT_LT(ds.loads(), 1000);
}

TEST(DataLoader, RethrowsDatasetException) {
  TestDataset ds(100, std::chrono::microseconds(0), 37);
  std::vector<std::int64_t> indices(100);
  for (std::int64_t i = 0; i < 100; ++i) indices[static_cast<std::size_t>(i)] = i;
  for (int workers : {0, 1, 4}) {
    MemoryTracker tracker;
    DataLoader loader(ds, indices, 10, DataLoaderOptions{workers, 2}, 0, tracker);
    std::size_t delivered = 0;
    std::string message;
    try {
      for (std::size_t b = 0; b < loader.num_batches(); ++b) {
        const Batch& batch = loader.next();
        EXPECT_EQ(batch.inputs[0], static_cast<float>(10 * b));
        ++delivered;
      }
    } catch (const std::runtime_error& e) {
      message = e.what();
    }
    EXPECT_EQ(message, "decode failed for sample 37") << "num_workers " << workers;
    // Sample 37 is in batch 3: at most batches 0-2 can have been delivered.
    EXPECT_LE(delivered, 3u) << "num_workers " << workers;
    if (workers > 0) {
      EXPECT_THROW(loader.next(), std::runtime_error);  // and again
    }
  }
}

// ---- DataLoader: epochs, persistent workers, augmentation, decode cost ------------------------

// Every batch of `epochs` epochs over the same indices through one two-phase loader.
std::vector<Epoch> run_epochs(const Dataset& ds, const std::vector<std::int64_t>& indices, std::size_t bs,
                              DataLoaderOptions options, std::uint64_t seed, int epochs,
                              std::size_t* threads = nullptr) {
  MemoryTracker tracker;
  DataLoader loader(ds, bs, options, seed, tracker);
  std::vector<Epoch> out;
  for (int ep = 0; ep < epochs; ++ep) {
    loader.start_epoch(indices, ep);
    EXPECT_EQ(loader.num_batches(), indices.size() / bs);
    Epoch e;
    for (std::size_t b = 0; b < loader.num_batches(); ++b) {
      const Batch& batch = loader.next();
      EXPECT_EQ(batch.index, static_cast<std::int64_t>(b));
      e.inputs.emplace_back(batch.inputs.begin(), batch.inputs.end());
      e.labels.emplace_back(batch.labels.begin(), batch.labels.end());
    }
    EXPECT_THROW(loader.next(), Error);
    out.push_back(std::move(e));
  }
  if (threads != nullptr) *threads = loader.threads_started();
  return out;
}

bool same_bits(const Epoch& a, const Epoch& b) {
  if (a.inputs.size() != b.inputs.size() || a.labels != b.labels) return false;
  for (std::size_t i = 0; i < a.inputs.size(); ++i) {
    if (a.inputs[i].size() != b.inputs[i].size() ||
        std::memcmp(a.inputs[i].data(), b.inputs[i].data(), a.inputs[i].size() * sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

DataLoaderOptions loader_options(int workers, bool persistent, int padding, bool hflip) {
  DataLoaderOptions o;
  o.num_workers = workers;
  o.prefetch_factor = 2;
  o.persistent_workers = persistent;
  o.crop_padding = padding;
  o.hflip = hflip;
  return o;
}

TEST(DataLoader, AugmentationIdenticalForAnyWorkersAndEpochwise) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{3, 6, 7}, 5, 120, 4);
  const std::vector<std::int64_t> indices = shuffled_indices(120, 9);
  const std::size_t bs = 8;  // 15 batches
  const std::vector<Epoch> ref = run_epochs(*ds, indices, bs, loader_options(0, false, 2, true), 5, 3);
  ASSERT_EQ(ref.size(), 3u);
  for (int workers : {1, 4}) {
    for (bool persistent : {false, true}) {
      const std::vector<Epoch> e = run_epochs(*ds, indices, bs, loader_options(workers, persistent, 2, true), 5, 3);
      for (int ep = 0; ep < 3; ++ep) {
        EXPECT_TRUE(same_bits(e[ep], ref[ep]))
            << "num_workers " << workers << ", persistent " << persistent << ", epoch " << ep;
      }
    }
  }
  // The 5-argument constructor is epoch 0.
  MemoryTracker tracker;
  DataLoader loader(*ds, indices, bs, loader_options(3, false, 2, true), 5, tracker);
  const Batch& first = loader.next();
  EXPECT_EQ(std::vector<float>(first.inputs.begin(), first.inputs.end()), ref[0].inputs[0]);

  // Augmentation does something, differs across epochs and seeds, and leaves labels alone.
  const std::vector<Epoch> plain = run_epochs(*ds, indices, bs, loader_options(0, false, 0, false), 5, 1);
  EXPECT_FALSE(same_bits(ref[0], plain[0]));
  EXPECT_FALSE(same_bits(ref[0], ref[1]));
  EXPECT_FALSE(same_bits(ref[1], ref[2]));
  EXPECT_EQ(ref[0].labels, plain[0].labels);
  EXPECT_EQ(ref[1].labels, plain[0].labels);
  const std::vector<Epoch> other_seed = run_epochs(*ds, indices, bs, loader_options(2, true, 2, true), 6, 1);
  EXPECT_FALSE(same_bits(ref[0], other_seed[0]));
}

// A 4x4 (or C x H x W) image per index whose pixels are all distinct and non-zero.
class ImageDataset final : public Dataset {
 public:
  explicit ImageDataset(SampleShape shape) : shape_(shape) {}
  std::int64_t size() const override { return 1000; }
  SampleShape shape() const override { return shape_; }
  int num_classes() const override { return 3; }
  int load(std::int64_t index, float* out) const override {
    for (std::size_t k = 0; k < shape_.features(); ++k) {
      out[k] = static_cast<float>(1 + k) + 1000.0f * static_cast<float>(index);
    }
    return static_cast<int>(index % 3);
  }
  std::string name() const override { return "image"; }

 private:
  SampleShape shape_;
};

// Reference RandomCrop(size, padding) with window corner (p + oy, p + ox) in the padded image,
// then an optional horizontal flip: out[c][y][x] = in[c][y + oy][x' + ox], x' = flip ? W-1-x : x.
std::vector<float> reference_augment(const std::vector<float>& in, SampleShape s, int oy, int ox, bool flip) {
  std::vector<float> out(in.size(), 0.0f);
  for (int c = 0; c < s.channels; ++c) {
    for (int y = 0; y < s.height; ++y) {
      for (int x = 0; x < s.width; ++x) {
        const int sx = (flip ? s.width - 1 - x : x) + ox;
        const int sy = y + oy;
        if (sy < 0 || sy >= s.height || sx < 0 || sx >= s.width) continue;
        out[static_cast<std::size_t>((c * s.height + y) * s.width + x)] =
            in[static_cast<std::size_t>((c * s.height + sy) * s.width + sx)];
      }
    }
  }
  return out;
}

// The (oy, ox, flip) combinations, among those allowed, that turn sample `index` into `got`.
std::vector<std::tuple<int, int, bool>> matching_transforms(const Dataset& ds, std::int64_t index, const float* got,
                                                            int padding, bool hflip) {
  const SampleShape s = ds.shape();
  std::vector<float> in(s.features());
  ds.load(index, in.data());
  std::vector<std::tuple<int, int, bool>> found;
  for (int oy = -padding; oy <= padding; ++oy) {
    for (int ox = -padding; ox <= padding; ++ox) {
      for (bool flip : {false, true}) {
        if (flip && !hflip) continue;
        const std::vector<float> want = reference_augment(in, s, oy, ox, flip);
        if (std::memcmp(want.data(), got, want.size() * sizeof(float)) == 0) {
          found.emplace_back(oy, ox, flip);
        }
      }
    }
  }
  return found;
}

TEST(DataLoader, RandomCropIsAShiftedCopyWithZeroPadding) {
  const ImageDataset ds(SampleShape{1, 4, 4});
  std::vector<std::int64_t> indices(400);
  for (std::int64_t i = 0; i < 400; ++i) indices[static_cast<std::size_t>(i)] = i;
  for (int padding : {1, 2}) {
    for (int workers : {0, 3}) {
      MemoryTracker tracker;
      DataLoader loader(ds, 16, loader_options(workers, false, padding, false), 11, tracker);
      loader.start_epoch(indices, 0);
      std::set<std::pair<int, int>> offsets;
      for (std::size_t b = 0; b < loader.num_batches(); ++b) {
        const Batch& batch = loader.next();
        for (std::size_t i = 0; i < batch.size; ++i) {
          const std::int64_t index = indices[b * 16 + i];
          const auto found = matching_transforms(ds, index, batch.inputs.data() + i * 16, padding, false);
          // Distinct non-zero pixels: exactly one of the (2p+1)^2 shifted copies.
          ASSERT_EQ(found.size(), 1u) << "sample " << index << ", padding " << padding;
          offsets.emplace(std::get<0>(found[0]), std::get<1>(found[0]));
          EXPECT_EQ(batch.labels[i], index % 3);
        }
      }
      EXPECT_GT(offsets.size(), 1u);
      // 400 draws: every one of the (2p+1)^2 offsets occurs.
      EXPECT_EQ(offsets.size(), static_cast<std::size_t>((2 * padding + 1) * (2 * padding + 1)))
          << "padding " << padding;
    }
  }
}

TEST(DataLoader, HorizontalFlipIsIdentityOrMirror) {
  const ImageDataset ds(SampleShape{1, 4, 4});
  std::vector<std::int64_t> indices(200);
  for (std::int64_t i = 0; i < 200; ++i) indices[static_cast<std::size_t>(i)] = 199 - i;
  MemoryTracker tracker;
  DataLoader loader(ds, indices, 10, loader_options(2, true, 0, true), 3, tracker);
  int identity = 0, mirror = 0;
  for (std::size_t b = 0; b < loader.num_batches(); ++b) {
    const Batch& batch = loader.next();
    for (std::size_t i = 0; i < batch.size; ++i) {
      const auto found = matching_transforms(ds, indices[b * 10 + i], batch.inputs.data() + i * 16, 0, true);
      ASSERT_EQ(found.size(), 1u);
      (std::get<2>(found[0]) ? mirror : identity)++;
    }
  }
  EXPECT_GT(identity, 0);
  EXPECT_GT(mirror, 0);
  EXPECT_EQ(identity + mirror, 200);
}

TEST(DataLoader, CropAndFlipTransformEveryChannelAlike) {
  const SampleShape shape{2, 3, 5};
  const ImageDataset ds(shape);
  std::vector<std::int64_t> indices(120);
  for (std::int64_t i = 0; i < 120; ++i) indices[static_cast<std::size_t>(i)] = 3 * i;
  MemoryTracker tracker;
  DataLoader loader(ds, indices, 12, loader_options(1, false, 1, true), 8, tracker);
  std::set<std::tuple<int, int, bool>> seen;
  for (std::size_t b = 0; b < loader.num_batches(); ++b) {
    const Batch& batch = loader.next();
    for (std::size_t i = 0; i < batch.size; ++i) {
      const auto found = matching_transforms(ds, indices[b * 12 + i], batch.inputs.data() + i * shape.features(), 1,
                                             true);
      ASSERT_EQ(found.size(), 1u) << "sample " << indices[b * 12 + i];
      seen.insert(found[0]);
    }
  }
  EXPECT_GT(seen.size(), 9u);  // of 18
}

TEST(DataLoader, PersistentWorkersStartOncePerLoader) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 2, 3}, 4, 90, 2);
  const std::vector<std::int64_t> indices = shuffled_indices(90, 1);
  const std::vector<Epoch> ref = run_epochs(*ds, indices, 6, loader_options(0, false, 0, false), 0, 1);
  for (bool persistent : {true, false}) {
    std::size_t threads = 0;
    const std::vector<Epoch> e = run_epochs(*ds, indices, 6, loader_options(3, persistent, 0, false), 0, 3, &threads);
    EXPECT_EQ(threads, persistent ? 3u : 9u);
    for (const Epoch& ep : e) EXPECT_TRUE(same_bits(ep, ref[0])) << "persistent " << persistent;
  }
  std::size_t threads = 0;
  run_epochs(*ds, indices, 6, loader_options(0, true, 0, false), 0, 3, &threads);
  EXPECT_EQ(threads, 0u);
}

TEST(DataLoader, StagingAllocatedOnceAcrossEpochs) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{2, 3, 4}, 3, 64, 1);
  const std::vector<std::int64_t> indices = shuffled_indices(64, 2);
  const std::int64_t slot = 4 * 24 * 4 + 4 * 4;
  for (bool persistent : {true, false}) {
    MemoryTracker tracker;
    DataLoader loader(*ds, 4, loader_options(3, persistent, 1, true), 0, tracker);
    EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 6 * slot);
    for (int ep = 0; ep < 3; ++ep) {
      loader.start_epoch(indices, ep);
      loader.next();
      loader.next();
    }
    EXPECT_EQ(tracker.current_bytes(MemoryCategory::data_staging), 6 * slot);
    EXPECT_EQ(tracker.peak_bytes(MemoryCategory::data_staging), 6 * slot);
  }
}

TEST(DataLoader, NextBeforeStartEpochThrows) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 3}, 5, 20, 1);
  for (int workers : {0, 2}) {
    for (bool persistent : {false, true}) {
      MemoryTracker tracker;
      DataLoader loader(*ds, 2, loader_options(workers, persistent, 0, false), 0, tracker);
      EXPECT_EQ(loader.num_batches(), 0u);
      EXPECT_EQ(loader.threads_started(), 0u);
      EXPECT_THROW(loader.next(), Error);
      // A bad index list is rejected without starting an epoch.
      EXPECT_THROW(loader.start_epoch({0, 20}, 0), InputError);
      EXPECT_THROW(loader.next(), Error);
      loader.start_epoch({4, 3, 2, 1}, 0);
      float x[3];
      EXPECT_EQ(loader.next().labels[1], ds->load(3, x));
      EXPECT_EQ(loader.next().labels[0], ds->load(2, x));
    }
  }
}

TEST(DataLoader, RejectsBadAugmentationOptions) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 3}, 5, 20, 1);
  MemoryTracker tracker;
  DataLoaderOptions o;
  o.crop_padding = -1;
  EXPECT_THROW(DataLoader(*ds, 1, o, 0, tracker), InputError);
  o.crop_padding = 0;
  o.decode_cost_us = -5;
  EXPECT_THROW(DataLoader(*ds, 1, o, 0, tracker), InputError);
}

TEST(DataLoader, StartEpochDropsUnconsumedBatches) {
  // 4000 samples at 2 ms each: the first epoch could not finish before the next one starts
  // (it cannot anyway: its workers stop at their prefetch limit until batches are consumed).
  TestDataset ds(4000, std::chrono::microseconds(2000), -1);
  std::vector<std::int64_t> first(4000);
  for (std::int64_t i = 0; i < 4000; ++i) first[static_cast<std::size_t>(i)] = i;
  std::vector<std::int64_t> second(96);
  for (std::int64_t i = 0; i < 96; ++i) second[static_cast<std::size_t>(i)] = 3999 - 7 * i;
  for (int workers : {0, 1, 4}) {
    for (bool persistent : {false, true}) {
      const std::int64_t loads_before = ds.loads();
      MemoryTracker tracker;
      DataLoaderOptions o = loader_options(workers, persistent, 0, false);
      DataLoader loader(ds, 16, o, 0, tracker);
      for (int consumed : {0, 1, 3}) {
        loader.start_epoch(first, consumed);
        for (int b = 0; b < consumed; ++b) EXPECT_EQ(loader.next().index, b);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // let the workers get busy
      }
      // Twice without consuming anything.
      loader.start_epoch(first, 7);
      loader.start_epoch(second, 8);
      ASSERT_EQ(loader.num_batches(), 6u);
      for (std::size_t b = 0; b < 6; ++b) {
        const Batch& batch = loader.next();
        EXPECT_EQ(batch.index, static_cast<std::int64_t>(b));
        for (std::size_t i = 0; i < 16; ++i) {
          const std::int64_t index = second[b * 16 + i];
          EXPECT_EQ(batch.inputs[2 * i], static_cast<float>(index));
          EXPECT_EQ(batch.labels[i], index % 2);
        }
      }
      EXPECT_THROW(loader.next(), Error);
      // The dropped epochs were not loaded beyond the prefetch limit: per epoch at most the
      // consumed batches, the slots, and one partial batch per worker.
      const std::int64_t slots = workers == 0 ? 1 : 2 * workers;
      const std::int64_t bound = 16 * ((0 + 1 + 3) + 5 * (slots + workers)) + 96;
      EXPECT_LE(ds.loads() - loads_before, bound) << "num_workers " << workers << ", persistent " << persistent;
      EXPECT_EQ(loader.threads_started(), static_cast<std::size_t>(persistent ? workers : 5 * workers));
    }
  }
}

TEST(DataLoader, WorkerErrorLosesOnlyThatEpoch) {
  TestDataset ds(100, std::chrono::microseconds(0), 37);
  std::vector<std::int64_t> bad(100), good(60);
  for (std::int64_t i = 0; i < 100; ++i) bad[static_cast<std::size_t>(i)] = i;
  for (std::int64_t i = 0; i < 60; ++i) good[static_cast<std::size_t>(i)] = 99 - i;
  for (int workers : {0, 1, 4}) {
    for (bool persistent : {false, true}) {
      MemoryTracker tracker;
      DataLoader loader(ds, 10, loader_options(workers, persistent, 0, false), 0, tracker);
      loader.start_epoch(bad, 0);
      EXPECT_THROW(for (std::size_t b = 0; b < loader.num_batches(); ++b) loader.next(), std::runtime_error);
      loader.start_epoch(good, 1);
      for (std::size_t b = 0; b < loader.num_batches(); ++b) {
        EXPECT_EQ(loader.next().inputs[0], static_cast<float>(99 - 10 * static_cast<int>(b)));
      }
    }
  }
}

TEST(DataLoader, DecodeCostLeavesBatchesUnchanged) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 4, 4}, 5, 64, 3);
  const std::vector<std::int64_t> indices = shuffled_indices(64, 5);
  const std::vector<Epoch> ref = run_epochs(*ds, indices, 8, loader_options(0, false, 1, true), 2, 2);
  for (int workers : {0, 2}) {
    DataLoaderOptions o = loader_options(workers, workers > 0, 1, true);
    o.decode_cost_us = 30;
    const std::vector<Epoch> e = run_epochs(*ds, indices, 8, o, 2, 2);
    EXPECT_TRUE(same_bits(e[0], ref[0])) << "num_workers " << workers;
    EXPECT_TRUE(same_bits(e[1], ref[1])) << "num_workers " << workers;
  }
}

// ---- Fashion-MNIST ----------------------------------------------------------------------------

class FashionMnistFiles : public ::testing::Test {
 protected:
  fs::path images() const { return dir_.path() / "train-images-idx3-ubyte.gz"; }
  fs::path labels() const { return dir_.path() / "train-labels-idx1-ubyte.gz"; }
  std::string dir() const { return dir_.path().string(); }

  // n images of rows x cols with magic `magic`.
  void write_images(std::uint32_t n, std::uint32_t rows = 28, std::uint32_t cols = 28, std::uint32_t magic = 0x803) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(n) * rows * cols);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < std::size_t{rows} * cols; ++k) {
        px[i * rows * cols + k] = fake_pixel(i, k);
      }
    }
    write_gz(images(), idx_file(magic, {n, rows, cols}, px));
  }
  void write_labels(const std::vector<std::uint8_t>& values) {
    write_gz(labels(), idx_file(0x801, {static_cast<std::uint32_t>(values.size())}, values));
  }
  // Runs load_fashion_mnist and returns the InputError's message ("" if none was thrown).
  std::string load_error() {
    try {
      load_fashion_mnist(dir(), true);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  }

  TempDir dir_;
};

TEST_F(FashionMnistFiles, LoadsValidTinyDataset) {
  write_images(5);
  write_labels({3, 0, 9, 1, 5});
  const std::unique_ptr<Dataset> ds = load_fashion_mnist(dir(), true);
  EXPECT_EQ(ds->size(), 5);
  EXPECT_EQ(ds->num_classes(), 10);
  EXPECT_EQ(ds->shape().features(), 784u);
  EXPECT_EQ(ds->name(), "fashion-mnist/train");
  std::vector<float> x(784);
  const std::vector<int> expected_labels = {3, 0, 9, 1, 5};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(ds->load(i, x.data()), expected_labels[static_cast<std::size_t>(i)]);
    for (std::size_t k = 0; k < 784; k += 13) {
      const float want = (fake_pixel(static_cast<std::size_t>(i), k) / 255.0f - 0.2860f) / 0.3530f;
      ASSERT_NEAR(x[k], want, 1e-6f) << "image " << i << " pixel " << k;
    }
  }
  ds->load(0, x.data());
  EXPECT_NEAR(x[0], -0.8101983f, 1e-6f);  // pixel value 0
  // Image 2 pixel 0 is 74: (74/255 - 0.286) / 0.353.
  ds->load(2, x.data());
  EXPECT_NEAR(x[0], 0.0118869f, 1e-6f);
}

TEST_F(FashionMnistFiles, ReadIdxGzReturnsDimsAndBytes) {
  write_labels({4, 2, 7});
  const IdxArray a = read_idx_gz(labels().string(), 1);
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(a.data, (std::vector<std::uint8_t>{4, 2, 7}));
}

TEST_F(FashionMnistFiles, MissingDirectoryIsInputError) {
  const std::string missing = dir() + "/nope";
  try {
    load_fashion_mnist(missing, true);
    FAIL() << "no exception";
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(missing), std::string::npos) << msg;
    EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
    EXPECT_NE(msg.find("dataset-fashion-mnist"), std::string::npos) << msg;
  }
}

TEST_F(FashionMnistFiles, MissingFileIsInputError) {
  write_images(5);
  const std::string msg = load_error();
  EXPECT_NE(msg.find(labels().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, TruncatedGzIsInputError) {
  write_labels({1, 2, 3, 4, 5});
  write_images(5);
  const auto size = fs::file_size(images());
  ASSERT_GT(size, 100u);
  for (std::uintmax_t keep : {size / 2, size - 4}) {  // cut in the data, cut in the trailer
    write_images(5);
    fs::resize_file(images(), keep);
    const std::string msg = load_error();
    EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

TEST_F(FashionMnistFiles, TruncatedIdxPayloadIsInputError) {
  // A valid gzip whose IDX header announces 5 images but holds 4.
  std::vector<std::uint8_t> px(4 * 784, 1);
  write_gz(images(), idx_file(0x803, {5, 28, 28}, px));
  write_labels({1, 2, 3, 4, 5});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  EXPECT_NE(msg.find("3136"), std::string::npos) << msg;  // the 4 * 784 bytes present
}

TEST_F(FashionMnistFiles, WrongMagicIsInputError) {
  write_images(5, 28, 28, 0x802);
  write_labels({1, 2, 3, 4, 5});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad IDX magic 0x00000802"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0x00000803"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, WrongImageSizeIsInputError) {
  write_images(5, 28, 27);
  write_labels({1, 2, 3, 4, 5});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("28x27"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, LabelOutOfRangeIsInputError) {
  write_images(5);
  write_labels({1, 2, 10, 4, 5});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(labels().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("label 10 at index 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, CountMismatchIsInputError) {
  write_images(5);
  write_labels({1, 2, 3, 4});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(labels().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("count mismatch"), std::string::npos) << msg;
  EXPECT_NE(msg.find("4 labels"), std::string::npos) << msg;
  EXPECT_NE(msg.find("5 images"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, NonGzipGarbageIsInputError) {
  {
    std::ofstream out(images(), std::ios::binary);
    out << "this is not a gzip file, just some text that is long enough\n";
  }
  write_labels({1});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a gzip"), std::string::npos) << msg;
}

TEST_F(FashionMnistFiles, CorruptGzipDataIsInputError) {
  write_images(5);
  write_labels({1, 2, 3, 4, 5});
  {
    std::fstream f(images(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(12);  // inside the deflate stream, after the 10-byte gzip header
    const char junk[8] = {'\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff', '\xff'};
    f.write(junk, sizeof(junk));
  }
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_FALSE(msg.empty());
}

// ---- Fashion-MNIST bounded reads -------------------------------------------------------------

// Peak resident memory of this process (VmHWM in /proc/self/status) in KiB, or -1.
std::int64_t peak_rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// Resets VmHWM to the current RSS (proc(5): writing 5 to /proc/self/clear_refs, Linux >= 4.0),
// so that a later peak_rss_kib() is the peak of what ran in between, not of the whole test
// binary's history. False where the kernel refuses.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

// Streams `prefix` then `zeros` zero bytes into one gzip member at `path` through a 1 MiB
// buffer, so that writing a multi-GiB bomb allocates nothing big. Level 1 with Z_RLE ("wb1R"):
// zeros still compress about 1000:1 and this is the fastest zlib setting for them.
void write_gz_zeros(const fs::path& path, const std::vector<std::uint8_t>& prefix, std::uint64_t zeros) {
  gzFile f = gzopen(path.c_str(), "wb1R");
  if (f == nullptr) throw std::runtime_error("cannot create " + path.string());
  gzbuffer(f, 1u << 20);
  bool ok = prefix.empty() ||
            gzwrite(f, prefix.data(), static_cast<unsigned>(prefix.size())) == static_cast<int>(prefix.size());
  const std::vector<std::uint8_t> chunk(std::size_t{1} << 20, 0);
  while (ok && zeros > 0) {
    const auto n = static_cast<unsigned>(std::min<std::uint64_t>(zeros, chunk.size()));
    ok = gzwrite(f, chunk.data(), n) == static_cast<int>(n);
    zeros -= n;
  }
  if (gzclose(f) != Z_OK || !ok) throw std::runtime_error("cannot write " + path.string());
}

void append_file(const fs::path& to, const fs::path& from, int times = 1) {
  std::ifstream in(from, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream out(to, std::ios::binary | std::ios::app);
  for (int i = 0; i < times; ++i) {
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  if (!out) throw std::runtime_error("cannot append to " + to.string());
}

// One load_fashion_mnist call: its InputError message, wall time and peak RSS growth (-1 if
// the kernel cannot reset VmHWM).
struct MeasuredLoad {
  std::string error;
  double seconds = 0;
  std::int64_t peak_growth_kib = -1;
};

class FashionMnistBounded : public FashionMnistFiles {
 protected:
  MeasuredLoad measured_load() {
    MeasuredLoad m;
    const bool reset = reset_peak_rss();
    const std::int64_t before = peak_rss_kib();
    const auto t0 = std::chrono::steady_clock::now();
    m.error = load_error();
    m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (reset && before > 0) m.peak_growth_kib = peak_rss_kib() - before;
    std::printf("[ measured ] load %.4f s, peak RSS growth %lld KiB: %s\n", m.seconds,
                static_cast<long long>(m.peak_growth_kib), m.error.c_str());
    return m;
  }
  // The bounds every rejected hostile file must meet: well under a second and far less
  // resident memory than the data it pretends to hold.
  void expect_bounded(const MeasuredLoad& m) {
    EXPECT_LT(m.seconds, 1.0);
    if (m.peak_growth_kib < 0) {
      ADD_FAILURE() << "cannot reset VmHWM through /proc/self/clear_refs";
    } else {
      EXPECT_LT(m.peak_growth_kib, 200 * 1024);
    }
  }
  static std::vector<std::uint8_t> one_image_header_and_pixels() {
    std::vector<std::uint8_t> px(784);
    for (std::size_t k = 0; k < px.size(); ++k) px[k] = fake_pixel(0, k);
    return idx_file(0x803, {1, 28, 28}, px);
  }
};

// The bomb: a header for 1 image, the image, then 1 GiB of zeros in the same gzip member
// (about 1 MB on disk). The old reader inflated all of it (2+ GB peak, ~16 s) before looking at
// the header. 1 GiB rather than 3 GiB keeps the test quick: compressing the zeros costs several
// seconds per GiB on a busy machine; the multi-member test below reaches 3 GiB cheaply.
TEST_F(FashionMnistBounded, GzipBombIsRejectedFastWithBoundedMemory) {
  write_labels({1});
  const auto w0 = std::chrono::steady_clock::now();
  write_gz_zeros(images(), one_image_header_and_pixels(), std::uint64_t{1} << 30);
  std::printf("[ measured ] wrote %ju-byte bomb in %.2f s\n", static_cast<std::uintmax_t>(fs::file_size(images())),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count());
  const MeasuredLoad m = measured_load();
  EXPECT_NE(m.error.find(images().string()), std::string::npos) << m.error;
  EXPECT_NE(m.error.find("trailing data"), std::string::npos) << m.error;
  EXPECT_NE(m.error.find("800 bytes"), std::string::npos) << m.error;  // 16 + 784 promised
  expect_bounded(m);
}

// The same bomb spread over concatenated gzip members (valid gzip, as `cat a.gz b.gz` makes):
// a member with the header and image, then 48 copies of a 64 MiB zero member = 3 GiB.
TEST_F(FashionMnistBounded, MultiMemberGzipBombIsRejectedFastWithBoundedMemory) {
  write_labels({1});
  write_gz(images(), one_image_header_and_pixels());
  const fs::path zeros = dir_.path() / "zeros.gz";
  write_gz_zeros(zeros, {}, std::uint64_t{64} << 20);
  append_file(images(), zeros, 48);
  const MeasuredLoad m = measured_load();
  EXPECT_NE(m.error.find(images().string()), std::string::npos) << m.error;
  EXPECT_NE(m.error.find("trailing data"), std::string::npos) << m.error;
  expect_bounded(m);
}

TEST_F(FashionMnistBounded, NonGzipBytesAfterTheStreamAreTrailingData) {
  write_labels({1});
  write_gz(images(), one_image_header_and_pixels());
  {
    std::ofstream out(images(), std::ios::binary | std::ios::app);
    out << "garbage";
  }
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("trailing data"), std::string::npos) << msg;
}

// A header that lies upwards: 1,000,000 images (784 MB, under the cap) but one image of data.
// The buffer is reserved at the promised size but only the bytes that arrive become resident.
TEST_F(FashionMnistBounded, HeaderPromisingMoreThanTheStreamHoldsIsTruncated) {
  constexpr std::uint32_t kPromised = 1000000;
  std::vector<std::uint8_t> px(784, 7);
  write_gz(images(), idx_file(0x803, {kPromised, 28, 28}, px));
  write_labels(std::vector<std::uint8_t>(kPromised, 1));
  const MeasuredLoad m = measured_load();
  EXPECT_NE(m.error.find(images().string()), std::string::npos) << m.error;
  EXPECT_NE(m.error.find("truncated IDX payload (784 bytes, the dimensions need 784000000)"), std::string::npos)
      << m.error;
  expect_bounded(m);
}

TEST_F(FashionMnistBounded, HeaderAboveSizeCapIsRejectedBeforeInflating) {
  write_gz(images(), idx_file(0x803, {2000000, 28, 28}, {}));  // 1.568e9 bytes > 1 GiB
  write_labels({1});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(images().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("2000000x28x28 = 1568000000 payload bytes"), std::string::npos) << msg;
  EXPECT_NE(msg.find("limit"), std::string::npos) << msg;
  // Dimensions whose product overflows 64 bits saturate instead of wrapping to a small size.
  write_gz(labels(), idx_file(0x801, {0xffffffffu}, {}));
  try {
    read_idx_gz(labels().string(), 1);
    FAIL() << "no exception";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("limit"), std::string::npos) << e.what();
  }
  write_gz(images(), idx_file(0x803, {0xffffffffu, 0xffffffffu, 0xffffffffu}, {}));
  const std::string overflow = load_error();
  EXPECT_NE(overflow.find("more than"), std::string::npos) << overflow;
}

TEST_F(FashionMnistBounded, CountMismatchIsFoundBeforeInflatingPayloads) {
  // The images payload is short (a reader that inflated it first would say "truncated"), but
  // the two headers already disagree on the count, and that is what gets reported.
  write_gz(images(), idx_file(0x803, {3, 28, 28}, std::vector<std::uint8_t>(10, 0)));
  write_labels({1, 2});
  const std::string msg = load_error();
  EXPECT_NE(msg.find(labels().string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("count mismatch: 2 labels"), std::string::npos) << msg;
}

TEST_F(FashionMnistBounded, ValidFilesLoadIdenticalBytesIncludingMultiMember) {
  write_images(3);
  write_labels({4, 2, 7});
  const IdxArray a = read_idx_gz(images().string(), 3);
  EXPECT_EQ(a.dims, (std::vector<std::uint32_t>{3, 28, 28}));
  ASSERT_EQ(a.data.size(), 3u * 784u);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t k = 0; k < 784; ++k) {
      ASSERT_EQ(a.data[i * 784 + k], fake_pixel(i, k)) << "image " << i << " pixel " << k;
    }
  }
  // The same bytes split across three gzip members, cut inside the header and inside an image.
  std::vector<std::uint8_t> px(3 * 784);
  for (std::size_t i = 0; i < px.size(); ++i) px[i] = fake_pixel(i / 784, i % 784);
  const std::vector<std::uint8_t> whole = idx_file(0x803, {3, 28, 28}, px);
  const fs::path part = dir_.path() / "part.gz";
  write_gz(images(), std::vector<std::uint8_t>(whole.begin(), whole.begin() + 6));
  write_gz(part, std::vector<std::uint8_t>(whole.begin() + 6, whole.begin() + 1000));
  append_file(images(), part);
  write_gz(part, std::vector<std::uint8_t>(whole.begin() + 1000, whole.end()));
  append_file(images(), part);
  const IdxArray b = read_idx_gz(images().string(), 3);
  EXPECT_EQ(b.dims, a.dims);
  EXPECT_EQ(b.data, a.data);
  const std::unique_ptr<Dataset> ds = load_fashion_mnist(dir(), true);
  EXPECT_EQ(ds->size(), 3);
  std::vector<float> x(784);
  EXPECT_EQ(ds->load(2, x.data()), 7);
}

TEST(FashionMnist, ResolveDataDirPrefersCliThenEnvThenDefault) {
  const char* old = std::getenv("DPBENCH_DATA_DIR");
  const std::string saved = old != nullptr ? old : "";
  setenv("DPBENCH_DATA_DIR", "/from/env", 1);
  EXPECT_EQ(resolve_data_dir("/from/cli"), "/from/cli");
  EXPECT_EQ(resolve_data_dir(""), "/from/env");
  unsetenv("DPBENCH_DATA_DIR");
  EXPECT_EQ(resolve_data_dir(""), "/usr/share/datasets/fashion-mnist");
  if (old != nullptr) setenv("DPBENCH_DATA_DIR", saved.c_str(), 1);
}

TEST(FashionMnist, LoadsRealTrainSplit) {
  if (!fs::is_directory(kFashionMnistDefaultDir)) {
    GTEST_SKIP() << kFashionMnistDefaultDir << " not present (install dataset-fashion-mnist)";
  }
  const std::unique_ptr<Dataset> ds = load_fashion_mnist(kFashionMnistDefaultDir, true);
  ASSERT_EQ(ds->size(), 60000);
  EXPECT_EQ(ds->num_classes(), 10);
  std::vector<float> x(784);
  std::vector<int> histogram(10, 0);
  double sum = 0;
  double sum_sq = 0;
  for (std::int64_t i = 0; i < ds->size(); ++i) {
    const int label = ds->load(i, x.data());
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++histogram[static_cast<std::size_t>(label)];
    for (float v : x) {
      sum += v;
      sum_sq += static_cast<double>(v) * v;
    }
  }
  // The first training image is an ankle boot (class 9); then 0, 0, 3.
  EXPECT_EQ(ds->load(0, x.data()), 9);
  EXPECT_EQ(ds->load(3, x.data()), 3);
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[static_cast<std::size_t>(c)], 6000) << c;
  // Normalised with the dataset's own mean and std: mean ~0, std ~1.
  const double n = 60000.0 * 784.0;
  const double mean = sum / n;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sum_sq / n - mean * mean), 1.0, 0.01);

  const std::unique_ptr<Dataset> test = load_fashion_mnist(kFashionMnistDefaultDir, false);
  EXPECT_EQ(test->size(), 10000);
  EXPECT_EQ(test->name(), "fashion-mnist/test");
}

// ---- Synthetic --------------------------------------------------------------------------------

TEST(Synthetic, SameIndexGivesSameSample) {
  const SampleShape shape{3, 8, 8};
  const std::unique_ptr<Dataset> a = make_synthetic_dataset(shape, 10, 1000, 42);
  const std::unique_ptr<Dataset> b = make_synthetic_dataset(shape, 10, 1000, 42);
  std::vector<float> x(192), y(192), z(192);
  for (std::int64_t i : {0, 1, 517, 999}) {
    const int la = a->load(i, x.data());
    EXPECT_EQ(a->load(i, y.data()), la);
    EXPECT_EQ(b->load(i, z.data()), la);
    EXPECT_EQ(std::memcmp(x.data(), y.data(), sizeof(float) * 192), 0);
    EXPECT_EQ(std::memcmp(x.data(), z.data(), sizeof(float) * 192), 0);
  }
  a->load(1, y.data());
  EXPECT_NE(std::memcmp(x.data(), y.data(), sizeof(float) * 192), 0);  // 999 vs 1
  EXPECT_EQ(a->name(), "synthetic 3x8x8");
  EXPECT_EQ(a->size(), 1000);
}

TEST(Synthetic, DifferentSeedsDiffer) {
  const std::unique_ptr<Dataset> a = make_synthetic_dataset(SampleShape{1, 1, 64}, 10, 100, 1);
  const std::unique_ptr<Dataset> b = make_synthetic_dataset(SampleShape{1, 1, 64}, 10, 100, 2);
  std::vector<float> x(64), y(64);
  int same_labels = 0;
  for (std::int64_t i = 0; i < 100; ++i) {
    same_labels += a->load(i, x.data()) == b->load(i, y.data());
    EXPECT_NE(std::memcmp(x.data(), y.data(), sizeof(float) * 64), 0) << "sample " << i;
  }
  EXPECT_LT(same_labels, 30);  // about 10 expected by chance
}

TEST(Synthetic, LabelsCoverRangeEvenly) {
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 4}, 10, 5000, 7);
  std::vector<int> histogram(10, 0);
  float x[4];
  for (std::int64_t i = 0; i < 5000; ++i) {
    const int label = ds->load(i, x);
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 10);
    ++histogram[static_cast<std::size_t>(label)];
  }
  for (int c = 0; c < 10; ++c) {
    EXPECT_GT(histogram[static_cast<std::size_t>(c)], 400) << c;
    EXPECT_LT(histogram[static_cast<std::size_t>(c)], 600) << c;
  }
}

TEST(Synthetic, ClassesAreLearnableWithNoiseStdHalf) {
  // A nearest-class-mean classifier fitted on 2000 samples classifies 1000 others almost
  // perfectly, and the residual around the class means has standard deviation ~0.5.
  constexpr std::size_t kF = 32;
  constexpr int kClasses = 5;
  const std::unique_ptr<Dataset> ds = make_synthetic_dataset(SampleShape{1, 1, 32}, kClasses, 3000, 99);
  std::vector<std::vector<double>> mean(kClasses, std::vector<double>(kF, 0.0));
  std::vector<int> count(kClasses, 0);
  std::vector<float> x(kF);
  for (std::int64_t i = 0; i < 2000; ++i) {
    const int c = ds->load(i, x.data());
    ++count[static_cast<std::size_t>(c)];
    for (std::size_t j = 0; j < kF; ++j) mean[static_cast<std::size_t>(c)][j] += x[j];
  }
  for (int c = 0; c < kClasses; ++c) {
    for (double& m : mean[static_cast<std::size_t>(c)]) m /= count[static_cast<std::size_t>(c)];
    for (double m : mean[static_cast<std::size_t>(c)]) {
      EXPECT_LT(std::abs(m), 1.1);  // prototypes lie in [-1, 1)
    }
  }
  int correct = 0;
  double residual_sq = 0;
  for (std::int64_t i = 2000; i < 3000; ++i) {
    const int c = ds->load(i, x.data());
    int best = -1;
    double best_d = 1e30;
    for (int k = 0; k < kClasses; ++k) {
      double d = 0;
      for (std::size_t j = 0; j < kF; ++j) {
        const double diff = x[j] - mean[static_cast<std::size_t>(k)][j];
        d += diff * diff;
      }
      if (d < best_d) {
        best_d = d;
        best = k;
      }
      if (k == c) residual_sq += d;
    }
    correct += best == c;
  }
  EXPECT_GT(correct, 980);
  EXPECT_NEAR(std::sqrt(residual_sq / (1000.0 * kF)), 0.5, 0.05);
}

TEST(Synthetic, ParsesSampleShapes) {
  const SampleShape a = parse_sample_shape("3x224x224");
  EXPECT_EQ(a.channels, 3);
  EXPECT_EQ(a.height, 224);
  EXPECT_EQ(a.width, 224);
  EXPECT_EQ(a.features(), 150528u);
  const SampleShape b = parse_sample_shape("28x28");
  EXPECT_EQ(b.channels, 1);
  EXPECT_EQ(b.height, 28);
  EXPECT_EQ(b.width, 28);
  const SampleShape c = parse_sample_shape("784");
  EXPECT_EQ(c.channels, 1);
  EXPECT_EQ(c.height, 1);
  EXPECT_EQ(c.width, 784);
}

TEST(Synthetic, RejectsMalformedShapes) {
  for (const std::string text :
       {"3x0x4", "abc", "", "3x", "x3", "-1", "1x2x3x4", "3X4", "3x4 ", "99999999999", "100000x100000x1000"}) {
    try {
      parse_sample_shape(text);
      ADD_FAILURE() << "'" << text << "' accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("'" + text + "'"), std::string::npos) << e.what();
    }
  }
}

TEST(Synthetic, RejectsBadSizeOrClasses) {
  EXPECT_THROW(make_synthetic_dataset(SampleShape{}, 10, 0, 1), InputError);
  EXPECT_THROW(make_synthetic_dataset(SampleShape{}, 1, 10, 1), InputError);
  EXPECT_THROW(make_synthetic_dataset(SampleShape{0, 2, 2}, 10, 10, 1), InputError);
}

}  // namespace
}  // namespace dpbench
