#include "ps/data_parallel.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hierarchical.hpp"
#include "ps/sparse_data_parallel.hpp"
#include "train/step_loop.hpp"

namespace dpbench {

namespace {
constexpr int kRoot = 0;

std::vector<std::size_t> scaled(const std::vector<std::size_t>& rows, std::size_t width) {
  std::vector<std::size_t> out(rows.size());
  std::transform(rows.begin(), rows.end(), out.begin(), [&](std::size_t r) { return r * width; });
  return out;
}

// Applies fn(offset, length) over [0, n) in groups of at most `group` elements: DataParallel's
// broadcast_coalesced / reduce_add_coalesced buffer size.
template <typename Fn>
void for_each_group(std::size_t n, std::size_t group, Fn fn) {
  for (std::size_t off = 0; off < n; off += group) fn(off, std::min(group, n - off));
}
}  // namespace

std::vector<std::size_t> chunk_sizes(std::size_t batch, int world_size) {
  const auto p = static_cast<std::size_t>(world_size);
  const std::size_t chunk = (batch + p - 1) / p;
  std::vector<std::size_t> sizes(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    const std::size_t start = r * chunk;
    sizes[r] = start >= batch ? 0 : std::min(chunk, batch - start);
  }
  return sizes;
}

void validate_data_parallel(const TrainConfig& config, const Dataset& train) {
  validate_config(config, train);
  if (config.model.sync_bn) {
    throw InputError("--sync-bn: not available in ps mode (DataParallel normalises each replica's chunk "
                     "with its own statistics); use --mode allreduce");
  }
  if (config.transport != Transport::collective && config.transport != Transport::p2p) {
    throw InputError(fmt::format("--transport {}: unknown (available: collective, p2p)", config.transport));
  }
  if (config.hierarchy == Hierarchy::node && config.transport != Transport::collective) {
    throw InputError(fmt::format("--hierarchy node: ps reduces inside the node with the collective transport, not {}",
                                 config.transport));
  }
  validate_node_hierarchy(config);
  validate_sparse_data_parallel(config);
}

std::vector<CollectiveKind> data_parallel_probed_collectives(const TrainConfig& config) {
  using K = CollectiveKind;
  if (config.model.dlrm.sparse_grad) return sparse_data_parallel_probed_collectives();
  if (config.transport == Transport::p2p) return {K::scatter, K::gather};
  return {K::broadcast, K::scatter, K::gather, K::reduce};
}

namespace {

// One rank of DataParallel: a replica on every rank; on the root (rank 0) also the master
// parameters, their gradients, the optimizer, the whole batch and its logits.
class DataParallelRank final : public ModeRank {
 public:
  explicit DataParallelRank(const RankSetup& s);

  Model& model() override { return *model_; }
  float* master_params() override { return master_params_.data(); }
  // The root's alone.
  Optimizer& optimizer() override { return optimizer_; }
  std::size_t rows() const override { return rows_[static_cast<std::size_t>(rank_)]; }
  // The root loads the whole global batch and scatters it.
  std::size_t loaded_rows() const override { return root_ ? batch_ : 0; }
  // The root's loss covers the whole batch.
  std::size_t loss_rows() const override { return batch_; }
  std::vector<std::int64_t> epoch_order(int epoch) override { return global_batch_order(s_, epoch); }

  // replicate(): the master parameters to every replica; the buffers (BatchNorm running
  // statistics) from the root's replica, whose updates alone persist, as DataParallel's
  // replicate() copies them from device 0 every step.
  void replicate() override {
    Communicator& comm = s_.ctx.comm();
    if (p2p_) {
      broadcast_p2p();
    } else {
      float* buf = root_ ? master_params_.data() : replica_params_.data();
      for_each_group(n_, group_, [&](std::size_t off, std::size_t len) {
        if (node_ranks_ > 0) {
          return time_collective(timings_, CollectiveKind::broadcast, len,
                                 [&] { hierarchical_broadcast(comm, buf + off, len, node_ranks_); });
        }
        comm.broadcast(buf + off, len, kRoot);
      });
    }
    if (root_) s_.ctx.copy(replica_params_.data(), master_params_.data(), n_);
    if (model_->num_buffers() > 0) {
      s_.ctx.synchronize();  // the root's last step wrote them on its compute stream
      comm.broadcast(model_->buffers(), model_->num_buffers(), kRoot);
    }
  }

