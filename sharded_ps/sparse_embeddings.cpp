#include "sharded_ps/sparse_embeddings.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/ring.hpp"
#include "train/replica_rank.hpp"
#include "train/sparse_grad.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

void validate_sparse_embeddings(const TrainConfig& config) {
  if (!config.model.dlrm.sparse_grad) return;
  validate_sparse_grad(config);
  if (config.sharded_ps.servers != 0 && config.sharded_ps.servers != config.world_size) {
    throw InputError(
        fmt::format("--sparse-grad: every rank serves rows; --servers {} is not supported", config.sharded_ps.servers));
  }
  if (config.sharded_ps.staleness != 0) throw InputError("--sparse-grad: not with --staleness");
}

namespace {

// What one worker pulls from one server: (table, row) ids as floats, and where each row goes in
// the compact tables (float offsets).
struct Pull {
  std::vector<float> ids;
  std::vector<std::size_t> slots;
};

class SparseEmbeddingRank final : public ModeRank {
 public:
  explicit SparseEmbeddingRank(const RankSetup& s)
      : s_(s),
        p_(s.config.world_size),
        rank_(s.ctx.rank()),
        local_batch_(s.config.global_batch / static_cast<std::size_t>(p_)),
        full_(s.config.model.dlrm),
        cap_(local_batch_ * full_.lookups),
        compact_config_(compact(s.config, cap_)),
        full_model_(std::make_unique<Dlrm<float>>(full_)),
        model_(s.ctx.make_model(compact_config_, s.train.shape(), 2, local_batch_)),
        n_(model_->num_params()),
        dense_at_(full_.tables * cap_ * full_.dim),
        params_(s.ctx, MemoryCategory::parameters, n_),
        grads_(s.ctx, MemoryCategory::gradients, n_),
        logits_(s.ctx, MemoryCategory::activations, local_batch_ * 2),
        dlogits_(s.ctx, MemoryCategory::activations, local_batch_ * 2),
        x_(s.ctx, MemoryCategory::activations, local_batch_ * full_.input_features()),
        optimizer_(s.ctx, s.config, dense_at_, n_ - dense_at_),
        sampler_(s.train.size(), p_, rank_, /*shuffle=*/true, s.config.seed),
        own_(ring_chunk(full_.rows, p_, rank_)),
        shard_(s.ctx, MemoryCategory::parameters, full_.tables * own_.length * full_.dim),
        shard_grad_(s.ctx, MemoryCategory::gradients, full_.tables * own_.length * full_.dim),
        touched_(full_.tables * own_.length, 0),
        pulls_(static_cast<std::size_t>(p_)),
        served_(static_cast<std::size_t>(p_)) {
    for (int k = 0; k <= p_; ++k) starts_.push_back(k < p_ ? ring_chunk(full_.rows, p_, k).offset : full_.rows);
    const std::vector<float> initial = initial_parameters(*model_, compact_config_);  // the dense layers
    s.ctx.upload(params_.data(), initial.data(), n_);
    for (std::size_t t = 0; t < full_.tables; ++t) {
      init_table_rows(full_, s.config.seed, t, own_.offset, own_.offset + own_.length, shard_table(t));
    }
  }

  Model& model() override { return *full_model_; }
  float* master_params() override { return full_params_.data(); }
  Optimizer& optimizer() override { return optimizer_; }
  std::size_t rows() const override { return local_batch_; }
  std::size_t loaded_rows() const override { return local_batch_; }
  std::size_t loss_rows() const override { return local_batch_; }
  std::vector<std::int64_t> epoch_order(int epoch) override {
    return ddp_epoch_indices(s_.config, s_.train, sampler_, epoch, 0, local_batch_, s_.steps_per_epoch);
  }
  std::size_t probe_floats() override { return n_ - dense_at_; }

