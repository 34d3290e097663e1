#include "core/local_comm.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/reduction.hpp"
#include "core/ring.hpp"

namespace dpbench {

std::size_t LocalCommunicator::chain_slice(std::size_t n) {
  return std::min(kSliceElems, std::max<std::size_t>(1, (n + 7) / 8));
}

// ---------------------------------------------------------------------------------------------
// LocalGroup

LocalGroup::LocalGroup(int world_size, std::chrono::milliseconds timeout)
    : world_size_(world_size),
      timeout_(timeout),
      arrived_rank_(static_cast<std::size_t>(std::max(world_size, 1)), 0),
      slots_(static_cast<std::size_t>(std::max(world_size, 1))),
      mailboxes_(static_cast<std::size_t>(std::max(world_size, 1) * std::max(world_size, 1))) {
  check_world_rank(world_size, 0);
}

void LocalGroup::throw_aborted() { throw Aborted(abort_reason_); }

std::string LocalGroup::abort_reason() {
  std::lock_guard<std::mutex> lock(mutex_);
  return abort_reason_;
}

void LocalGroup::abort(const std::string& reason) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!aborted_.load()) {
      abort_reason_ = reason;
      aborted_.store(true);
      first = true;
    }
  }
  cv_.notify_all();
  if (first && abort_hook_) abort_hook_(reason);
}

template <typename What, typename Pred>
void LocalGroup::wait_locked(std::unique_lock<std::mutex>& lock, int rank, What what, Pred pred) {
  if (!cv_.wait_for(lock, timeout_, [&] { return aborted_.load() || pred(); })) {
    abort_reason_ = fmt::format("rank {} timed out after {} s waiting in {}", rank,
                                std::chrono::duration_cast<std::chrono::seconds>(timeout_).count(), what());
    aborted_.store(true);
    cv_.notify_all();
    if (abort_hook_) {
      const std::string reason = abort_reason_;
      lock.unlock();
      abort_hook_(reason);
      lock.lock();
    }
  }
  if (aborted_.load()) throw_aborted();
}

void LocalGroup::barrier(int rank) {
  if (world_size_ == 1) {
    if (aborted_.load()) throw Aborted(abort_reason_);
    return;
  }
  const std::uint64_t gen = generation_.load();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (aborted_.load()) throw_aborted();
    arrived_rank_[static_cast<std::size_t>(rank)] = 1;
    if (++arrived_ == world_size_) {
      arrived_ = 0;
      std::fill(arrived_rank_.begin(), arrived_rank_.end(), 0);
      generation_.fetch_add(1);
      lock.unlock();
      cv_.notify_all();
      return;
    }
  }
  // Short spin before blocking: collective steps are often microseconds apart.
  for (int i = 0; i < 64; ++i) {
    if (generation_.load() != gen) return;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mutex_);
  // On a timeout, name the ranks that never arrived.
  auto what = [&] {
    std::vector<int> missing;
    for (int r = 0; r < world_size_; ++r) {
      if (!arrived_rank_[static_cast<std::size_t>(r)]) missing.push_back(r);
    }
    return fmt::format("a collective; rank(s) {} stopped answering", fmt::join(missing, ", "));
  };
  wait_locked(lock, rank, what, [&] { return generation_.load() != gen; });
}

// ---------------------------------------------------------------------------------------------
// LocalCommunicator

namespace {
class HostMemOps final : public LocalMemOps {
 public:
  explicit HostMemOps(MemoryTracker* tracker) : tracker_(tracker) {}
  void copy(float* dst, const float* src, std::size_t n) override {
    if (n > 0) std::memcpy(dst, src, n * sizeof(float));
  }
  void add(float* out, const float* peer_in, const float* own, std::size_t n) override {
    sum_floats(out, peer_in, own, n);
  }
  float* scratch(std::size_t n) override {
    if (scratch_.size() < n) {
      scratch_ = TrackedBuffer<float>(tracker_ != nullptr ? *tracker_ : untracked_, MemoryCategory::comm_buffers, n);
    }
    return scratch_.data();
  }

 private:
  MemoryTracker* tracker_;
  MemoryTracker untracked_;
  TrackedBuffer<float> scratch_;
};
}  // namespace

std::unique_ptr<LocalMemOps> make_host_mem_ops(MemoryTracker* tracker) { return std::make_unique<HostMemOps>(tracker); }

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, MemoryTracker* tracker)
    : LocalCommunicator(std::move(group), rank, make_host_mem_ops(tracker)) {}

LocalCommunicator::LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank, std::unique_ptr<LocalMemOps> ops)
    : group_(std::move(group)), rank_(rank), ops_(std::move(ops)) {
  check_world_rank(group_->world_size(), rank);
}

void LocalCommunicator::publish(const void* a, const void* b) {
  ops_->fence();
  group_->slots_[static_cast<std::size_t>(rank_)] = {const_cast<void*>(a), const_cast<void*>(b)};
  group_->barrier(rank_);
}

