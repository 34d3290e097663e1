// DataLoader: a ring of preallocated staging batches filled either synchronously in next()
// (num_workers == 0) or by worker threads that each own every num_workers-th batch, as in
// PyTorch's _MultiProcessingDataLoaderIter but with threads. Each sample depends only on its
// index, so batch contents do not depend on num_workers. Not for: shuffling (the caller passes
// the epoch's indices, e.g. a DistributedSampler's) or several epochs per loader.
#include "workloads/dataloader.hpp"

#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

DataLoader::DataLoader(const Dataset& dataset, std::vector<std::int64_t> indices,
                       std::size_t batch_size, DataLoaderOptions options, MemoryTracker& tracker)
    : dataset_(dataset),
      indices_(std::move(indices)),
      batch_size_(batch_size),
      options_(options),
      num_batches_(0) {
  if (batch_size < 1) throw InputError("DataLoader: batch size must be >= 1");
  if (options.num_workers < 0) {
    throw InputError(fmt::format("DataLoader: num_workers {} must be >= 0", options.num_workers));
  }
  if (options.num_workers > 0 && options.prefetch_factor < 1) {
    throw InputError(
        fmt::format("DataLoader: prefetch_factor {} must be >= 1", options.prefetch_factor));
  }
  const std::int64_t n = dataset_.size();
  for (std::size_t i = 0; i < indices_.size(); ++i) {
    if (indices_[i] < 0 || indices_[i] >= n) {
      throw InputError(fmt::format("DataLoader: index {} at position {} is outside {} [0, {})",
                                   indices_[i], i, dataset_.name(), n));
    }
  }
  num_batches_ = indices_.size() / batch_size_;

  const std::size_t features = dataset_.shape().features();
  const std::size_t nslots =
      options_.num_workers == 0
          ? 1
          : static_cast<std::size_t>(options_.num_workers) *
                static_cast<std::size_t>(options_.prefetch_factor);
  slots_.reserve(nslots);
  for (std::size_t s = 0; s < nslots; ++s) {
    Batch batch;
    batch.inputs =
        TrackedBuffer<float>(tracker, MemoryCategory::data_staging, batch_size_ * features);
    batch.labels = TrackedBuffer<std::int32_t>(tracker, MemoryCategory::data_staging, batch_size_);
    slots_.push_back(std::move(batch));
  }
  ready_.assign(nslots, 0);
  slot_batch_.resize(nslots);
  for (std::size_t s = 0; s < nslots; ++s) slot_batch_[s] = s;

  try {
    for (int w = 0; w < options_.num_workers; ++w) {
      workers_.emplace_back(&DataLoader::worker_loop, this, w);
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : workers_) t.join();
    throw;
  }
}

DataLoader::~DataLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void DataLoader::load_into(Batch& batch, std::size_t batch_index) const {
  const std::size_t features = dataset_.shape().features();
  const int classes = dataset_.num_classes();
  const std::size_t first = batch_index * batch_size_;
  for (std::size_t i = 0; i < batch_size_; ++i) {
    if (stop_.load(std::memory_order_relaxed)) return;  // the loader is being destroyed
    const std::int64_t index = indices_[first + i];
    const int label = dataset_.load(index, batch.inputs.data() + i * features);
    if (label < 0 || label >= classes) {
      throw Error(fmt::format("{}: sample {} has label {} outside [0, {})", dataset_.name(),
                              index, label, classes));
    }
    batch.labels[i] = label;
  }
  batch.size = batch_size_;
  batch.index = static_cast<std::int64_t>(batch_index);
}

void DataLoader::worker_loop(int worker) {
  const std::size_t nslots = slots_.size();
  const auto stride = static_cast<std::size_t>(options_.num_workers);
  try {
    for (std::size_t b = static_cast<std::size_t>(worker); b < num_batches_; b += stride) {
      const std::size_t s = b % nslots;
      {
        // Wait until the consumer has released the batch b - nslots that occupied this slot.
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || slot_batch_[s] == b; });
        if (stop_) return;
      }
      load_into(slots_[s], b);  // the slot is ours alone until ready_[s] is set
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stop_) return;
        ready_[s] = 1;
      }
      cv_.notify_all();
    }
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;  // the epoch is lost: let the other workers exit too
    }
    cv_.notify_all();
  }
}

const Batch& DataLoader::next() {
  if (options_.num_workers == 0) {
    if (next_batch_ >= num_batches_) {
      throw Error(fmt::format("DataLoader: all {} batches of this epoch were consumed",
                              num_batches_));
    }
    load_into(slots_[0], next_batch_);
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
    throw Error(
        fmt::format("DataLoader: all {} batches of this epoch were consumed", num_batches_));
  }
  const std::size_t b = next_batch_;
  const std::size_t s = b % nslots;
  cv_.wait(lock, [&] { return error_ || (slot_batch_[s] == b && ready_[s]); });
  if (error_) std::rethrow_exception(error_);
  ++next_batch_;
  return slots_[s];
}

}  // namespace dpbench
