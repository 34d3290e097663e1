#include "sharded_ps/stale_sync.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>

#include "core/comm_stream.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "train/replica_rank.hpp"

namespace dpbench {

int ssp_replay_staleness(std::uint64_t seed, int rank, long step, int bound) {
  // splitmix64 (Steele, Lea and Flood, "Fast splittable pseudorandom number generators", 2014).
  std::uint64_t z = seed ^ (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(step);
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const long most = std::min<long>(bound, step);
  return static_cast<int>(z % static_cast<std::uint64_t>(most + 1));
}

std::vector<long> staleness_histogram(const std::vector<std::vector<int>>& per_rank_steps, int warmup, int bound) {
  std::vector<long> counts(static_cast<std::size_t>(std::max(bound, 0)) + 1, 0);
  for (const std::vector<int>& steps : per_rank_steps) {
    for (std::size_t t = static_cast<std::size_t>(std::max(warmup, 0)); t < steps.size(); ++t) {
      const int s = std::clamp(steps[t], 0, std::max(bound, 0));
      ++counts[static_cast<std::size_t>(s)];
    }
  }
  return counts;
}

namespace {

// A worker with a full replica that serves its range, its pushes and pulls running S steps
// behind it at most (stale_sync.hpp). Parameter versions live in a ring of S + 1 slots (version v
// in slot v mod (S + 1)), step t's gradients in a ring of S + 1 push slots.
//
// Why the rings suffice: the communication thread writes version t + 1 (slot (t + 1) mod (S + 1),
// last holding version t - S) only after this rank enqueued step t's push, by which time the rank
// reads versions t + 1 - S or newer only; and the rank reuses push slot t mod (S + 1) at step t
// only after waiting for version t - S or newer, which step t - S - 1's push completed.
class StaleSyncRank final : public ReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return sharded_ps_probed_collectives(s_.config); }
  explicit StaleSyncRank(const RankSetup& s)
      : ReplicaRank(s),
        layout_(shard_layout_for(s.config, n_)),
        bound_(s.config.sharded_ps.staleness),
        slots_(static_cast<std::size_t>(bound_) + 1),
        total_(total_steps(s.config, s.train)),
        mine_(layout_.counts[static_cast<std::size_t>(s.ctx.rank())]),
        offset_(layout_.offsets[static_cast<std::size_t>(s.ctx.rank())]),
        grad_sum_(s.ctx, MemoryCategory::gradients, mine_),
        optimizer_(s.ctx, s.config, offset_, mine_) {
    for (std::size_t i = 0; i < slots_; ++i) {
      versions_.emplace_back(s.ctx, MemoryCategory::parameters, n_);
      pushes_.emplace_back(s.ctx, MemoryCategory::comm_buffers, n_);
    }
  }

  // The server's state of its range (checkpoints are refused under --staleness).
  Optimizer& optimizer() override { return optimizer_; }
  // The push starts after backward: no bucket overlaps it.
  const std::vector<Bucket>& buckets() const override { return ModeRank::buckets(); }

  // Every replica starts from rank 0's parameters: version 0.
  void start() override {
    ReplicaRank::start();
    s_.ctx.copy(versions_[0].data(), params_.data(), n_);
  }

  // The version this step computes on: the newest (or the replay's), waiting while it is older
  // than step - S. No BatchNorm buffer broadcast (see stale_sync.hpp).
  void replicate() override {
    long use = 0;
    if (replay()) {
      use = step_ - ssp_replay_staleness(seed(), s_.ctx.rank(), step_, bound_);
      wait_for(use);
    } else {
      use = wait_for(std::max(0L, step_ - bound_));
    }
    s_.ctx.copy(params_.data(), slot(versions_, use), n_);
    staleness_.push_back(static_cast<int>(step_ - use));
  }

  // The push of this step's gradients, the server step and the pull, queued on the
  // communication thread.
  void finish_grad_sync() override {
    float* push = slot(pushes_, step_);
    s_.ctx.copy(push, grads_.data(), n_);
    const long t = step_;
    stream_.enqueue([this, t, push] { push_step_pull(t, push); });
  }
  // The server step runs with the push, on the communication thread.
  void optimizer_step() override {}
  bool syncs_params() const override { return true; }
  // Before the first timed step and after the last: every push done, the newest version in the
  // replica (the result's parameters).
  void param_sync() override {
    const long next = step_ + 1;
    if (next != s_.config.run.warmup_steps && next != total_) return;
    wait_for(next);
    stream_.synchronize();
    s_.ctx.copy(params_.data(), slot(versions_, next), n_);
  }
  void finish_step() override { ++step_; }
  std::vector<int> step_staleness() const override { return staleness_; }

 private:
  bool replay() const { return s_.config.sharded_ps.staleness_replay >= 0; }
  std::uint64_t seed() const { return static_cast<std::uint64_t>(s_.config.sharded_ps.staleness_replay); }
  float* slot(std::vector<Array<float>>& ring, long index) {
    return ring[static_cast<std::size_t>(index) % slots_].data();
  }

  // On the communication thread: step t's push, the server step on this rank's range (from
  // version t to t + 1) and the pull of version t + 1; then publishes it.
  void push_step_pull(long t, float* push) {
    try {
      Communicator& comm = s_.ctx.comm();
      comm.reduce_scatterv_sum(push, layout_.counts, grad_sum_.data());
      float* next = slot(versions_, t + 1);
      std::copy_n(slot(versions_, t) + offset_, mine_, next + offset_);
      optimizer_.step(next + offset_, grad_sum_.data());
      comm.allgatherv(next, layout_.counts);
      const std::lock_guard<std::mutex> lock(mutex_);
      published_ = t + 1;
    } catch (...) {
      {
        const std::lock_guard<std::mutex> lock(mutex_);
        failed_ = true;
      }
      published_cv_.notify_all();
      throw;  // CommStream keeps it; wait_for rethrows it
    }
    published_cv_.notify_all();
  }

  // Blocks until version `version` is published; returns the newest published. Rethrows the
  // communication thread's error.
  long wait_for(long version) {
    std::unique_lock<std::mutex> lock(mutex_);
    published_cv_.wait(lock, [&] { return published_ >= version || failed_; });
    if (failed_) {
      lock.unlock();
      stream_.synchronize();  // rethrows
      throw Error("sharded_ps --staleness: the communication thread failed");
    }
    return published_;
  }

  ShardLayout layout_;
  int bound_;                           // S
  std::size_t slots_;                   // S + 1
  long total_;                          // steps of the run
  std::size_t mine_;                    // elements of the range this rank serves
  std::size_t offset_;                  // where that range starts
  Array<float> grad_sum_;               // [mine_]: the summed gradients of the range (communication thread)
  Optimizer optimizer_;                 // over [offset_, + mine_) (communication thread)
  std::vector<Array<float>> versions_;  // S + 1 of [n]: parameter versions
  std::vector<Array<float>> pushes_;    // S + 1 of [n]: gradients being pushed
  std::vector<int> staleness_;          // per step: step - the version computed on
  long step_ = 0;                       // the rank's step
  std::mutex mutex_;
  std::condition_variable published_cv_;
  long published_ = 0;  // the newest whole version
  bool failed_ = false;
  CommStream stream_;  // last: joined before the buffers it uses are freed
};

}  // namespace

std::unique_ptr<ModeRank> make_stale_sync_rank(const RankSetup& setup) {
  return std::make_unique<StaleSyncRank>(setup);
}

}  // namespace dpbench
