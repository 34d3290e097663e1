// DataLoader: a ring of staging batches, allocated once, filled either synchronously in next()
// (num_workers == 0) or by worker threads that each own every num_workers-th batch of an epoch,
// as in PyTorch's _MultiProcessingDataLoaderIter but with threads. Each sample depends only on
// its dataset index, the epoch and the seed, so batch contents do not depend on num_workers.
// Epoch hand-over: start_epoch() sets cancel_ (workers leave the epoch at their next sample or
// slot wait), waits until no worker is inside an epoch (busy_ == 0), installs the new epoch and
// bumps generation_; persistent workers wait for a new generation, non-persistent ones are joined
// before and started after. Not for: shuffling (the caller passes each epoch's indices, e.g. a
// DistributedSampler's) or page-locked memory (pin_memory has no effect on the CPU path).
#include "workloads/dataloader.hpp"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {
namespace {

// SplitMix64 finaliser: a bijective 64-bit mix.
std::uint64_t mix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Draw number k in [0, n) from the stream keyed by h.
std::uint64_t draw(std::uint64_t h, std::uint64_t k, std::uint64_t n) {
  return static_cast<std::uint64_t>((static_cast<unsigned __int128>(mix64(h + k)) * n) >> 64);
}

// CPU time consumed so far by the calling thread, in nanoseconds.
std::int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

// In place: plane[y][x] = old plane[y + oy][x + ox], 0 where that lies outside the plane. Rows
// are visited so that a source row is read before it is overwritten.
void shift_plane(float* plane, int h, int w, int oy, int ox) {
  const auto row = [&](int y) {
    float* dst = plane + static_cast<std::size_t>(y) * static_cast<std::size_t>(w);
    const int sy = y + oy;
    if (sy < 0 || sy >= h || std::abs(ox) >= w) {
      std::fill(dst, dst + w, 0.0f);
      return;
    }
    const float* src = plane + static_cast<std::size_t>(sy) * static_cast<std::size_t>(w);
    if (ox >= 0) {
      std::memmove(dst, src + ox, static_cast<std::size_t>(w - ox) * sizeof(float));
      std::fill(dst + (w - ox), dst + w, 0.0f);
    } else {
      std::memmove(dst - ox, src, static_cast<std::size_t>(w + ox) * sizeof(float));
      std::fill(dst, dst - ox, 0.0f);
    }
  };
  if (oy > 0) {
    for (int y = 0; y < h; ++y) row(y);
  } else {
    for (int y = h - 1; y >= 0; --y) row(y);
  }
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, std::size_t batch_size, DataLoaderOptions options, std::uint64_t seed,
                       MemoryTracker& tracker)
    : dataset_(dataset), batch_size_(batch_size), options_(options), seed_(seed), shape_(dataset.shape()) {
  if (batch_size < 1) throw InputError("DataLoader: batch size must be >= 1");
  if (options.num_workers < 0) {
    throw InputError(fmt::format("DataLoader: num_workers {} must be >= 0", options.num_workers));
  }
  if (options.num_workers > 0 && options.prefetch_factor < 1) {
    throw InputError(fmt::format("DataLoader: prefetch_factor {} must be >= 1", options.prefetch_factor));
  }
  if (!(options.decode_cost_us >= 0) || !std::isfinite(options.decode_cost_us)) {
    throw InputError(fmt::format("DataLoader: decode cost {} us must be >= 0", options.decode_cost_us));
  }
  if (options.crop_padding < 0) {
    throw InputError(fmt::format("DataLoader: crop padding {} must be >= 0", options.crop_padding));
  }

  const std::size_t features = shape_.features();
  const std::size_t nslots = options_.num_workers == 0 ? 1
                                                       : static_cast<std::size_t>(options_.num_workers) *
                                                             static_cast<std::size_t>(options_.prefetch_factor);
  slots_.reserve(nslots);
  for (std::size_t s = 0; s < nslots; ++s) {
    Batch batch;
    batch.inputs = TrackedBuffer<float>(tracker, MemoryCategory::data_staging, batch_size_ * features);
    batch.labels = TrackedBuffer<std::int32_t>(tracker, MemoryCategory::data_staging, batch_size_);
    slots_.push_back(std::move(batch));
  }
  ready_.assign(nslots, 0);
  slot_batch_.resize(nslots);
  for (std::size_t s = 0; s < nslots; ++s) slot_batch_[s] = s;
}

DataLoader::DataLoader(const Dataset& dataset, std::vector<std::int64_t> indices, std::size_t batch_size,
                       DataLoaderOptions options, std::uint64_t seed, MemoryTracker& tracker)
    : DataLoader(dataset, batch_size, options, seed, tracker) {
  start_epoch(std::move(indices), 0);  // a throw here runs ~DataLoader (delegating constructor)
}

DataLoader::~DataLoader() { stop_workers(); }

void DataLoader::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
}

