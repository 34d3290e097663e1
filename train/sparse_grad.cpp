#include "train/sparse_grad.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "train/replica_rank.hpp"

namespace dpbench {

void validate_sparse_grad(const TrainConfig& config) {
  if (!config.model.dlrm.sparse_grad) return;
  const auto refuse = [](const std::string& why) { throw InputError("--sparse-grad: " + why); };
  if (config.model.workload != "dlrm") refuse("applies to --workload dlrm");
  if (config.device != DeviceKind::cpu) refuse("runs on --device cpu");
  const std::string& tables = config.model.dlrm.embedding_optimizer;
  if (tables != "sgd" && tables != "adagrad") {
    refuse(fmt::format("--embedding-optimizer {}: the tables step with sgd or adagrad", tables));
  }
  if (config.optimizer.name != "sgd" || config.optimizer.weight_decay != 0) {
    refuse("the tables step with SGD without momentum or weight decay (PyTorch's SGD on a sparse gradient); "
           "give --optimizer sgd and no --weight-decay");
  }
  if (config.hierarchy != Hierarchy::none) refuse(fmt::format("not with --hierarchy {}", config.hierarchy));
  if (!config.rank_batches.empty()) refuse("not with --rank-batch");
  if (!config.checkpoint.dir.empty()) refuse("no checkpoints yet");
  if (config.allreduce.comm_hook != CommHook{})
    refuse(fmt::format("not with --comm-hook {}", hook_name(config.allreduce.comm_hook)));
  const std::size_t rows = config.global_batch / static_cast<std::size_t>(std::max(1, config.world_size)) *
                           config.model.dlrm.lookups * config.model.dlrm.tables;
  if (rows > kDlrmMaxRows) {
    refuse(fmt::format("up to {} rows per step, more than {} (counts travel as exact floats)", rows, kDlrmMaxRows));
  }
}

void step_table_row(bool adagrad, float lr, float* w, const float* g, float* state, std::size_t dim) {
  if (!adagrad) {
    for (std::size_t c = 0; c < dim; ++c) w[c] -= lr * g[c];
    return;
  }
  for (std::size_t c = 0; c < dim; ++c) {
    state[c] += g[c] * g[c];
    w[c] -= lr * (g[c] / (std::sqrt(state[c]) + kAdagradEps));
  }
}

void step_touched_rows(bool adagrad, float lr, float* w, float* g, float* state, std::vector<std::uint8_t>& touched,
                       std::size_t dim) {
  for (std::size_t i = 0; i < touched.size(); ++i) {
    if (!touched[i]) continue;
    step_table_row(adagrad, lr, w + i * dim, g + i * dim, adagrad ? state + i * dim : nullptr, dim);
    std::fill(g + i * dim, g + (i + 1) * dim, 0.0f);
    touched[i] = 0;
  }
}

RankMemory sparse_rank_memory(const MemoryInputs& in, double table_rows, bool table_gradients) {
  const DlrmShape& d = in.config.model.dlrm;
  const double f = sizeof(float), dim = static_cast<double>(d.dim), tables = static_cast<double>(d.tables);
  const double rows = static_cast<double>(in.config.global_batch / static_cast<std::size_t>(in.config.world_size));
  const double dense = in.num_params - static_cast<double>(d.embedding_params());
  const double compact = tables * rows * static_cast<double>(d.lookups) * dim + dense;
  const double served = tables * table_rows * dim;
  RankMemory m;
  m.role = "replica";
  m[MemoryCategory::parameters] = (compact + served) * f;
  m[MemoryCategory::gradients] = (compact + (table_gradients ? served : 0.0)) * f;
  m[MemoryCategory::optimizer_state] = optimizer_bytes(in.config, dense) +
                                       (d.embedding_optimizer == "adagrad" ? served * f : 0.0);
  m[MemoryCategory::activations] = in.activation_bytes(rows) + 2.0 * rows * in.classes * f +
                                   rows * static_cast<double>(d.input_features()) * f;
  m[MemoryCategory::data_staging] = loader_bytes(in, rows);
  return m;
}

CompactTables compact_lookups(const float* inputs, float* x_out, std::size_t batch, const cpu::BagShape& s) {
  const std::size_t stride = s.row_stride(), D = s.dense, L = s.lookups;
  std::memcpy(x_out, inputs, batch * stride * sizeof(float));
  CompactTables out;
  out.rows.resize(s.tables);
  for (std::size_t t = 0; t < s.tables; ++t) {
    std::vector<std::size_t>& rows = out.rows[t];
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t l = 0; l < L; ++l) rows.push_back(static_cast<std::size_t>(inputs[b * stride + D + t * L + l]));
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t l = 0; l < L; ++l) {
        float& v = x_out[b * stride + D + t * L + l];
        v = static_cast<float>(std::lower_bound(rows.begin(), rows.end(), static_cast<std::size_t>(v)) - rows.begin());
      }
    }
  }
  return out;
}

namespace {
TrainConfig with_rows(const TrainConfig& config, std::size_t rows) {
  TrainConfig c = config;
  c.model.dlrm.rows = rows;
  return c;
}
}  // namespace

