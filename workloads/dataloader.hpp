// DataLoader with the semantics of PyTorch's torch/utils/data/dataloader.py for a list of sample
// indices per epoch: batches of batch_size consecutive indices (an incomplete last batch is
// dropped, as with drop_last=True), delivered in order. num_workers == 0 loads on the calling
// thread inside next(); num_workers > 0 runs that many worker threads, worker w loading batches
// w, w + num_workers, ..., each keeping up to prefetch_factor batches ready. Batches live in
// staging buffers allocated once per DataLoader and charged to the rank's MemoryTracker as
// data_staging. The time next() spends waiting is the "data wait" of the step breakdown.
//
// Epochs: start_epoch(indices, epoch) begins an epoch (the 5-argument constructor starts epoch
// 0). Any batches of the previous epoch not yet consumed are dropped. With persistent_workers the
// same worker threads serve every epoch; without it each epoch stops and joins the previous
// epoch's workers and starts new ones, as PyTorch re-creates its iterator.
//
// Optional augmentation of C x H x W samples (after Dataset::load()): a random crop with zero
// padding (torchvision RandomCrop(size, padding)) followed by a random horizontal flip
// (RandomHorizontalFlip, p = 0.5). Its randomness is a hash of (seed, epoch, dataset index) only,
// so batches are bitwise identical for any num_workers, persistent or not, and any timing.
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
  // Keep the worker threads alive between epochs (PyTorch persistent_workers): start_epoch()
  // hands the new epoch to the same threads instead of joining them and starting new ones.
  bool persistent_workers = false;
  // Per sample, the loading thread busy-waits this many microseconds of its own CPU time
  // (clock_gettime(CLOCK_THREAD_CPUTIME_ID)), emulating heavy decoding so that the effect of
  // num_workers is measurable. As real decoding it costs CPU: extra workers sharing a core still
  // pay it in full. 0 = off; must be >= 0.
  double decode_cost_us = 0;
  // Random crop with zero padding of this many pixels on each side (torchvision
  // RandomCrop(size, padding)): the H x W sample is padded to (H + 2p) x (W + 2p) and an H x W
  // window is taken at a uniformly drawn offset. The padding value is 0.0f, which in the datasets'
  // normalised space is the mean (what a zero pixel decodes to is dataset-specific, so it is not
  // used). 0 = off; must be >= 0.
  int crop_padding = 0;
  // Random horizontal flip with p = 0.5 (RandomHorizontalFlip), applied after the crop.
  bool hflip = false;
  // Page-locked staging for asynchronous host-to-device copies. On CPU-only runs it has no
  // effect: staging buffers are ordinary host memory and batches are consumed in place.
  bool pin_memory = false;
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
  // A loader with no epoch yet: call start_epoch() before next(). Allocates the staging slots
  // (num_workers * prefetch_factor batches, or 1 when num_workers == 0). Throws InputError if
  // batch_size < 1, num_workers < 0, prefetch_factor < 1 (with workers), decode_cost_us < 0 or
  // crop_padding < 0. Augmentation randomness comes from a hash of (seed, epoch, sample index)
  // only (the run's --seed), so the batches do not depend on num_workers or on timing.
  DataLoader(const Dataset& dataset, std::size_t batch_size, DataLoaderOptions options, std::uint64_t seed,
             MemoryTracker& tracker);
  // The constructor above followed by start_epoch(indices, 0).
  DataLoader(const Dataset& dataset, std::vector<std::int64_t> indices, std::size_t batch_size,
             DataLoaderOptions options, std::uint64_t seed, MemoryTracker& tracker);
  ~DataLoader();  // stops and joins the workers
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Begins epoch `epoch` over `indices` (e.g. a DistributedSampler's after set_epoch(epoch)).
  // Batches of the previous epoch not yet consumed are dropped (workers stop at their next
  // sample) and a batch returned by next() is no longer valid. The epoch number seeds the
  // augmentation. Throws InputError if an index is outside the dataset (the previous epoch then
  // goes on unchanged). Not thread-safe with next(): call both from the consuming thread.
  void start_epoch(std::vector<std::int64_t> indices, std::int64_t epoch);

  // floor(indices.size() / batch_size) of the current epoch (0 before the first).
  std::size_t num_batches() const { return num_batches_; }
  // The next batch of the current epoch in order; valid until the following call to next() or
  // start_epoch(). Blocks until it is loaded. Rethrows a worker's exception (the rest of that
  // epoch is lost). Throws Error when all batches were consumed or no epoch was started.
  const Batch& next();

  // Worker threads created so far over all epochs (for tests): num_workers with
  // persistent_workers, num_workers per epoch without.
  std::size_t threads_started() const { return threads_started_; }

 private:
  void load_into(Batch& batch, std::size_t batch_index, const std::vector<std::int64_t>& indices,
                 std::int64_t epoch) const;
  void augment(float* sample, std::int64_t index, std::int64_t epoch) const;
  void worker_loop(int worker);
  void run_worker_epoch(int worker);
  void start_workers();
  void stop_workers();  // joins every worker; epoch state untouched

  const Dataset& dataset_;
  std::size_t batch_size_;
  DataLoaderOptions options_;
  std::uint64_t seed_;  // of the augmentation
  SampleShape shape_;

  // Current epoch. Written by start_epoch() only while no worker is inside an epoch (busy_ == 0,
  // under mutex_); workers read them after entering the epoch under mutex_.
  std::vector<std::int64_t> indices_;
  std::int64_t epoch_ = 0;
  std::size_t num_batches_ = 0;
  bool started_ = false;        // an epoch is running (consumer thread only)
  std::size_t next_batch_ = 0;  // consumer thread only

  // Slot ring: batch i is loaded into slot i % slots_.size().
  std::vector<Batch> slots_;
  std::vector<char> ready_;  // per slot: holds batch slot_batch_[s], loaded
  std::vector<std::size_t> slot_batch_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::uint64_t generation_ = 0;  // incremented by each start_epoch (under mutex_)
  int busy_ = 0;                  // workers inside the current epoch (under mutex_)
  // Set under mutex_, also polled per sample while loading: stop_ ends the worker threads,
  // cancel_ ends the current epoch (start_epoch() or a worker's exception).
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancel_{false};
  std::exception_ptr error_;
  std::vector<std::thread> workers_;
  std::size_t threads_started_ = 0;
};

}  // namespace dpbench