  // scatter, parallel_apply, gather: the inputs scattered along dim 0, each replica's forward on
  // its chunk, the logits gathered to the root, the loss over the whole batch there, and the
  // gradient of the logits scattered back.
  void forward(const StagedBatch& batch, long step, StepTimer& timer) override;

  // Each replica's backward on its chunk (nothing to overlap: the reduction waits for all of it).
  void backward(const GradReadyFn&) override {
    if (my_rows_ > 0) {
      model_->backward(replica_params_.data(), chunk_input_.data(), chunk_dlogits_.data(), my_rows_,
                       replica_grads_.data(), nullptr);
    } else {
      s_.ctx.fill_zero(replica_grads_.data(), n_);
    }
    if (root_) s_.ctx.copy(master_grads_.data(), replica_grads_.data(), n_);
    s_.ctx.synchronize();  // the reduction reads the gradients
  }

  // reduce_add: every replica's gradients summed onto the root's master gradients.
  void finish_grad_sync() override {
    if (p2p_) {
      reduce_p2p();
      return;
    }
    float* buf = root_ ? master_grads_.data() : replica_grads_.data();
    for_each_group(n_, group_, [&](std::size_t off, std::size_t len) {
      if (node_ranks_ > 0) {
        return time_collective(timings_, CollectiveKind::reduce, len,
                               [&] { hierarchical_reduce_sum(s_.ctx.comm(), buf + off, len, node_ranks_, scratch_); });
      }
      s_.ctx.comm().reduce_sum(buf + off, len, kRoot);
    });
  }

  void optimizer_step() override {
    if (root_) optimizer_.step(master_params_.data(), master_grads_.data());
  }
  std::vector<CollectiveTiming> take_collective_timings() override { return std::exchange(timings_, {}); }

  // The engine probe's scatter and gather at the step's sizes: the scatter the larger of the
  // batch's inputs and its logits' gradient, the gather the logits; the rest the parameters.
  std::vector<CollectiveKind> probed_collectives() const override {
    return data_parallel_probed_collectives(s_.config);
  }
  std::size_t probe_floats_of(CollectiveKind kind) override {
    if (kind == CollectiveKind::scatter) return batch_ * std::max(features_, classes_);
    if (kind == CollectiveKind::gather) return batch_ * classes_;
    return n_;
  }

 private:
  // p2p: the root sends the parameters to each worker in turn.
  void broadcast_p2p() {
    Communicator& comm = s_.ctx.comm();
    if (!root_) {
      comm.recv(replica_params_.data(), n_, kRoot);
      return;
    }
    for (int r = 1; r < s_.config.world_size; ++r) comm.send(master_params_.data(), n_, r);
  }
  // p2p: the root receives each worker's gradients in turn and adds them (the incast).
  void reduce_p2p() {
    Communicator& comm = s_.ctx.comm();
    if (!root_) {
      comm.send(replica_grads_.data(), n_, kRoot);
      return;
    }
    for (int r = 1; r < s_.config.world_size; ++r) {
      comm.recv(incoming_.data(), n_, r);
      s_.ctx.add_inplace(master_grads_.data(), incoming_.data(), n_);
      s_.ctx.synchronize();  // `incoming` is reused by the next receive
    }
  }

