// DistributedSampler following torch/utils/data/distributed.py step by step: permute (or not),
// pad by repeating the head or cut the tail to total_size, then take every num_replicas-th index
// starting at rank. The permutation is our own Fisher-Yates over std::mt19937_64, not torch's
// randperm, so the orders differ from PyTorch's while the partitioning rules are the same.
#include "workloads/distributed_sampler.hpp"

#include <numeric>
#include <random>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

std::vector<std::int64_t> shuffled_indices(std::int64_t n, std::uint64_t seed_plus_epoch) {
  std::vector<std::int64_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), std::int64_t{0});
  // Fisher-Yates with j = rng() % (i + 1): the modulo keeps it platform-independent, unlike
  // std::uniform_int_distribution. Its bias is below 2^-40 for any realistic n.
  std::mt19937_64 rng(seed_plus_epoch);
  for (std::int64_t i = n - 1; i >= 1; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(idx[static_cast<std::size_t>(i)], idx[static_cast<std::size_t>(j)]);
  }
  return idx;
}

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int num_replicas, int rank, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : dataset_size_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  if (dataset_size < 1) {
    throw InputError(fmt::format("DistributedSampler: dataset size {} must be >= 1", dataset_size));
  }
  if (num_replicas < 1) {
    throw InputError(fmt::format("DistributedSampler: num_replicas {} must be >= 1", num_replicas));
  }
  if (rank < 0 || rank >= num_replicas) {
    throw InputError(fmt::format("DistributedSampler: rank {} is outside [0, {})", rank, num_replicas));
  }
  if (drop_last && dataset_size < num_replicas) {
    throw InputError(fmt::format("DistributedSampler: drop_last with {} samples for {} replicas leaves none per rank",
                                 dataset_size, num_replicas));
  }
}

std::int64_t DistributedSampler::num_samples() const {
  // torch: drop_last and uneven -> ceil((N - R) / R), which equals floor(N / R); else ceil(N / R).
  if (drop_last_) return dataset_size_ / num_replicas_;
  return (dataset_size_ + num_replicas_ - 1) / num_replicas_;
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> all;
  if (shuffle_) {
    all = shuffled_indices(dataset_size_, seed_ + static_cast<std::uint64_t>(epoch_));
  } else {
    all.resize(static_cast<std::size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), std::int64_t{0});
  }
  const auto total = static_cast<std::size_t>(total_size());
  if (total > all.size()) {
    // Pad by repeating the list from its head (the whole list again if padding exceeds it).
    const std::size_t n = all.size();
    all.reserve(total);
    for (std::size_t i = n; i < total; ++i) all.push_back(all[i % n]);
  } else {
    all.resize(total);  // drop_last: cut the tail
  }
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples()));
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total; i += static_cast<std::size_t>(num_replicas_)) {
    mine.push_back(all[i]);
  }
  return mine;
}

std::vector<std::int64_t> proportional_shard(const std::vector<std::int64_t>& order, std::size_t global_batch,
                                             std::size_t offset, std::size_t local_batch, long steps) {
  if (offset + local_batch > global_batch) {
    throw InputError(
        fmt::format("rank slice [{}, {}) outside the global batch of {}", offset, offset + local_batch, global_batch));
  }
  if (steps < 0 || static_cast<std::size_t>(steps) * global_batch > order.size()) {
    throw InputError(
        fmt::format("{} steps of {} samples exceed the {} samples of the epoch", steps, global_batch, order.size()));
  }
  std::vector<std::int64_t> shard;
  shard.reserve(static_cast<std::size_t>(steps) * local_batch);
  for (long t = 0; t < steps; ++t) {
    const auto begin = order.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(t) * global_batch + offset);
    shard.insert(shard.end(), begin, begin + static_cast<std::ptrdiff_t>(local_batch));
  }
  return shard;
}

}  // namespace dpbench
