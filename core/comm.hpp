// The communicator interface every training mode is written against: the collectives of
// NCCL/MPI on float buffers, plus point-to-point send/recv, barrier and abort. Every backend
// counts the bytes it sends and receives on behalf of its rank, so byte counts compare directly
// across backends. Counts are in elements unless a name says bytes. Not thread-safe per rank:
// one communicator is used by one thread at a time (a rank's compute or communication thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/names.hpp"
#include "core/ring.hpp"

namespace dpbench {

// Bytes one rank moved through its communicator.
struct CommStats {
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
};

// Elements one rank sends and receives in a collective (ElementCounts), by the algorithm
// dpbench's `local` backend runs. Backends whose library picks its own algorithm (MPI, NCCL)
// count these too, so byte counts compare across backends (as nccl-tests' busbw assumes a
// ring). The ring's own counts are in core/ring.hpp.
// Chain reduce (towards root) or broadcast (from root) of n elements: every rank but the chain's
// end sends n, every rank but its start receives n.
ElementCounts chain_reduce_counts(std::size_t n, int p, int rank, int root);
ElementCounts chain_broadcast_counts(std::size_t n, int p, int rank, int root);
// gloo's reduce (gloo/reduce.cc): a ring reduce-scatter over p chunks (as ring_chunk), rank r
// ending with chunk r, then every other rank sends its chunk to the root. A non-root sends
// ~(p-1)/p n + n/p and receives ~(p-1)/p n; the root sends ~(p-1)/p n and receives ~2(p-1)/p n.
ElementCounts gloo_reduce_counts(std::size_t n, int p, int rank, int root);
// gloo's broadcast (gloo/broadcast.cc): a binomial tree over ranks renumbered so that the root is
// 0; virtual rank v receives n once (v > 0) and sends n to v + 2^i for every i at or above v's
// bit length with v + 2^i < p. The root sends ceil(log2 p) n.
ElementCounts binomial_broadcast_counts(std::size_t n, int p, int rank, int root);

// Root exchange of segments counts[0..p) (scatterv from root, gatherv to root): the root moves
// every segment but its own, every other rank its own segment. In scatterv the root sends and
// the others receive; root_gather_counts is the reverse. Nothing moves when p < 2.
ElementCounts root_scatter_counts(const std::vector<std::size_t>& counts, int rank, int root);
ElementCounts root_gather_counts(const std::vector<std::size_t>& counts, int rank, int root);
// Where each segment of counts starts: the exclusive prefix sums, [counts.size()] elements.
std::vector<std::size_t> segment_offsets(const std::vector<std::size_t>& counts);
// True when every count equals the first (a collective with equal segments; true when empty).
bool equal_counts(const std::vector<std::size_t>& counts);
// Calls op(rank, offset, count) for every rank but `skip` (-1: none) whose count is not 0, in
// rank order, and returns the first result that is not `ok` (then stops), else `ok`. How a
// backend issues one call per peer segment of a grouped collective (ncclSend per rank, ...).
template <typename Result, typename Op>
Result for_each_segment(const std::vector<std::size_t>& counts, int skip, Result ok, Op op) {
  std::size_t offset = 0;
  for (std::size_t r = 0; r < counts.size(); offset += counts[r], ++r) {
    if (static_cast<int>(r) == skip || counts[r] == 0) continue;
    const Result result = op(static_cast<int>(r), offset, counts[r]);
    if (result != ok) return result;
  }
  return ok;
}
// Throws InputError unless world_size >= 1 and 0 <= rank < world_size.
void check_world_rank(int world_size, int rank);

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Which backend this is (core/names.hpp).
  virtual Backend backend() const = 0;

  // In-place sum over all ranks; buf: [n] floats on every rank.
  virtual void allreduce_sum(float* buf, std::size_t n) = 0;
  // Sum of every rank's buf: [n] lands in root's buf. Other ranks' buf is left unchanged.
  virtual void reduce_sum(float* buf, std::size_t n, int root) = 0;
  // Copies root's buf: [n] into every rank's buf.
  virtual void broadcast(float* buf, std::size_t n, int root) = 0;
  // recv: [world_size * n], rank r's send: [n] lands at recv[r*n].
  virtual void allgather(const float* send, float* recv, std::size_t n) = 0;
  // Root's send holds counts[0] + counts[1] + ... floats; rank r receives its counts[r] floats,
  // starting at the prefix sum, into recv. send is read on root only.
  virtual void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) = 0;
  // Inverse of scatterv: rank r's send: [counts[r]] lands in root's recv at the prefix sum.
  virtual void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) = 0;
  // Reduce-scatter over segments: send holds counts[0] + ... + counts[p-1] floats on every rank
  // (counts.size() == world_size; a count may be 0); rank r's recv: [counts[r]] receives the sum
  // over ranks of segment r of send (which starts at the prefix sum). send is used as scratch:
  // its contents are unspecified afterwards; recv must not overlap it. (MPI_Reduce_scatter; ncclReduceScatter when the
  // counts are equal.)
  virtual void reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) = 0;
  // In-place all-gather over segments: buf holds counts[0] + ... + counts[p-1] floats; rank r's
  // segment (at the prefix sum) is copied into every rank's buf. (MPI_Allgatherv in place.)
  virtual void allgatherv(float* buf, const std::vector<std::size_t>& counts) = 0;
  // Blocking point-to-point transfer of n floats; returns when the peer has the data.
  virtual void send(const float* buf, std::size_t n, int dst) = 0;
  virtual void recv(float* buf, std::size_t n, int src) = 0;
  // Sends send: [send_n] to dst while receiving recv: [recv_n] from src (MPI_Sendrecv); returns
  // when both are done. Ranks may form a cycle (every rank of a ring at one step) without
  // deadlock. send and recv must not overlap; dst may equal src.
  virtual void sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n, int src) = 0;
  virtual void barrier() = 0;
  // Ends the group: every rank blocked now or later in this communicator throws Aborted(reason).
  virtual void abort(const std::string& reason) = 0;

  // Nonblocking in-place sum all-reduce (MPI_Iallreduce; ncclAllReduce on the comm stream).
  // Backends with supports_async() start it and return; the others run it at once. buf may only
  // be read after wait_all(). progress() lets started operations advance (MPI needs calls into
  // the library to progress); wait_all() completes every started operation.
  virtual bool supports_async() const { return false; }
  virtual void allreduce_sum_start(float* buf, std::size_t n) { allreduce_sum(buf, n); }
  // Nonblocking reduce_scatterv_sum (MPI_Ireduce_scatter; NCCL's stream); send, recv and counts
  // must stay valid until wait_all().
  virtual void reduce_scatterv_sum_start(float* send, const std::vector<std::size_t>& counts, float* recv) {
    reduce_scatterv_sum(send, counts, recv);
  }
  virtual void progress() {}
  virtual void wait_all() {}

  CommStats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  // Argument checks every backend makes; each throws Error:
  // "<op>: root R out of range for world_size P", "<op>: N counts for world_size P", and for
  // send/recv ("destination" / "source") "<op>: <role> R invalid for rank r of P".
  void check_root(int root, const char* op) const;
  void check_counts(const std::vector<std::size_t>& counts, const char* op) const;
  void check_peer(int peer, const char* op, const char* role) const;

  void count(const ElementCounts& c) { count(c.sent, c.received); }
  void count(std::size_t sent_elems, std::size_t received_elems) {
    stats_.bytes_sent += static_cast<std::int64_t>(sent_elems * sizeof(float));
    stats_.bytes_received += static_cast<std::int64_t>(received_elems * sizeof(float));
  }
  CommStats stats_;
};

}  // namespace dpbench