  void forward(const StagedBatch& batch, long step, StepTimer& timer) override {
    compact_batch(batch.inputs);
    pull();
    timer.lap(&PhaseTimes::comm_exposed);
    model_->forward(params_.data(), x_.data(), local_batch_, logits_.data());
    s_.ctx.cross_entropy(logits_.data(), batch.labels, local_batch_, 2, dlogits_.data(),
                         1.0f / static_cast<float>(s_.config.global_batch), step);
  }
  void backward(const GradReadyFn&) override {
    model_->backward(params_.data(), x_.data(), dlogits_.data(), local_batch_, grads_.data(), nullptr);
  }
  void finish_grad_sync() override {
    s_.ctx.synchronize();
    s_.ctx.comm().allreduce_sum(grads_.data() + dense_at_, n_ - dense_at_);
    push();
  }
  void optimizer_step() override {
    optimizer_.step(params_.data() + dense_at_, grads_.data() + dense_at_);
    const float lr = s_.config.optimizer.lr;
    const std::size_t dim = full_.dim;
    for (std::size_t i = 0; i < touched_.size(); ++i) {
      if (!touched_[i]) continue;
      float* w = shard_.data() + i * dim;
      float* g = shard_grad_.data() + i * dim;
      for (std::size_t c = 0; c < dim; ++c) w[c] -= lr * g[c];
      std::fill(g, g + dim, 0.0f);
      touched_[i] = 0;
    }
  }

  // The step losses summed onto rank 0 (as ReplicaRank's), then every server's rows and rank 0's
  // dense layers gathered into rank 0's full parameter vector for the result.
  std::vector<double> global_losses(std::vector<double> local) override {
    Communicator& comm = s_.ctx.comm();
    std::vector<float> sums(local.begin(), local.end());
    if (sums.empty()) sums.push_back(0.0f);
    comm.allreduce_sum(sums.data(), sums.size());
    if (rank_ == 0) full_params_.assign(full_model_->num_params(), 0.0f);
    std::vector<std::size_t> counts;
    for (int k = 0; k < p_; ++k) counts.push_back((starts_[k + 1] - starts_[k]) * full_.dim);
    for (std::size_t t = 0; t < full_.tables; ++t) {
      comm.gatherv(shard_table(t), counts, rank_ == 0 ? full_params_.data() + t * full_.rows * full_.dim : nullptr, 0);
    }
    if (rank_ == 0)
      std::copy(params_.data() + dense_at_, params_.data() + n_, full_params_.data() + full_.embedding_params());
    return {sums.begin(), sums.end()};
  }

 private:
  static TrainConfig compact(const TrainConfig& config, std::size_t cap) {
    TrainConfig c = config;
    c.model.dlrm.rows = cap;
    return c;
  }
  // Table t's first served row in shard_.
  float* shard_table(std::size_t t) { return shard_.data() + t * own_.length * full_.dim; }
  int owner(std::size_t r) const {
    return static_cast<int>(std::upper_bound(starts_.begin(), starts_.end(), r) - starts_.begin()) - 1;
  }

  // The batch with each table's indices renumbered to their place among the batch's unique rows
  // of that table; what each server is asked for.
  void compact_batch(const float* inputs) {
    const CompactTables tables = compact_lookups(inputs, x_.data(), local_batch_, full_.bags());
    for (Pull& p : pulls_) p = {};
    for (std::size_t t = 0; t < full_.tables; ++t) {
      const std::vector<std::size_t>& rows = tables.rows[t];
      for (std::size_t c = 0; c < rows.size(); ++c) {
        Pull& p = pulls_[static_cast<std::size_t>(owner(rows[c]))];
        p.ids.push_back(static_cast<float>(t));
        p.ids.push_back(static_cast<float>(rows[c]));
        p.slots.push_back((t * cap_ + c) * full_.dim);
      }
    }
  }

  // This server's local row of an id pair, marked touched.
  std::size_t served_row(const float* id) {
    const auto t = static_cast<std::size_t>(id[0]);
    const std::size_t i = t * own_.length + (static_cast<std::size_t>(id[1]) - own_.offset);
    touched_[i] = 1;
    return i;
  }

