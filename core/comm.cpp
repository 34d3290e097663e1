#include "core/comm.hpp"

namespace dpbench {

namespace {
int mod(int a, int p) { return ((a % p) + p) % p; }
}  // namespace

ElementCounts ring_allreduce_counts(std::size_t n, int p, int rank) {
  ElementCounts c;
  if (p < 2 || n == 0) return c;
  // Step s of the reduce-scatter: receive chunk r-s-1, send chunk r-s. Step s of the all-gather:
  // receive chunk r-s, send chunk r+1-s.
  for (int s = 0; s < p - 1; ++s) {
    c.received += ring_chunk(n, p, mod(rank - s - 1, p)).length + ring_chunk(n, p, mod(rank - s, p)).length;
    c.sent += ring_chunk(n, p, mod(rank - s, p)).length + ring_chunk(n, p, mod(rank + 1 - s, p)).length;
  }
  return c;
}

ElementCounts chain_reduce_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2) return {};
  const int pos = mod(rank - root - 1, p);  // the chain ends at the root
  return {pos < p - 1 ? n : 0, pos > 0 ? n : 0};
}

ElementCounts chain_broadcast_counts(std::size_t n, int p, int rank, int root) {
  if (p < 2) return {};
  const int pos = mod(rank - root, p);  // the chain starts at the root
  return {pos < p - 1 ? n : 0, pos > 0 ? n : 0};
}

namespace {
std::size_t total_except(const std::vector<std::size_t>& counts, std::size_t a, std::size_t b) {
  std::size_t total = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (i != a && i != b) total += counts[i];
  }
  return total;
}
}  // namespace

ElementCounts ring_reduce_scatter_counts(const std::vector<std::size_t>& counts, int rank) {
  const int p = static_cast<int>(counts.size());
  if (p < 2) return {};
  const auto r = static_cast<std::size_t>(rank);
  const auto prev = static_cast<std::size_t>(mod(rank - 1, p));
  return {total_except(counts, r, r), total_except(counts, prev, prev)};
}

ElementCounts ring_allgather_counts(const std::vector<std::size_t>& counts, int rank) {
  const int p = static_cast<int>(counts.size());
  if (p < 2) return {};
  const auto r = static_cast<std::size_t>(rank);
  const auto next = static_cast<std::size_t>(mod(rank + 1, p));
  return {total_except(counts, next, next), total_except(counts, r, r)};
}

}  // namespace dpbench