void DataLoader::start_workers() {
  try {
    for (int w = 0; w < options_.num_workers; ++w) {
      workers_.emplace_back(&DataLoader::worker_loop, this, w);
      ++threads_started_;
    }
  } catch (...) {
    stop_workers();
    throw;
  }
}

void DataLoader::start_epoch(std::vector<std::int64_t> indices, std::int64_t epoch) {
  const std::int64_t n = dataset_.size();
  for (std::size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= n) {
      throw InputError(
          fmt::format("DataLoader: index {} at position {} is outside {} [0, {})", indices[i], i, dataset_.name(), n));
    }
  }
  started_ = false;
  next_batch_ = 0;
  if (options_.num_workers == 0) {
    indices_ = std::move(indices);
    epoch_ = epoch;
    num_batches_ = indices_.size() / batch_size_;
    started_ = true;
    return;
  }

  // PyTorch re-creates the workers with each iterator unless persistent_workers is set.
  if (!options_.persistent_workers) stop_workers();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    cancel_ = true;  // running workers drop the rest of the previous epoch
    cv_.notify_all();
    cv_.wait(lock, [&] { return busy_ == 0; });
    indices_ = std::move(indices);
    epoch_ = epoch;
    num_batches_ = indices_.size() / batch_size_;
    std::fill(ready_.begin(), ready_.end(), 0);
    for (std::size_t s = 0; s < slot_batch_.size(); ++s) slot_batch_[s] = s;
    error_ = nullptr;
    ++generation_;
    cancel_ = false;
  }
  cv_.notify_all();
  if (workers_.empty()) start_workers();
  started_ = true;
}

void DataLoader::augment(float* sample, std::int64_t index, std::int64_t epoch) const {
  const int p = options_.crop_padding;
  if (p == 0 && !options_.hflip) return;
  const std::uint64_t key = mix64(mix64(mix64(seed_) ^ static_cast<std::uint64_t>(epoch)) ^
                                  static_cast<std::uint64_t>(index));
  const int c = shape_.channels, h = shape_.height, w = shape_.width;
  const std::size_t plane = static_cast<std::size_t>(h) * static_cast<std::size_t>(w);
  if (p > 0) {
    // Top-left corner (i, j) of the window in the padded image, each uniform in [0, 2p].
    const auto span = static_cast<std::uint64_t>(2 * p + 1);
    const int oy = static_cast<int>(draw(key, 0, span)) - p;
    const int ox = static_cast<int>(draw(key, 1, span)) - p;
    if (oy != 0 || ox != 0) {
      for (int ch = 0; ch < c; ++ch) shift_plane(sample + ch * plane, h, w, oy, ox);
    }
  }
  if (options_.hflip && draw(key, 2, 2) == 1) {
    for (std::size_t r = 0; r < static_cast<std::size_t>(c) * static_cast<std::size_t>(h); ++r) {
      float* row = sample + r * static_cast<std::size_t>(w);
      std::reverse(row, row + w);
    }
  }
}

