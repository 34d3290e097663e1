#include "sharded_ps/sharded_ps.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "train/engine_probe.hpp"
#include "train/replica_rank.hpp"
#include "core/error.hpp"
#include "core/hierarchical.hpp"
#include "sharded_ps/sparse_embeddings.hpp"
#include "sharded_ps/stale_sync.hpp"
#include "train/grad_bucket_sync.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

ShardLayout shard_layout(std::size_t n, int world_size, int servers) {
  if (servers < 1 || servers > world_size) {
    throw InputError(fmt::format("--servers {}: must be between 1 and --ranks {}", servers, world_size));
  }
  ShardLayout layout{std::vector<std::size_t>(static_cast<std::size_t>(world_size), 0),
                     std::vector<std::size_t>(static_cast<std::size_t>(world_size), n)};
  for (int k = 0; k < servers; ++k) {
    const Chunk c = ring_chunk(n, servers, k);
    layout.counts[static_cast<std::size_t>(k)] = c.length;
    layout.offsets[static_cast<std::size_t>(k)] = c.offset;
  }
  return layout;
}

ShardLayout shard_layout_for(const TrainConfig& config, std::size_t n) {
  if (config.hierarchy != Hierarchy::node) return shard_layout(n, config.world_size, server_count(config));
  const int k = hierarchy_ranks_per_node(config);
  ShardLayout layout{hierarchical_segment_counts(n, config.world_size, k),
                     std::vector<std::size_t>(static_cast<std::size_t>(config.world_size), 0)};
  std::size_t at = 0;
  for (const int r : hierarchical_segment_order(config.world_size, k)) {
    layout.offsets[static_cast<std::size_t>(r)] = at;
    at += layout.counts[static_cast<std::size_t>(r)];
  }
  return layout;
}

std::vector<std::size_t> shard_counts_within(const ShardLayout& layout, std::size_t offset, std::size_t size) {
  std::vector<std::size_t> out(layout.counts.size(), 0);
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::size_t lo = std::max(offset, layout.offsets[k]);
    const std::size_t hi = std::min(offset + size, layout.offsets[k] + layout.counts[k]);
    out[k] = hi > lo ? hi - lo : 0;
  }
  return out;
}

ElementCounts sharded_ps_step_counts(const ShardLayout& layout, int rank, Transport transport) {
  const auto p = static_cast<int>(layout.counts.size());
  if (p < 2) return {};
  std::size_t n = 0;
  for (std::size_t c : layout.counts) n += c;
  const auto at = [&](int r) { return layout.counts[static_cast<std::size_t>(((r % p) + p) % p)]; };
  if (transport == Transport::p2p) {
    const std::size_t both = n + static_cast<std::size_t>(p - 2) * at(rank);
    return {both, both};
  }
  return {2 * n - at(rank) - at(rank + 1), 2 * n - at(rank - 1) - at(rank)};
}

int server_count(const TrainConfig& config) {
  return config.sharded_ps.servers == 0 ? config.world_size : config.sharded_ps.servers;
}

namespace {

// --staleness S > 0 (stale_sync.hpp): host buffers, the collective transport's flat push and
// pull, no checkpoints (a checkpoint would need every push in flight).
void validate_staleness(const TrainConfig& config) {
  if (config.sharded_ps.staleness == 0) return;
  const std::string option = fmt::format("--staleness {}", config.sharded_ps.staleness);
  if (config.device != DeviceKind::cpu) {
    throw InputError(
        fmt::format("{}: the servers step on the communication thread, on the host; run it with --device cpu", option));
  }
  if (config.transport != Transport::collective) {
    throw InputError(
        fmt::format("{}: pushes and pulls are the collective transport's; give --transport collective, not {}", option,
                    config.transport));
  }
  if (config.hierarchy != Hierarchy::none)
    throw InputError(fmt::format("{}: not with --hierarchy {}", option, config.hierarchy));
  if (!config.checkpoint.dir.empty()) {
    throw InputError(
        fmt::format("{}: no checkpoints (pushes are in flight at every step); drop --checkpoint-dir", option));
  }
  if (config.model.sync_bn) throw InputError(fmt::format("{}: --sync-bn is allreduce's", option));
}

}  // namespace

std::vector<CollectiveKind> sharded_ps_probed_collectives(const TrainConfig& config) {
  using K = CollectiveKind;
  if (config.model.dlrm.sparse_grad) {
    std::vector<K> kinds(kSparseProbeRounds, K::p2p);
    kinds.push_back(K::allreduce);
    return kinds;
  }
  if (config.transport == Transport::p2p) return {};
  return {K::reduce_scatter, K::allgather};
}