// Reduce-scatter on core/ring.hpp's schedule: at step s rank r adds the chunk it receives,
// read in place from rank r-1's buffer, into its own. Rank r-1 wrote that chunk in step s-1 and
// writes a different chunk in step s, so one barrier per step is all the synchronisation needed.
template <typename ChunkOf>
void LocalCommunicator::ring_reduce_scatter(float* buf, ChunkOf chunk_of, int shift) {
  const int p = world_size();
  const int prev = ring_mod(rank_ - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const RingStep step = ring_reduce_scatter_step(rank_, p, shift, s);
    const Chunk c = chunk_of(step.recv);
    const float* src = peer<float>(prev) + c.offset;
    ops_->add(buf + c.offset, src, buf + c.offset, c.length);
    count(chunk_of(step.send).length, c.length);
    ops_->fence();
    group_->barrier(rank_);
  }
}

// All-gather on core/ring.hpp's schedule: at step s rank r copies the chunk it receives from
// rank r-1's buffer.
template <typename ChunkOf>
void LocalCommunicator::ring_all_gather(float* buf, ChunkOf chunk_of, int shift) {
  const int p = world_size();
  const int prev = ring_mod(rank_ - 1, p);
  for (int s = 0; s < p - 1; ++s) {
    const RingStep step = ring_all_gather_step(rank_, p, shift, s);
    const Chunk c = chunk_of(step.recv);
    ops_->copy(buf + c.offset, peer<float>(prev) + c.offset, c.length);
    count(chunk_of(step.send).length, c.length);
    ops_->fence();
    group_->barrier(rank_);
  }
}

std::vector<Chunk> LocalCommunicator::segments(const std::vector<std::size_t>& counts, const char* op) const {
  if (counts.size() != static_cast<std::size_t>(world_size())) {
    throw Error(fmt::format("{}: {} counts for world_size {}", op, counts.size(), world_size()));
  }
  std::vector<Chunk> out;
  std::size_t offset = 0;
  for (std::size_t c : counts) {
    out.push_back({offset, c});
    offset += c;
  }
  return out;
}

void LocalCommunicator::reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) {
  const std::vector<Chunk> seg = segments(counts, "reduce_scatter");
  if (world_size() > 1) {
    publish(send);
    ring_reduce_scatter(
        send, [&](int i) { return seg[static_cast<std::size_t>(i)]; }, 0);
  }
  const Chunk mine = seg[static_cast<std::size_t>(rank_)];
  ops_->copy(recv, send + mine.offset, mine.length);
  ops_->fence();
}

void LocalCommunicator::allgatherv(float* buf, const std::vector<std::size_t>& counts) {
  const std::vector<Chunk> seg = segments(counts, "allgather");
  if (world_size() == 1) return;
  publish(buf);
  ring_all_gather(
      buf, [&](int i) { return seg[static_cast<std::size_t>(i)]; }, 0);
}

void LocalCommunicator::allreduce_sum(float* buf, std::size_t n) {
  if (world_size() == 1 || n == 0) return;
  publish(buf);
  const int p = world_size();
  const auto chunk_of = [n, p](int i) { return ring_chunk(n, p, i); };
  ring_reduce_scatter(buf, chunk_of, 1);
  ring_all_gather(buf, chunk_of, 1);
}

void LocalCommunicator::allgather(const float* send, float* recv, std::size_t n) {
  const int p = world_size();
  if (n == 0) return;
  ops_->copy(recv + static_cast<std::size_t>(rank_) * n, send, n);
  if (p == 1) {
    ops_->fence();
    return;
  }
  publish(recv);
  ring_all_gather(
      recv,
      [n](int i) {
    return Chunk{static_cast<std::size_t>(i) * n, n};
      },
      0);
}

// A pipelined chain over the ring: position `pos` of p, the message cut into slices of
// chain_slice(n). At step t, position j >= 1 handles slice k = t-(j-1), which position j-1
// handled in step t-1, so one barrier per step is all the synchronisation needed. Calls
// fn(k, offset, length) for this rank's slices and returns after the last step's barrier.
template <typename SliceFn>
void LocalCommunicator::chain_pipeline(std::size_t n, int pos, SliceFn fn) {
  const std::size_t slice = chain_slice(n);
  const auto num_slices = static_cast<long>((n + slice - 1) / slice);
  const long steps = num_slices + world_size() - 2;
  for (long t = 0; t < steps; ++t) {
    const long k = t - (pos - 1);
    if (pos >= 1 && k >= 0 && k < num_slices) {
      const std::size_t off = static_cast<std::size_t>(k) * slice;
      fn(k, off, std::min(slice, n - off));
    }
    ops_->fence();
    group_->barrier(rank_);
  }
  count(pos < world_size() - 1 ? n : 0, pos > 0 ? n : 0);
}

