// The ring (reduce-scatter + all-gather) in one place: how n elements are cut into p chunks, which
// chunk each rank sends and receives at every step, and the elements that moves per rank. The
// `local` engine (core/local_comm.cpp) runs this schedule; every other engine that reports ring
// traffic (MPI, NCCL) counts it with the functions below, so byte counts compare across engines
// as nccl-tests' busbw assumes. Algorithm: Patarasuk & Yuan, "Bandwidth optimal all-reduce
// algorithms for clusters of workstations" (JPDC 2009), the ring NCCL and gloo's
// AllreduceRing run.
#pragma once

#include <cstddef>
#include <vector>

namespace dpbench {

// Elements one rank sends and receives in a collective.
struct ElementCounts {
  std::size_t sent = 0;
  std::size_t received = 0;
};

// a mod p in [0, p) for any a (ranks around a ring: rank - 1 of rank 0 is p - 1). p > 0.
inline int ring_mod(int a, int p) { return ((a % p) + p) % p; }

// Offset and length of chunk i when n elements are split into p nearly equal chunks (the first
// n % p chunks get one more).
struct Chunk {
  std::size_t offset;
  std::size_t length;
};
inline Chunk ring_chunk(std::size_t n, int p, int i) {
  const std::size_t base = n / static_cast<std::size_t>(p);
  const std::size_t extra = n % static_cast<std::size_t>(p);
  const auto ui = static_cast<std::size_t>(i);
  return {ui * base + (ui < extra ? ui : extra), base + (ui < extra ? 1 : 0)};
}

// What rank r does at step s (0 <= s < p-1) of a ring half: sends chunk `send` to rank r+1 and
// receives chunk `recv` from rank r-1 (both mod p).
struct RingStep {
  int send;
  int recv;
};
// Reduce-scatter: rank r receives chunk (r+shift-s-2) and adds it into its own copy, having sent
// chunk (r+shift-s-1); after p-1 steps rank r holds the full sum of chunk (r+shift) mod p.
RingStep ring_reduce_scatter_step(int rank, int p, int shift, int s);
// All-gather, rank r starting with chunk (r+shift) mod p: it sends chunk (r+shift-s) and
// receives chunk (r+shift-s-1); after p-1 steps every rank holds every chunk.
RingStep ring_all_gather_step(int rank, int p, int shift, int s);

// Ring all-reduce of n elements (reduce-scatter then all-gather over ring_chunk's chunks, shift
// 1): 2(p-1)/p * n each way, up to chunk rounding.
ElementCounts ring_allreduce_counts(std::size_t n, int p, int rank);
// Ring reduce-scatter over segments of counts[0..p) elements (shift 0), rank r ending with the
// sum of segment r: rank r sends every segment but its own and receives every segment but rank
// r-1's (with equal segments, (p-1)/p * n each way).
ElementCounts ring_reduce_scatter_counts(const std::vector<std::size_t>& counts, int rank);
// Ring all-gather of segments (shift 0), rank r starting with segment r: rank r sends every
// segment but rank r+1's and receives every segment but its own.
ElementCounts ring_allgather_counts(const std::vector<std::size_t>& counts, int rank);

}  // namespace dpbench
