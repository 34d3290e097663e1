// DistributedSampler with the semantics of PyTorch's torch/utils/data/distributed.py: the
// permutation depends only on (seed + epoch, dataset size); without drop_last the list is padded
// by repeating its head up to a multiple of num_replicas, with drop_last the tail is cut; rank r
// takes indices[r::num_replicas]. Call set_epoch() at the start of every epoch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpbench {

class DistributedSampler {
 public:
  // Throws InputError if dataset_size < 1, num_replicas < 1, rank outside [0, num_replicas),
  // or (with drop_last) dataset_size < num_replicas.
  DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle = true, std::uint64_t seed = 0,
                     bool drop_last = false);

  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  // Indices for this rank in the current epoch: num_samples() of them.
  std::vector<std::int64_t> indices() const;
  // ceil(N / num_replicas), or floor(N / num_replicas) with drop_last.
  std::int64_t num_samples() const;
  std::int64_t total_size() const { return num_samples() * num_replicas_; }

 private:
  std::int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t epoch_ = 0;
};

// Uneven split (per-rank batch sizes): rank r's indices when every global batch of `global_batch`
// consecutive entries of `order` is cut into per-rank slices, r's slice starting at `offset` with
// `local_batch` entries, for `steps` steps. Over an epoch this partitions the data in proportion
// to the rank batches, and the ranks together see exactly the 1-rank run's batches. Throws
// InputError if order is shorter than steps * global_batch or the slice leaves the batch.
std::vector<std::int64_t> proportional_shard(const std::vector<std::int64_t>& order, std::size_t global_batch,
                                             std::size_t offset, std::size_t local_batch, long steps);

// The permutation of [0, n) used by DistributedSampler for (seed + epoch): a Fisher-Yates
// shuffle driven by std::mt19937_64, so it is the same on every platform.
std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed_plus_epoch);

}  // namespace dpbench
