#include "allreduce/sparse_allreduce.hpp"

#include <algorithm>
#include <unordered_map>

#include "train/replica_rank.hpp"
#include "train/sparse_grad.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

namespace {

class SparseAllreduceRank final : public ModeRank {
 public:
  explicit SparseAllreduceRank(const RankSetup& s)
      : s_(s),
        p_(s.config.world_size),
        local_batch_(s.config.global_batch / static_cast<std::size_t>(p_)),
        full_(s.config.model.dlrm),
        cap_(local_batch_ * full_.lookups),
        compact_config_(compacted(s.config, cap_)),
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
        sampler_(s.train.size(), p_, s.ctx.rank(), /*shuffle=*/true, s.config.seed),
        tables_(s.ctx, MemoryCategory::parameters, full_.embedding_params()) {
    const std::vector<float> initial = initial_parameters(*model_, compact_config_);  // the dense layers
    s.ctx.upload(params_.data(), initial.data(), n_);
    for (std::size_t t = 0; t < full_.tables; ++t) {
      init_table_rows(full_, s.config.seed, t, 0, full_.rows, tables_.data() + t * full_.rows * full_.dim);
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

  // The batch's rows copied from this replica's tables into the compact ones, then forward.
  void forward(const StagedBatch& batch, long step, StepTimer&) override {
    lookups_ = compact_lookups(batch.inputs, x_.data(), local_batch_, full_.bags());
    const std::size_t dim = full_.dim;
    for (std::size_t t = 0; t < full_.tables; ++t) {
      for (std::size_t c = 0; c < lookups_.rows[t].size(); ++c) {
        std::copy_n(table_row(t, lookups_.rows[t][c]), dim, params_.data() + (t * cap_ + c) * dim);
      }
    }
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
    sparse_allreduce();
  }
  void optimizer_step() override {
    optimizer_.step(params_.data() + dense_at_, grads_.data() + dense_at_);
    const float lr = s_.config.optimizer.lr;
    const std::size_t dim = full_.dim;
    for (const auto& [row, at] : summed_) {
      float* w = tables_.data() + row * dim;
      const float* g = sums_.data() + at;
      for (std::size_t c = 0; c < dim; ++c) w[c] -= lr * g[c];
    }
  }

  // The step losses summed onto rank 0; rank 0's tables and dense layers as the result's model.
  std::vector<double> global_losses(std::vector<double> local) override {
    std::vector<float> sums(local.begin(), local.end());
    if (sums.empty()) sums.push_back(0.0f);
    s_.ctx.comm().allreduce_sum(sums.data(), sums.size());
    if (s_.ctx.rank() == 0) {
      full_params_.assign(tables_.data(), tables_.data() + full_.embedding_params());
      full_params_.insert(full_params_.end(), params_.data() + dense_at_, params_.data() + n_);
    }
    return {sums.begin(), sums.end()};
  }

 private:
  static TrainConfig compacted(const TrainConfig& config, std::size_t cap) {
    TrainConfig c = config;
    c.model.dlrm.rows = cap;
    return c;
  }
  float* table_row(std::size_t t, std::size_t r) { return tables_.data() + (t * full_.rows + r) * full_.dim; }

  // Every rank's (table, row) ids and gradient rows, all-gathered in rank order, summed per row
  // into sums_ (summed_: flat table row -> its place in sums_).
  void sparse_allreduce() {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    std::vector<float> ids, values;
    for (std::size_t t = 0; t < full_.tables; ++t) {
      for (std::size_t c = 0; c < lookups_.rows[t].size(); ++c) {
        ids.push_back(static_cast<float>(t));
        ids.push_back(static_cast<float>(lookups_.rows[t][c]));
        const float* g = grads_.data() + (t * cap_ + c) * dim;
        values.insert(values.end(), g, g + dim);
      }
    }
    std::vector<float> counts(static_cast<std::size_t>(p_));
    const float mine = static_cast<float>(ids.size() / 2);
    comm.allgather(&mine, counts.data(), 1);
    std::vector<std::size_t> id_counts, value_counts;
    std::size_t before = 0, total = 0;
    for (int r = 0; r < p_; ++r) {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
      if (r < s_.ctx.rank()) before += n;
      total += n;
      id_counts.push_back(2 * n);
      value_counts.push_back(dim * n);
    }
    std::vector<float> all_ids(2 * total), all_values(dim * total);
    std::copy(ids.begin(), ids.end(), all_ids.begin() + static_cast<std::ptrdiff_t>(2 * before));
    std::copy(values.begin(), values.end(), all_values.begin() + static_cast<std::ptrdiff_t>(dim * before));
    comm.allgatherv(all_ids.data(), id_counts);
    comm.allgatherv(all_values.data(), value_counts);
    summed_.clear();
    sums_.clear();
    for (std::size_t j = 0; j < total; ++j) {
      const std::size_t row = static_cast<std::size_t>(all_ids[2 * j]) * full_.rows +
                              static_cast<std::size_t>(all_ids[2 * j + 1]);
      const auto [it, fresh] = summed_.try_emplace(row, sums_.size());
      if (fresh) sums_.resize(sums_.size() + dim, 0.0f);
      for (std::size_t c = 0; c < dim; ++c) sums_[it->second + c] += all_values[j * dim + c];
    }
  }

  RankSetup s_;
  int p_;
  std::size_t local_batch_;
  DlrmShape full_;
  std::size_t cap_;                    // compact rows per table: local_batch x lookups
  TrainConfig compact_config_;         // the run's, its tables cut to cap_ rows
  std::unique_ptr<Model> full_model_;  // the run's model: names and sizes of the result
  std::unique_ptr<Model> model_;       // the compact model the step computes with
  std::size_t n_, dense_at_;           // the compact model's floats; where its dense layers start
  Array<float> params_, grads_, logits_, dlogits_, x_;
  Optimizer optimizer_;  // the dense layers'
  DistributedSampler sampler_;
  Array<float> tables_;  // the replica's tables: [tables, rows, dim]
  CompactTables lookups_;
  std::unordered_map<std::size_t, std::size_t> summed_;  // this step's rows: flat row -> offset in sums_
  std::vector<float> sums_;
  std::vector<float> full_params_;  // rank 0, after the last step: the whole model
};

}  // namespace

std::unique_ptr<ModeRank> make_sparse_allreduce_rank(const RankSetup& setup) {
  return std::make_unique<SparseAllreduceRank>(setup);
}

}  // namespace dpbench
