// The communicator interface both training modes are written against: the collectives of
// NCCL/MPI on float buffers, plus point-to-point send/recv, barrier and abort. Every backend
// counts the bytes it sends and receives on behalf of its rank, so byte counts compare directly
// across backends. Counts are in elements unless a name says bytes. Not thread-safe per rank:
// one communicator is used by one thread at a time (a rank's compute or communication thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dpbench {

// Bytes one rank moved through its communicator.
struct CommStats {
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // Backend name: "local", "nccl", "mpi".
  virtual std::string backend() const = 0;

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
  virtual void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv,
                        int root) = 0;
  // Inverse of scatterv: rank r's send: [counts[r]] lands in root's recv at the prefix sum.
  virtual void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv,
                       int root) = 0;
  // Blocking point-to-point transfer of n floats; returns when the peer has the data.
  virtual void send(const float* buf, std::size_t n, int dst) = 0;
  virtual void recv(float* buf, std::size_t n, int src) = 0;
  virtual void barrier() = 0;
  // Ends the group: every rank blocked now or later in this communicator throws Aborted(reason).
  virtual void abort(const std::string& reason) = 0;

  CommStats stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 protected:
  void count(std::size_t sent_elems, std::size_t received_elems) {
    stats_.bytes_sent += static_cast<std::int64_t>(sent_elems * sizeof(float));
    stats_.bytes_received += static_cast<std::int64_t>(received_elems * sizeof(float));
  }
  CommStats stats_;
};

// Offset and length of chunk i when n elements are split into p nearly equal chunks (the first
// n % p chunks get one more). Used by the ring algorithms.
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

}  // namespace dpbench