  void pull() {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    Pull& mine = pulls_[static_cast<std::size_t>(rank_)];
    for (std::size_t j = 0; j < mine.slots.size(); ++j) {
      std::copy_n(shard_.data() + served_row(&mine.ids[2 * j]) * dim, dim, params_.data() + mine.slots[j]);
    }
    for (int d = 1; d < p_; ++d) {
      const auto dst = static_cast<std::size_t>((rank_ + d) % p_),
                 src = static_cast<std::size_t>((rank_ - d + p_) % p_);
      Pull& want = pulls_[dst];
      std::vector<float>& asked = served_[src];
      float n_want = static_cast<float>(want.slots.size()), n_asked = 0;
      comm.sendrecv(&n_want, 1, static_cast<int>(dst), &n_asked, 1, static_cast<int>(src));
      asked.resize(2 * static_cast<std::size_t>(n_asked));
      comm.sendrecv(want.ids.data(), want.ids.size(), static_cast<int>(dst), asked.data(), asked.size(),
                    static_cast<int>(src));
      std::vector<float> reply(asked.size() / 2 * dim), got(want.slots.size() * dim);
      for (std::size_t j = 0; j < asked.size() / 2; ++j) {
        std::copy_n(shard_.data() + served_row(&asked[2 * j]) * dim, dim, reply.data() + j * dim);
      }
      comm.sendrecv(reply.data(), reply.size(), static_cast<int>(src), got.data(), got.size(), static_cast<int>(dst));
      for (std::size_t j = 0; j < want.slots.size(); ++j)
        std::copy_n(got.data() + j * dim, dim, params_.data() + want.slots[j]);
    }
  }

  void push() {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    const auto add = [&](const float* id, const float* g) {
      float* acc = shard_grad_.data() + served_row(id) * dim;
      for (std::size_t c = 0; c < dim; ++c) acc[c] += g[c];
    };
    const Pull& mine = pulls_[static_cast<std::size_t>(rank_)];
    for (std::size_t j = 0; j < mine.slots.size(); ++j) add(&mine.ids[2 * j], grads_.data() + mine.slots[j]);
    for (int d = 1; d < p_; ++d) {
      const auto dst = static_cast<std::size_t>((rank_ + d) % p_),
                 src = static_cast<std::size_t>((rank_ - d + p_) % p_);
      const Pull& sent = pulls_[dst];
      const std::vector<float>& asked = served_[src];
      std::vector<float> out(sent.slots.size() * dim), in(asked.size() / 2 * dim);
      for (std::size_t j = 0; j < sent.slots.size(); ++j)
        std::copy_n(grads_.data() + sent.slots[j], dim, out.data() + j * dim);
      comm.sendrecv(out.data(), out.size(), static_cast<int>(dst), in.data(), in.size(), static_cast<int>(src));
      for (std::size_t j = 0; j < asked.size() / 2; ++j) add(&asked[2 * j], in.data() + j * dim);
    }
  }

  RankSetup s_;
  int p_, rank_;
  std::size_t local_batch_;
  DlrmShape full_;
  std::size_t cap_;                    // compact rows per table: local_batch x lookups
  TrainConfig compact_config_;         // the run's, its tables cut to cap_ rows
  std::unique_ptr<Model> full_model_;  // the run's model: names and sizes of the result
  std::unique_ptr<Model> model_;       // the compact replica
  std::size_t n_, dense_at_;           // the replica's floats; where its dense layers start
  Array<float> params_, grads_, logits_, dlogits_, x_;
  Optimizer optimizer_;  // the dense layers'
  DistributedSampler sampler_;
  Chunk own_;                               // the rows of every table this rank serves
  Array<float> shard_, shard_grad_;         // [tables, own_.length, dim]
  std::vector<std::uint8_t> touched_;       // per served row: pulled this step
  std::vector<std::size_t> starts_;         // [p + 1]: the first row each rank serves
  std::vector<Pull> pulls_;                 // per server: what this worker pulls from it this step
  std::vector<std::vector<float>> served_;  // per worker: the ids it asked this server for
  std::vector<float> full_params_;          // rank 0, after the last step: the whole model
};

}  // namespace

std::unique_ptr<ModeRank> make_sparse_embedding_rank(const RankSetup& setup) {
  return std::make_unique<SparseEmbeddingRank>(setup);
}

}  // namespace dpbench
