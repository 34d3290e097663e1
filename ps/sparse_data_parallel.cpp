#include "ps/sparse_data_parallel.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "core/error.hpp"
#include "train/engine_probe.hpp"
#include "train/sparse_grad.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

namespace {
constexpr int kSparseRoot = 0;  // DataParallel's root: the tables' server
}  // namespace

void validate_sparse_data_parallel(const TrainConfig& config) {
  if (!config.model.dlrm.sparse_grad) return;
  validate_sparse_grad(config);
  if (config.global_batch % static_cast<std::size_t>(config.world_size) != 0) {
    throw InputError(fmt::format("--batch-size {}: not divisible by --ranks {} (ps --sparse-grad gives every replica "
                                 "global_batch / world_size samples)",
                                 config.global_batch, config.world_size));
  }
  if (config.transport != Transport::collective) {
    throw InputError(fmt::format("--sparse-grad: ps gathers and scatters the rows with --transport collective, not {}",
                                 config.transport));
  }
}

std::vector<CollectiveKind> sparse_data_parallel_probed_collectives() {
  using K = CollectiveKind;
  static constexpr std::array<K, 6> kRound = {K::broadcast, K::allgather, K::gather, K::scatter, K::reduce, K::gather};
  std::vector<K> kinds;
  kinds.reserve(kRound.size() * (kSparseProbeRounds / 3));
  for (int round = 0; round < kSparseProbeRounds / 3; ++round) {
    for (const K k : kRound) kinds.push_back(k);
  }
  return kinds;
}

namespace {

class SparseDataParallelRank final : public CompactReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return sparse_data_parallel_probed_collectives(); }
  explicit SparseDataParallelRank(const RankSetup& s)
      : CompactReplicaRank(s, DenseLayers::on_root),
        root_(rank_ == kSparseRoot),
        adagrad_(full_.embedding_optimizer == "adagrad"),
        tables_(s.ctx, MemoryCategory::parameters, root_ ? full_.embedding_params() : 0),
        table_grads_(s.ctx, MemoryCategory::gradients, root_ ? full_.embedding_params() : 0),
        state_(s.ctx, MemoryCategory::optimizer_state, root_ && adagrad_ ? full_.embedding_params() : 0),
        touched_(root_ ? full_.tables * full_.rows : 0, 0),
        counts_(static_cast<std::size_t>(p_)) {
    if (!root_) return;
    for (std::size_t t = 0; t < full_.tables; ++t) initial_table_rows(t, 0, full_.rows, table_row(t, 0));
  }

 protected:
  // The refresh: every rank's ids to the root, their rows back.
  bool fill_rows() override {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    host_work(host_work_.pull, [&] {
      ids_.clear();
      for (std::size_t t = 0; t < full_.tables; ++t) {
        for (const std::size_t row : lookups().rows[t]) {
          ids_.push_back(static_cast<float>(t));
          ids_.push_back(static_cast<float>(row));
        }
      }
    });
    const float mine = static_cast<float>(ids_.size() / 2);
    comm.allgather(&mine, counts_.data(), 1);
    std::vector<std::size_t> id_counts, row_counts;
    std::size_t total = 0;
    for (const float c : counts_) {
      id_counts.push_back(2 * static_cast<std::size_t>(c));
      row_counts.push_back(dim * static_cast<std::size_t>(c));
      total += static_cast<std::size_t>(c);
    }
    all_ids_.resize(root_ ? 2 * total : 0);
    comm.gatherv(ids_.data(), id_counts, all_ids_.data(), kSparseRoot);
    std::vector<float> rows(root_ ? dim * total : 0), got(dim * (ids_.size() / 2));
    host_work(host_work_.pull, [&] {
      for (std::size_t j = 0; root_ && j < total; ++j)
        std::copy_n(table_row(&all_ids_[2 * j]), dim, rows.data() + j * dim);
    });
    comm.scatterv(rows.data(), row_counts, got.data(), kSparseRoot);
    host_work(host_work_.pull, [&] {
      std::size_t j = 0;
      for (std::size_t t = 0; t < full_.tables; ++t) {
        for (std::size_t c = 0; c < lookups().rows[t].size(); ++c, ++j) {
          std::copy_n(got.data() + j * dim, dim, compact_param(t, c));
        }
      }
    });
    row_counts_ = std::move(row_counts);
    return true;
  }

  // The touched rows' gradients gathered to the root, in the order of their ids, and summed
  // there per row in rank order.
  void exchange_rows() override {
    const std::size_t dim = full_.dim;
    std::vector<float> mine;
    host_work(host_work_.push, [&] {
      mine.reserve(dim * ids_.size() / 2);
      for (std::size_t t = 0; t < full_.tables; ++t) {
        for (std::size_t c = 0; c < lookups().rows[t].size(); ++c) {
          mine.insert(mine.end(), compact_grad(t, c), compact_grad(t, c) + dim);
        }
      }
    });
    std::vector<float> all(root_ ? all_ids_.size() / 2 * dim : 0);
    s_.ctx.comm().gatherv(mine.data(), row_counts_, all.data(), kSparseRoot);
    host_work(host_work_.push, [&] {
      for (std::size_t j = 0; root_ && j < all_ids_.size() / 2; ++j) {
        const std::size_t row = flat_row(&all_ids_[2 * j]);
        touched_[row] = 1;
        float* acc = table_grads_.data() + row * dim;
        for (std::size_t c = 0; c < dim; ++c) acc[c] += all[j * dim + c];
      }
    });
  }

  // The root's step on every touched row, its gradient sum cleared.
  void step_rows(float lr) override {
    step_touched_rows(adagrad_, lr, tables_.data(), table_grads_.data(), state_.data(), touched_, full_.dim);
  }

  // The root holds every table.
  void collect_tables(float* tables) override {
    if (tables != nullptr) std::copy_n(tables_.data(), full_.embedding_params(), tables);
  }

 private:
  // An id pair's row of the flat tables [tables * rows].
  std::size_t flat_row(const float* id) const {
    return static_cast<std::size_t>(id[0]) * full_.rows + static_cast<std::size_t>(id[1]);
  }
  float* table_row(const float* id) { return tables_.data() + flat_row(id) * full_.dim; }
  float* table_row(std::size_t t, std::size_t r) { return tables_.data() + (t * full_.rows + r) * full_.dim; }

  bool root_;
  bool adagrad_;                         // the tables' optimizer
  Array<float> tables_, table_grads_;    // the root's: [tables, rows, dim]; empty elsewhere
  Array<float> state_;                   // the root's adagrad sums of squares, as tables_; else empty
  std::vector<std::uint8_t> touched_;    // the root's, per flat row: gathered this step
  std::vector<float> counts_;            // [world_size]: each rank's rows this step
  std::vector<float> ids_, all_ids_;     // this rank's (table, row) ids; the root's gathered ones
  std::vector<std::size_t> row_counts_;  // [world_size]: dim x each rank's rows
};

}  // namespace

std::unique_ptr<ModeRank> make_sparse_data_parallel_rank(const RankSetup& setup) {
  return std::make_unique<SparseDataParallelRank>(setup);
}

}  // namespace dpbench
