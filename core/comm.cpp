#include "core/comm.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/ring.hpp"

namespace dpbench {

ElementCounts chain_reduce_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2) return {};
  const int pos = ring_mod(rank - root - 1, p);  // the chain ends at the root
  return {pos < p - 1 ? n : 0, pos > 0 ? n : 0};
}

ElementCounts chain_broadcast_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2) return {};
  const int pos = ring_mod(rank - root, p);  // the chain starts at the root
  return {pos < p - 1 ? n : 0, pos > 0 ? n : 0};
}

ElementCounts gloo_reduce_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2 || n == 0) return {};
  ElementCounts c;
  for (int i = 0; i < p; ++i) {
    const std::size_t chunk = ring_chunk(n, p, i).length;
    if (i != rank) c.sent += chunk;                       // reduce-scatter: every chunk but its own
    if (i != ring_mod(rank + 1, p)) c.received += chunk;  // ... and from its neighbour, all but one
    if (rank == root && i != root) c.received += chunk;   // gather to root
  }
  if (rank != root) c.sent += ring_chunk(n, p, rank).length;
  return c;
}

ElementCounts binomial_broadcast_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2 || n == 0) return {};
  const int v = ring_mod(rank - root, p);
  int bits = 0;  // v's bit length
  while ((1 << bits) <= v) ++bits;
  ElementCounts c{0, v > 0 ? n : 0};
  for (int i = bits; (1 << i) < p; ++i) {
    if (v + (1 << i) < p) c.sent += n;
  }
  return c;
}

ElementCounts root_scatter_counts(const std::vector<std::size_t>& counts, int rank, int root) {
  if (counts.size() < 2) return {};
  const std::size_t mine = counts[static_cast<std::size_t>(rank)];
  if (rank != root) return {0, mine};
  return {std::accumulate(counts.begin(), counts.end(), std::size_t{0}) - mine, 0};
}

ElementCounts root_gather_counts(const std::vector<std::size_t>& counts, int rank, int root) {
  const ElementCounts scatter = root_scatter_counts(counts, rank, root);
  return {scatter.received, scatter.sent};
}

std::vector<std::size_t> segment_offsets(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), std::size_t{0});
  return offsets;
}

bool equal_counts(const std::vector<std::size_t>& counts) {
  return std::all_of(counts.begin(), counts.end(), [&](std::size_t c) { return c == counts.front(); });
}

void check_world_rank(int world_size, int rank) {
  if (world_size < 1) throw InputError(fmt::format("world_size {}: must be at least 1", world_size));
  if (rank < 0 || rank >= world_size) {
    throw InputError(fmt::format("rank {}: out of range for world_size {}", rank, world_size));
  }
}

void Communicator::check_root(int root, const char* op) const {
  if (root < 0 || root >= world_size()) {
    throw Error(fmt::format("{}: root {} out of range for world_size {}", op, root, world_size()));
  }
}

void Communicator::check_counts(const std::vector<std::size_t>& counts, const char* op) const {
  if (counts.size() != static_cast<std::size_t>(world_size())) {
    throw Error(fmt::format("{}: {} counts for world_size {}", op, counts.size(), world_size()));
  }
}

void Communicator::check_peer(int peer, const char* op, const char* role) const {
  if (peer < 0 || peer >= world_size() || peer == rank()) {
    throw Error(fmt::format("{}: {} {} invalid for rank {} of {}", op, role, peer, rank(), world_size()));
  }
}

}  // namespace dpbench