// Pipelined chain reduce. Position j of the chain is rank (root+1+j) mod p, so the chain ends at
// the root (position p-1). Position j >= 1 reads the partial sum of a slice from position j-1
// (position 0 exposes its own buf) and writes partial + own slice into its scratch
// (double-buffered by slice parity) or, at the root, into buf.
void LocalCommunicator::reduce_sum(float* buf, std::size_t n, int root) {
  check_root(root, "reduce");
  const int p = world_size();
  if (p == 1 || n == 0) return;
  const std::size_t slice = chain_slice(n);
  const int pos = ring_mod(rank_ - root - 1, p);
  const bool relay = pos > 0 && pos < p - 1;
  float* my_scratch = relay ? ops_->scratch(2 * slice) : nullptr;
  publish(buf, my_scratch);
  const int prev = ring_mod(rank_ - 1, p);
  chain_pipeline(n, pos, [&](long k, std::size_t off, std::size_t len) {
    const std::size_t parity = static_cast<std::size_t>(k % 2) * slice;
    const float* in = pos == 1 ? peer<float>(prev, 0) + off : peer<float>(prev, 1) + parity;
    const float* own = buf + off;
    float* out = pos == p - 1 ? buf + off : my_scratch + parity;
    ops_->add(out, in, own, len);
  });
}

// Pipelined chain broadcast: position j is rank (root+j) mod p and copies each slice from
// position j-1.
void LocalCommunicator::broadcast(float* buf, std::size_t n, int root) {
  check_root(root, "broadcast");
  const int p = world_size();
  if (p == 1 || n == 0) return;
  publish(buf);
  const int prev = ring_mod(rank_ - 1, p);
  chain_pipeline(n, ring_mod(rank_ - root, p),
                 [&](long, std::size_t off, std::size_t len) { ops_->copy(buf + off, peer<float>(prev) + off, len); });
}

void LocalCommunicator::scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) {
  check_root(root, "scatter");
  check_counts(counts, "scatter");
  const int p = world_size();
  const std::size_t offset = std::accumulate(counts.begin(), counts.begin() + rank_, std::size_t{0});
  const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
  if (p == 1) {
    ops_->copy(recv, send + offset, mine);
    ops_->fence();
    return;
  }
  publish(send);
  ops_->copy(recv, peer<float>(root) + offset, mine);
  count(root_scatter_counts(counts, rank_, root));
  ops_->fence();
  group_->barrier(rank_);
}

void LocalCommunicator::gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) {
  check_root(root, "gather");
  check_counts(counts, "gather");
  const int p = world_size();
  if (p == 1) {
    ops_->copy(recv, send, counts[0]);
    ops_->fence();
    return;
  }
  publish(send);
  if (rank_ == root) {
    std::size_t offset = 0;
    for (int r = 0; r < p; ++r) {
      const std::size_t c = counts[static_cast<std::size_t>(r)];
      ops_->copy(recv + offset, peer<float>(r), c);
      offset += c;
    }
  }
  count(root_gather_counts(counts, rank_, root));
  ops_->fence();
  group_->barrier(rank_);
}

LocalGroup::Mailbox& LocalCommunicator::post(const float* buf, std::size_t n, int dst) {
  const int p = world_size();
  ops_->fence();  // buf is complete before the receiver may read it
  auto& box = group_->mailboxes_[static_cast<std::size_t>(rank_ * p + dst)];
  std::unique_lock<std::mutex> lock(group_->mutex_);
  group_->wait_locked(
      lock, rank_, [] { return std::string("send"); }, [&] { return !box.full; });
  box.data = buf;
  box.n = n;
  box.full = true;
  box.taken = false;
  group_->cv_.notify_all();
  return box;
}

void LocalCommunicator::wait_taken(LocalGroup::Mailbox& box, std::size_t n) {
  std::unique_lock<std::mutex> lock(group_->mutex_);
  group_->wait_locked(
      lock, rank_, [] { return std::string("send"); }, [&] { return box.taken; });
  box.full = false;
  box.data = nullptr;
  group_->cv_.notify_all();
  count(n, 0);
}

void LocalCommunicator::send(const float* buf, std::size_t n, int dst) {
  check_peer(dst, "send", "destination");
  wait_taken(post(buf, n, dst), n);
}

void LocalCommunicator::sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n,
                                 int src) {
  check_peer(dst, "sendrecv", "destination");
  check_peer(src, "sendrecv", "source");
  LocalGroup::Mailbox& box = post(send, send_n, dst);
  this->recv(recv, recv_n, src);
  wait_taken(box, send_n);
}

void LocalCommunicator::recv(float* buf, std::size_t n, int src) {
  check_peer(src, "recv", "source");
  const int p = world_size();
  auto& box = group_->mailboxes_[static_cast<std::size_t>(src * p + rank_)];
  std::unique_lock<std::mutex> lock(group_->mutex_);
  group_->wait_locked(
      lock, rank_, [] { return std::string("recv"); }, [&] { return box.full && !box.taken; });
  if (box.n != n) {
    const std::string reason = fmt::format("recv: rank {} expected {} floats from rank {}, got {}", rank_, n, src,
                                           box.n);
    lock.unlock();
    group_->abort(reason);
    throw Error(reason);
  }
  // Copy outside the lock: the sender keeps its buffer alive until it sees `taken`.
  const float* data = box.data;
  lock.unlock();
  ops_->copy(buf, data, n);
  ops_->fence();
  lock.lock();
  box.taken = true;
  lock.unlock();
  group_->cv_.notify_all();
  count(0, n);
}

}  // namespace dpbench