CompactReplicaRank::CompactReplicaRank(const RankSetup& s, DenseLayers dense)
    : s_(s),
      p_(s.config.world_size),
      rank_(s.ctx.rank()),
      local_batch_(s.config.global_batch / static_cast<std::size_t>(p_)),
      full_(s.config.model.dlrm),
      dense_(dense),
      cap_(local_batch_ * full_.lookups),
      compact_config_(with_rows(s.config, cap_)),
      full_model_(std::make_unique<Dlrm<float>>(full_)),
      model_(s.ctx.make_model(compact_config_, s.train.shape(), 2, local_batch_)),
      n_(model_->num_params()),
      dense_at_(full_.tables * cap_ * full_.dim),
      params_(s.ctx, MemoryCategory::parameters, n_),
      grads_(s.ctx, MemoryCategory::gradients, n_),
      logits_(s.ctx, MemoryCategory::activations, local_batch_ * 2),
      dlogits_(s.ctx, MemoryCategory::activations, local_batch_ * 2),
      x_(s.ctx, MemoryCategory::activations, local_batch_ * full_.input_features()),
      optimizer_(s.ctx, s.config, dense_at_, dense == DenseLayers::on_root && rank_ != 0 ? 0 : n_ - dense_at_),
      sampler_(s.train.size(), p_, rank_, /*shuffle=*/true, s.config.seed) {
  const std::shared_ptr<const std::vector<float>>& given = s.config.initial_params;
  if (given == nullptr) {
    const std::vector<float> initial = initial_parameters(*model_, compact_config_);  // the dense layers
    s.ctx.upload(params_.data(), initial.data(), n_);
    return;
  }
  if (given->size() != full_model_->num_params()) {
    throw InputError(fmt::format("--init-params: {} floats, but the dlrm has {} parameters", given->size(),
                                 full_model_->num_params()));
  }
  // The dense layers follow the tables in the full model and in the compact one alike.
  s.ctx.upload(params_.data() + dense_at_, given->data() + full_.embedding_params(), n_ - dense_at_);
}

void CompactReplicaRank::initial_table_rows(std::size_t t, std::size_t begin, std::size_t end, float* out) const {
  if (s_.config.initial_params == nullptr) return init_table_rows(full_, s_.config.seed, t, begin, end, out);
  const float* table = s_.config.initial_params->data() + t * full_.rows * full_.dim;
  std::copy(table + begin * full_.dim, table + end * full_.dim, out);
}

std::vector<std::int64_t> CompactReplicaRank::epoch_order(int epoch) {
  return ddp_epoch_indices(s_.config, s_.train, sampler_, epoch, 0, local_batch_, s_.steps_per_epoch);
}

void CompactReplicaRank::forward(const StagedBatch& batch, long step, StepTimer& timer) {
  host_work(host_work_.pull, [&] { lookups_ = compact_lookups(batch.inputs, x_.data(), local_batch_, full_.bags()); });
  const bool on_root = dense_ == DenseLayers::on_root && p_ > 1;
  if (on_root) s_.ctx.comm().broadcast(params_.data() + dense_at_, n_ - dense_at_, 0);
  if (fill_rows() || on_root) {
    timer.lap(&PhaseTimes::comm_exposed);
  } else {
    host_work_.pull = 0;  // no exchange: forward's lap holds it
  }
  model_->forward(params_.data(), x_.data(), local_batch_, logits_.data());
  s_.ctx.cross_entropy(logits_.data(), batch.labels, local_batch_, 2, dlogits_.data(),
                       1.0f / static_cast<float>(s_.config.global_batch), step);
}

void CompactReplicaRank::backward(const GradReadyFn&) {
  model_->backward(params_.data(), x_.data(), dlogits_.data(), local_batch_, grads_.data(), nullptr);
}

void CompactReplicaRank::finish_grad_sync() {
  s_.ctx.synchronize();
  const std::size_t n = n_ - dense_at_;
  if (dense_ == DenseLayers::on_root) {
    timed(CollectiveKind::reduce, n, [&] { s_.ctx.comm().reduce_sum(grads_.data() + dense_at_, n, 0); });
  } else {
    timed(CollectiveKind::allreduce, n, [&] { s_.ctx.comm().allreduce_sum(grads_.data() + dense_at_, n); });
  }
  exchange_rows();
}

void CompactReplicaRank::optimizer_step() {
  if (dense_ == DenseLayers::allreduced || rank_ == 0) {
    optimizer_.step(params_.data() + dense_at_, grads_.data() + dense_at_);
  }
  step_rows(s_.config.optimizer.lr);
}

const float* CompactReplicaRank::gather_params() {
  if (rank_ == 0) full_params_.assign(full_model_->num_params(), 0.0f);
  collect_tables(rank_ == 0 ? full_params_.data() : nullptr);
  if (rank_ == 0) {
    std::copy(params_.data() + dense_at_, params_.data() + n_, full_params_.data() + full_.embedding_params());
  }
  return full_params_.data();
}

std::vector<double> CompactReplicaRank::global_losses(std::vector<double> local) {
  std::vector<double> sums = sum_losses_on_rank0(s_.ctx, local);
  gather_params();
  return sums;
}

}  // namespace dpbench
