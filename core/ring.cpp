#include "core/ring.hpp"

namespace dpbench {

namespace {

// The elements a ring half moves on `rank` over its p-1 steps, chunk i of length length(i).
template <typename StepFn, typename LengthFn>
ElementCounts half_counts(int rank, int p, int shift, StepFn step, LengthFn length) {
  ElementCounts c;
  for (int s = 0; s < p - 1; ++s) {
    const RingStep st = step(rank, p, shift, s);
    c.sent += length(st.send);
    c.received += length(st.recv);
  }
  return c;
}
}  // namespace

RingStep ring_reduce_scatter_step(int rank, int p, int shift, int s) {
  return {ring_mod(rank + shift - s - 1, p), ring_mod(rank + shift - s - 2, p)};
}

RingStep ring_all_gather_step(int rank, int p, int shift, int s) {
  return {ring_mod(rank + shift - s, p), ring_mod(rank + shift - s - 1, p)};
}

ElementCounts ring_allreduce_counts(std::size_t n, int p, int rank) {
  if (p < 2 || n == 0) return {};
  const auto length = [n, p](int i) { return ring_chunk(n, p, i).length; };
  const ElementCounts rs = half_counts(rank, p, 1, ring_reduce_scatter_step, length);
  const ElementCounts ag = half_counts(rank, p, 1, ring_all_gather_step, length);
  return {rs.sent + ag.sent, rs.received + ag.received};
}

ElementCounts ring_reduce_scatter_counts(const std::vector<std::size_t>& counts, int rank) {
  const int p = static_cast<int>(counts.size());
  if (p < 2) return {};
  return half_counts(rank, p, 0, ring_reduce_scatter_step,
                     [&counts](int i) { return counts[static_cast<std::size_t>(i)]; });
}

ElementCounts ring_allgather_counts(const std::vector<std::size_t>& counts, int rank) {
  const int p = static_cast<int>(counts.size());
  if (p < 2) return {};
  return half_counts(rank, p, 0, ring_all_gather_step,
                     [&counts](int i) { return counts[static_cast<std::size_t>(i)]; });
}

}  // namespace dpbench
