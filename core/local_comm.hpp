// The `local` backend: dpbench's own in-process collectives for ranks that are threads of one
// process, over shared memory. Ranks publish buffer pointers and read their neighbour's data
// directly, step by step, separated by an abortable barrier; a step of a real network
// algorithm (one message to a neighbour) becomes one read of the neighbour's memory here, and
// is counted as such. Algorithms:
//   allreduce_sum: ring reduce-scatter + all-gather, 2(p-1) steps, each rank sends and receives
//                  2(p-1)/p * n elements (Patarasuk & Yuan 2009).
//   reduce_scatterv_sum, allgatherv: the two halves of that ring over segments of any sizes,
//                  rank r ending with (starting from) segment r.
//   reduce_sum, broadcast: pipelined chain along the ring towards/from the root, in slices of at
//                  most kSliceElems and at most n/8 (as NCCL's ring reduce/broadcast): each rank
//                  moves n elements at most once; relay ranks hold a two-slice scratch buffer.
//   scatterv/gatherv: every rank copies its part from/to the root.
//   send/recv: rendezvous mailboxes (the sender returns once the receiver has copied);
//              sendrecv posts its send, receives, then waits for its send to be taken.
// The same algorithms run on host memory (CPU ranks) or on device memory (GPU ranks, one thread
// per rank, several ranks possibly sharing one GPU): a LocalMemOps moves and adds the floats,
// with memcpy and loops on the host, or with cudaMemcpyPeerAsync and reduction kernels on the
// rank's stream (cuda/cuda_local_ops.hpp), completed before every barrier.
// Not for: multiple processes (see the mpi and nccl backends).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/memory.hpp"

namespace dpbench {

// State shared by the ranks of one in-process group. Create one per group, then one
// LocalCommunicator per rank (each used from that rank's thread).
class LocalGroup {
 public:
  // world_size >= 1; timeout: how long a rank waits for its peers before the group aborts.
  explicit LocalGroup(int world_size, std::chrono::milliseconds timeout = std::chrono::seconds(300));
  int world_size() const { return world_size_; }

  // Blocks until all ranks arrive. Throws Aborted if the group was aborted (or times out, which
  // aborts it).
  void barrier(int rank);
  void abort(const std::string& reason);
  bool aborted() const { return aborted_.load(); }
  // Calls hook(reason) once, on the thread that aborts the group (by abort() or a timeout),
  // after the group is marked aborted: how communicators outside the group (NCCL) are told to
  // stop. Set before the ranks start.
  void set_abort_hook(std::function<void(const std::string&)> hook) { abort_hook_ = std::move(hook); }
  // Why the group was aborted ("" if it was not).
  std::string abort_reason();

 private:
  friend class LocalCommunicator;
  struct Mailbox {
    const float* data = nullptr;
    std::size_t n = 0;
    bool full = false;
    bool taken = false;
  };
  [[noreturn]] void throw_aborted();
  // Waits for pred under the group lock; on timeout aborts the group with a reason built by
  // what() (evaluated then, under the lock). Throws Aborted.
  template <typename What, typename Pred>
  void wait_locked(std::unique_lock<std::mutex>& lock, int rank, What what, Pred pred);

  const int world_size_;
  const std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable cv_;
  int arrived_ = 0;
  std::vector<char> arrived_rank_;  // which ranks reached the current barrier
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<bool> aborted_{false};
  std::string abort_reason_;
  std::function<void(const std::string&)> abort_hook_;
  // Pointers published by each rank for the current collective: slot[rank][k].
  std::vector<std::array<void*, 2>> slots_;
  // mailboxes_[src * world_size + dst]
  std::vector<Mailbox> mailboxes_;
};

// How one rank of the local backend moves and adds floats. Pointers are this rank's memory or a
// peer's (published through the group); the communicator calls fence() before every barrier, so
// that what a rank wrote is complete when its peers read it.
class LocalMemOps {
 public:
  virtual ~LocalMemOps() = default;
  // dst[i] = src[i] for i < n; src may be a peer's memory.
  virtual void copy(float* dst, const float* src, std::size_t n) = 0;
  // out[i] = peer_in[i] + own[i] for i < n; peer_in may be a peer's memory; out may be own.
  virtual void add(float* out, const float* peer_in, const float* own, std::size_t n) = 0;
  // Completes every copy and add issued so far.
  virtual void fence() {}
  // A scratch buffer of at least n floats in the memory this rank's data lives in, charged to
  // comm_buffers; valid until the next call.
  virtual float* scratch(std::size_t n) = 0;
};

// Host memory: memcpy and a loop; scratch charged to `tracker` (may be null: untracked).
std::unique_ptr<LocalMemOps> make_host_mem_ops(MemoryTracker* tracker);

class LocalCommunicator final : public Communicator {
 public:
  // Slice size of the pipelined chain algorithms, in floats (128 KiB).
  static constexpr std::size_t kSliceElems = 32 * 1024;
  // Slice length of the chain pipeline for a message of n floats: at most kSliceElems, and at
  // least 8 slices per message so that the pipeline fills and a relay's two-slice scratch stays
  // at most n/4.
  static std::size_t chain_slice(std::size_t n);

  // Host memory. tracker: where this rank's scratch buffers are charged (comm_buffers); may be
  // null.
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, MemoryTracker* tracker);
  // Memory moved by `ops` (e.g. device memory, cuda/cuda_local_ops.hpp).
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, std::unique_ptr<LocalMemOps> ops);

  int rank() const override { return rank_; }
  int world_size() const override { return group_->world_size(); }
  Backend backend() const override { return Backend::local; }

  void allreduce_sum(float* buf, std::size_t n) override;
  void reduce_sum(float* buf, std::size_t n, int root) override;
  void broadcast(float* buf, std::size_t n, int root) override;
  void allgather(const float* send, float* recv, std::size_t n) override;
  void reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) override;
  void allgatherv(float* buf, const std::vector<std::size_t>& counts) override;
  void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override;
  void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override;
  void send(const float* buf, std::size_t n, int dst) override;
  void recv(float* buf, std::size_t n, int src) override;
  void sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n, int src) override;
  void barrier() override { group_->barrier(rank_); }
  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  void publish(const void* a, const void* b = nullptr);
  // send's halves: post buf in the mailbox to dst; wait until dst has copied it.
  LocalGroup::Mailbox& post(const float* buf, std::size_t n, int dst);
  void wait_taken(LocalGroup::Mailbox& box, std::size_t n);
  template <typename T>
  T* peer(int r, int k = 0) const {
    return static_cast<T*>(group_->slots_[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)]);
  }
  // The ring's halves over chunks chunk_of(i), i < p (a Chunk). Reduce-scatter: rank r ends
  // with the sum of chunk r + shift; all-gather: rank r starts owning chunk r + shift.
  template <typename ChunkOf>
  void ring_reduce_scatter(float* buf, ChunkOf chunk_of, int shift);
  template <typename ChunkOf>
  void ring_all_gather(float* buf, ChunkOf chunk_of, int shift);
  std::vector<Chunk> segments(const std::vector<std::size_t>& counts, const char* op) const;
  template <typename SliceFn>
  void chain_pipeline(std::size_t n, int pos, SliceFn fn);

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  std::unique_ptr<LocalMemOps> ops_;
};

}  // namespace dpbench