void DataLoader::load_into(Batch& batch, std::size_t batch_index, const std::vector<std::int64_t>& indices,
                           std::int64_t epoch) const {
  const std::size_t features = shape_.features();
  const int classes = dataset_.num_classes();
  const std::size_t first = batch_index * batch_size_;
  const auto decode_ns = static_cast<std::int64_t>(std::llround(options_.decode_cost_us * 1e3));
  for (std::size_t i = 0; i < batch_size_; ++i) {
    // The loader is being destroyed or the epoch replaced.
    if (stop_.load(std::memory_order_relaxed) || cancel_.load(std::memory_order_relaxed)) return;
    const std::int64_t index = indices[first + i];
    float* sample = batch.inputs.data() + i * features;
    const int label = dataset_.load(index, sample);
    if (label < 0 || label >= classes) {
      throw Error(fmt::format("{}: sample {} has label {} outside [0, {})", dataset_.name(), index, label, classes));
    }
    if (decode_ns > 0) {
      const std::int64_t until = thread_cpu_ns() + decode_ns;
      while (thread_cpu_ns() < until) {
      }
    }
    augment(sample, index, epoch);
    batch.labels[i] = label;
  }
  batch.size = batch_size_;
  batch.index = static_cast<std::int64_t>(batch_index);
}

void DataLoader::worker_loop(int worker) {
  std::uint64_t seen = 0;  // generation of the last epoch this worker served
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || (!cancel_ && generation_ != seen); });
      if (stop_) return;
      seen = generation_;
      ++busy_;  // start_epoch() leaves the epoch's state alone until busy_ is back to 0
    }
    run_worker_epoch(worker);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_;
    }
    cv_.notify_all();
    if (!options_.persistent_workers) return;
  }
}

void DataLoader::run_worker_epoch(int worker) {
  // indices_, epoch_ and num_batches_ are stable while this worker counts in busy_.
  const std::size_t nslots = slots_.size();
  const auto stride = static_cast<std::size_t>(options_.num_workers);
  try {
    for (std::size_t b = static_cast<std::size_t>(worker); b < num_batches_; b += stride) {
      const std::size_t s = b % nslots;
      {
        // Wait until the consumer has released the batch b - nslots that occupied this slot.
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || cancel_ || slot_batch_[s] == b; });
        if (stop_ || cancel_) return;
      }
      load_into(slots_[s], b, indices_, epoch_);  // the slot is ours alone until ready_[s] is set
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_ || cancel_) return;
        ready_[s] = 1;
      }
      cv_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      cancel_ = true;  // the epoch is lost: let the other workers leave it too
    }
    cv_.notify_all();
  }
}

const Batch& DataLoader::next() {
  if (!started_) throw Error("DataLoader: next() called before start_epoch()");
  if (options_.num_workers == 0) {
    if (next_batch_ >= num_batches_) {
      throw Error(fmt::format("DataLoader: all {} batches of this epoch were consumed", num_batches_));
    }
    load_into(slots_[0], next_batch_, indices_, epoch_);
    ++next_batch_;
    return slots_[0];
  }

  const std::size_t nslots = slots_.size();
  std::unique_lock<std::mutex> lock(mutex_);
  if (next_batch_ > 0) {
    // Calling next() again releases the batch returned last: its slot may take a new batch.
    const std::size_t prev = next_batch_ - 1;
    const std::size_t s = prev % nslots;
    if (slot_batch_[s] == prev && ready_[s]) {
      ready_[s] = 0;
      slot_batch_[s] = prev + nslots;
      cv_.notify_all();
    }
  }
  if (error_) std::rethrow_exception(error_);
  if (next_batch_ >= num_batches_) {
    throw Error(fmt::format("DataLoader: all {} batches of this epoch were consumed", num_batches_));
  }
  const std::size_t b = next_batch_;
  const std::size_t s = b % nslots;
  cv_.wait(lock, [&] { return error_ || (slot_batch_[s] == b && ready_[s]); });
  if (error_) std::rethrow_exception(error_);
  ++next_batch_;
  return slots_[s];
}

}  // namespace dpbench