void validate_sharded_ps(const TrainConfig& config, const Dataset& train) {
  validate_replicas(config, train);
  if (config.transport != Transport::collective && config.transport != Transport::p2p) {
    throw InputError(fmt::format("--transport {}: unknown (available: collective, p2p)", config.transport));
  }
  if (config.sharded_ps.servers < 0 || config.sharded_ps.servers > config.world_size) {
    throw InputError(fmt::format("--servers {}: must be between 1 and --ranks {} (0: every rank)",
                                 config.sharded_ps.servers, config.world_size));
  }
  validate_staleness(config);
  validate_sparse_embeddings(config);
  if (config.hierarchy != Hierarchy::node) return;
  if (config.transport != Transport::collective) {
    throw InputError(fmt::format("--hierarchy node: sharded_ps reduces inside the node with the collective "
                                 "transport, not {}",
                                 config.transport));
  }
  if (server_count(config) != config.world_size) {
    throw InputError(fmt::format("--hierarchy node: every rank serves a range; --servers {} of {} ranks is not "
                                 "supported (give --servers 0)",
                                 config.sharded_ps.servers, config.world_size));
  }
  validate_node_hierarchy(config);
}

namespace {

// A worker with a full replica that is also server of its range (when rank < servers): push,
// server step, pull (see sharded_ps.hpp).
class ShardedPsRank final : public ReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return sharded_ps_probed_collectives(s_.config); }
  ShardedPsRank(const RankSetup& s, bool p2p)
      : ReplicaRank(s),
        layout_(shard_layout_for(s.config, n_)),
        p2p_(p2p),
        rank_(s.ctx.rank()),
        mine_(layout_.counts[static_cast<std::size_t>(rank_)]),
        offset_(layout_.offsets[static_cast<std::size_t>(rank_)]),
        grad_sum_(s.ctx, MemoryCategory::gradients, mine_),
        optimizer_(s.ctx, s.config, offset_, mine_) {
    if (p2p_) {
      if (mine_ > 0) incoming_ = Array<float>(s.ctx, MemoryCategory::comm_buffers, mine_);
      return;
    }
    // Each bucket is reduce-scattered over the servers' ranges it overlaps; this rank's part of
    // it lands at its place in the rank's gradient sum.
    for (const Bucket& b : buckets_) {
      bucket_counts_.push_back(shard_counts_within(layout_, b.offset, b.size));
      const std::size_t start = std::max(b.offset, offset_);
      recv_.push_back(grad_sum_.data() + (mine_ > 0 && start < offset_ + mine_ ? start - offset_ : 0));
    }
    grad_sync_.emplace(s.ctx, buckets_.size());
  }

  // Each server's optimizer state exists on that server only: one checkpoint shard per server.
  Optimizer& optimizer() override { return optimizer_; }
  int checkpoint_writers() const override { return server_count(s_.config); }
  // p2p pushes after backward: no bucket overlaps it.
  const std::vector<Bucket>& buckets() const override { return p2p_ ? ModeRank::buckets() : buckets_; }
  // The probe's reduce-scatter over the servers' ranges within the largest bucket, as the push
  // meets them (a bucket within one server's range is a reduce to that server).
  std::vector<std::size_t> probe_counts_of(CollectiveKind kind) override {
    if (kind != CollectiveKind::reduce_scatter || bucket_counts_.empty()) return {};
    std::size_t largest = 0;
    for (std::size_t b = 1; b < buckets_.size(); ++b) {
      if (buckets_[b].size > buckets_[largest].size) largest = b;
    }
    return bucket_counts_[largest];
  }
  CommStream* comm_thread() override { return grad_sync_ ? grad_sync_->thread() : nullptr; }

  // push (collective): the bucket reduce-scattered over the servers' ranges it overlaps.
  void start_grad_sync(std::size_t b) override {
    float* send = grads_.data() + buckets_[b].offset;
    const std::vector<std::size_t>& counts = bucket_counts_[b];
    float* recv = recv_[b];
    if (node_ranks_ > 0) {
      // In place in the bucket: this rank's segment of it (at its place in the gradient
      // vector) then holds the sum; blocking, on the communication thread.
      const float* own = grads_.data() + std::max(buckets_[b].offset, offset_);
      grad_sync_->start(b, [this, send, &counts, own, recv](Communicator& comm, bool) {
        const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
        time_collective(timings_, CollectiveKind::reduce_scatter, mine,
                        [&] { hierarchical_reduce_scatterv_sum(comm, send, counts, node_ranks_, scratch_); });
        std::copy_n(own, mine, recv);
      });
      return;
    }
    grad_sync_->start(b, [send, &counts, recv](Communicator& comm, bool nonblocking) {
      if (nonblocking) {
        comm.reduce_scatterv_sum_start(send, counts, recv);
      } else {
        comm.reduce_scatterv_sum(send, counts, recv);
      }
    });
  }
  void progress() override {
    if (grad_sync_) grad_sync_->progress();
  }
  void finish_grad_sync() override {
    if (p2p_) {
      push_p2p();
    } else {
      grad_sync_->join();
    }
  }
  // The server step on this rank's range.
  void optimizer_step() override { optimizer_.step(params_.data() + offset_, grad_sum_.data()); }
  bool syncs_params() const override { return true; }
  std::vector<CollectiveTiming> take_collective_timings() override { return std::exchange(timings_, {}); }
  // pull: every server's updated range to every worker.
  void param_sync() override {
    RankContext& ctx = s_.ctx;
    Communicator& comm = ctx.comm();
    ctx.synchronize();  // the server's step wrote its range on the compute stream
    if (node_ranks_ > 0) {
      time_collective(timings_, CollectiveKind::allgather, layout_.counts[static_cast<std::size_t>(rank_)],
                      [&] { hierarchical_allgatherv(comm, params_.data(), layout_.counts, node_ranks_); });
      return;
    }
    if (!p2p_) {
      comm.allgatherv(params_.data(), layout_.counts);
      return;
    }
    for (int k = 0; k < comm.world_size(); ++k) {
      const std::size_t count = layout_.counts[static_cast<std::size_t>(k)];
      float* range = params_.data() + layout_.offsets[static_cast<std::size_t>(k)];
      if (count == 0) continue;
      if (k != rank_) {
        comm.recv(range, count, k);
        continue;
      }
      for (int w = 0; w < comm.world_size(); ++w) {
        if (w != rank_) comm.send(range, count, w);
      }
    }
  }
  void finish_step() override {
    if (grad_sync_) grad_sync_->finish_step();
  }

 private:
  // push (p2p): every worker sends each server its range; each server sums what it receives,
  // one peer at a time, in (server, worker) order on every rank, so blocking sends cannot
  // deadlock.
  void push_p2p() {
    RankContext& ctx = s_.ctx;
    Communicator& comm = ctx.comm();
    ctx.synchronize();  // backward wrote the gradients
    for (int k = 0; k < comm.world_size(); ++k) {
      const std::size_t count = layout_.counts[static_cast<std::size_t>(k)];
      const float* range = grads_.data() + layout_.offsets[static_cast<std::size_t>(k)];
      if (count == 0) continue;
      if (k != rank_) {
        comm.send(range, count, k);
        continue;
      }
      ctx.copy(grad_sum_.data(), range, count);
      for (int w = 0; w < comm.world_size(); ++w) {
        if (w == rank_) continue;
        comm.recv(incoming_.data(), count, w);
        ctx.add_inplace(grad_sum_.data(), incoming_.data(), count);
        ctx.synchronize();  // `incoming` is reused by the next receive
      }
    }
  }

  ShardLayout layout_;
  bool p2p_;
  int rank_;
  std::size_t mine_;                                     // elements of the range this rank serves (0 off the servers)
  std::size_t offset_;                                   // where that range starts
  Array<float> grad_sum_;                                // [mine_]: the summed gradients of the range
  Optimizer optimizer_;                                  // over [offset_, + mine_): the range's optimizer state
  Array<float> incoming_;                                // [mine_]: p2p receive buffer
  std::vector<std::vector<std::size_t>> bucket_counts_;  // collective: per bucket, per rank
  std::vector<float*> recv_;                             // collective: per bucket
  std::optional<GradBucketSync> grad_sync_;              // collective
  // --hierarchy node: ranks per node of core/hierarchical.hpp's rings (0: the backend's flat
  // collectives), and one received chunk of them.
  int node_ranks_ = s_.config.hierarchy == Hierarchy::node ? hierarchy_ranks_per_node(s_.config) : 0;
  std::vector<float> scratch_;
  // --hierarchy node: this step's hierarchical push and pull as timed (in order; the push's on the
  // communication thread, read after the join), for the in-run simulation's calibration.
  std::vector<CollectiveTiming> timings_;
};

}  // namespace

RunResult train_sharded_ps(const TrainConfig& config, const TrainData& data) {
  validate_sharded_ps(config, *data.train);
  if (config.sharded_ps.staleness > 0) return run_step_loop(config, data, make_stale_sync_rank);
  if (config.model.dlrm.sparse_grad) return run_step_loop(config, data, make_sparse_embedding_rank);
  const bool p2p = config.transport == Transport::p2p;
  return run_step_loop(config, data, [p2p](const RankSetup& s) { return std::make_unique<ShardedPsRank>(s, p2p); });
}

}  // namespace dpbench
