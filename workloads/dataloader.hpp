// DataLoader with the semantics of PyTorch's torch/utils/data/dataloader.py for a fixed list of
// sample indices: batches of batch_size consecutive indices (an incomplete last batch is
// dropped, as with drop_last=True), delivered in order. num_workers == 0 loads on the calling
// thread inside next(); num_workers > 0 starts that many worker threads, worker w loading
// batches w, w + num_workers, ..., each keeping up to prefetch_factor batches ready. Batches
// live in staging buffers charged to the rank's MemoryTracker as data_staging. The time next()
// spends waiting is the "data wait" of the step breakdown. One epoch per DataLoader.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/memory.hpp"
#include "workloads/dataset.hpp"

namespace dpbench {

struct DataLoaderOptions {
  int num_workers = 0;      // worker threads; 0 = load in next() on the calling thread
  int prefetch_factor = 2;  // batches loaded in advance per worker (>= 1 when num_workers > 0)
};

// One batch: inputs [size, features] row-major floats and labels [size].
struct Batch {
  TrackedBuffer<float> inputs;
  TrackedBuffer<std::int32_t> labels;
  std::size_t size = 0;
  std::int64_t index = -1;  // position of this batch in the epoch
};

class DataLoader {
 public:
  // indices: the samples of this epoch in order (e.g. a DistributedSampler's). Throws InputError
  // if batch_size < 1, num_workers < 0 or prefetch_factor < 1.
  DataLoader(const Dataset& dataset, std::vector<std::int64_t> indices, std::size_t batch_size,
             DataLoaderOptions options, MemoryTracker& tracker);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // floor(indices.size() / batch_size)
  std::size_t num_batches() const { return num_batches_; }
  // The next batch in order; valid until the following call to next(). Blocks until it is
  // loaded. Rethrows a worker's exception. Throws Error when all batches were consumed.
  const Batch& next();

 private:
  void load_into(Batch& batch, std::size_t batch_index) const;
  void worker_loop(int worker);

  const Dataset& dataset_;
  std::vector<std::int64_t> indices_;
  std::size_t batch_size_;
  DataLoaderOptions options_;
  std::size_t num_batches_;
  std::size_t next_batch_ = 0;

  // Slot ring: batch i is loaded into slot i % slots_.size().
  std::vector<Batch> slots_;
  std::vector<char> ready_;  // per slot: holds batch slot_batch_[s], loaded
  std::vector<std::size_t> slot_batch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};  // set under mutex_; also polled per sample while loading
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
};

}  // namespace dpbench