  RankSetup s_;
  int rank_;
  bool root_;
  bool p2p_;
  std::size_t batch_;              // the global batch B
  std::vector<std::size_t> rows_;  // rows per replica: torch.chunk's, or --rank-batch's split
  std::size_t my_rows_;
  std::size_t features_, classes_;
  std::vector<std::size_t> input_counts_, logit_counts_;  // scatterv / gatherv counts per rank
  std::size_t group_;                                     // coalesced broadcast / reduce_add elements
  std::unique_ptr<Model> model_;
  std::size_t n_;
  // What every replica holds.
  Array<float> replica_params_, replica_grads_, chunk_input_, chunk_logits_, chunk_dlogits_;
  // What only the root holds: the imbalance this mode is known for.
  Array<float> master_params_, master_grads_, logits_all_, dlogits_all_, incoming_;
  Optimizer optimizer_;
  // --hierarchy node: ranks per node of core/hierarchical.hpp's reduce and broadcast (0: the
  // backend's), and one received chunk of its rings.
  int node_ranks_ = s_.config.hierarchy == Hierarchy::node ? hierarchy_ranks_per_node(s_.config) : 0;
  std::vector<float> scratch_;
  // --hierarchy node: this step's hierarchical broadcasts and reduces as timed, in order, for the
  // in-run simulation's calibration (the scatters and gathers keep the probe's).
  std::vector<CollectiveTiming> timings_;
};

DataParallelRank::DataParallelRank(const RankSetup& s)
    : s_(s),
      rank_(s.ctx.rank()),
      root_(rank_ == kRoot),
      p2p_(s.config.transport == Transport::p2p),
      batch_(s.config.global_batch),
      rows_(s.config.rank_batches.empty() ? chunk_sizes(batch_, s.config.world_size) : s.config.rank_batches),
      my_rows_(rows_[static_cast<std::size_t>(rank_)]),
      features_(s.train.shape().features()),
      classes_(static_cast<std::size_t>(s.train.num_classes())),
      input_counts_(scaled(rows_, features_)),
      logit_counts_(scaled(rows_, classes_)),
      group_(std::max<std::size_t>(1, static_cast<std::size_t>(s.config.ps.coalesce_mb * 1024.0 * 1024.0) /
                                          sizeof(float))),
      model_(s.ctx.make_model(s.config, s.train.shape(), classes_, std::max<std::size_t>(my_rows_, 1))),
      n_(model_->num_params()),
      replica_params_(s.ctx, MemoryCategory::parameters, n_),
      replica_grads_(s.ctx, MemoryCategory::gradients, n_),
      chunk_input_(s.ctx, MemoryCategory::data_staging, my_rows_ * features_),
      chunk_logits_(s.ctx, MemoryCategory::activations, my_rows_ * classes_),
      chunk_dlogits_(s.ctx, MemoryCategory::activations, my_rows_ * classes_),
      optimizer_(s.ctx, s.config, 0, root_ ? n_ : 0) {
  if (!root_) return;
  master_params_ = Array<float>(s.ctx, MemoryCategory::parameters, n_);
  master_grads_ = Array<float>(s.ctx, MemoryCategory::gradients, n_);
  logits_all_ = Array<float>(s.ctx, MemoryCategory::activations, batch_ * classes_);
  dlogits_all_ = Array<float>(s.ctx, MemoryCategory::activations, batch_ * classes_);
  if (p2p_) incoming_ = Array<float>(s.ctx, MemoryCategory::comm_buffers, n_);
  const std::vector<float> initial = initial_parameters(*model_, s.config);
  s.ctx.upload(master_params_.data(), initial.data(), n_);
}

void DataParallelRank::forward(const StagedBatch& batch, long step, StepTimer& timer) {
  RankContext& ctx = s_.ctx;
  Communicator& comm = ctx.comm();
  if (root_) ctx.synchronize();  // the scatter reads the staged inputs
  comm.scatterv(batch.inputs, input_counts_, chunk_input_.data(), kRoot);
  timer.lap(&PhaseTimes::comm_exposed);
  if (my_rows_ > 0) model_->forward(replica_params_.data(), chunk_input_.data(), my_rows_, chunk_logits_.data());
  ctx.synchronize();  // the gather reads the logits
  timer.lap(&PhaseTimes::forward);
  comm.gatherv(chunk_logits_.data(), logit_counts_, logits_all_.data(), kRoot);
  timer.lap(&PhaseTimes::comm_exposed);
  if (root_) {
    ctx.cross_entropy(logits_all_.data(), batch.labels, batch_, classes_, dlogits_all_.data(),
                      1.0f / static_cast<float>(batch_), step);
    ctx.synchronize();  // the scatter reads the logits' gradient
  }
  timer.lap(&PhaseTimes::forward);
  comm.scatterv(dlogits_all_.data(), logit_counts_, chunk_dlogits_.data(), kRoot);
  timer.lap(&PhaseTimes::comm_exposed);
}

}  // namespace

RunResult train_data_parallel(const TrainConfig& config, const TrainData& data) {
  validate_data_parallel(config, *data.train);
  if (config.model.dlrm.sparse_grad) return run_step_loop(config, data, make_sparse_data_parallel_rank);
  return run_step_loop(config, data, [](const RankSetup& s) { return std::make_unique<DataParallelRank>(s); });
}

}  // namespace dpbench
