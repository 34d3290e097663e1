#include "allreduce/sparse_allreduce.hpp"

#include <algorithm>
#include <unordered_map>

#include "allreduce/ddp_trainer.hpp"
#include "train/replica_rank.hpp"
#include "train/sparse_grad.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

namespace {

class SparseAllreduceRank final : public CompactReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return allreduce_probed_collectives(s_.config); }
  explicit SparseAllreduceRank(const RankSetup& s)
      : CompactReplicaRank(s),
        tables_(s.ctx, MemoryCategory::parameters, full_.embedding_params()),
        state_(s.ctx, MemoryCategory::optimizer_state,
               full_.embedding_optimizer == "adagrad" ? full_.embedding_params() : 0) {
    time_collectives_ = true;  // the in-run simulation calibrates the engine on the step's own collectives
    for (std::size_t t = 0; t < full_.tables; ++t) {
      initial_table_rows(t, 0, full_.rows, table_row(t, 0));
    }
  }

 protected:
  // The batch's rows copied from this replica's own tables: no communication.
  bool fill_rows() override {
    for (std::size_t t = 0; t < full_.tables; ++t) {
      const std::vector<std::size_t>& rows = lookups().rows[t];
      for (std::size_t c = 0; c < rows.size(); ++c) std::copy_n(table_row(t, rows[c]), full_.dim, compact_param(t, c));
    }
    return false;
  }
  void exchange_rows() override { sparse_allreduce(); }
  void step_rows(float lr) override {
    const bool adagrad = full_.embedding_optimizer == "adagrad";
    for (const auto& [row, at] : summed_) {
      step_table_row(adagrad, lr, tables_.data() + row * full_.dim, sums_.data() + at,
                     adagrad ? state_.data() + row * full_.dim : nullptr, full_.dim);
    }
  }
  // Every replica holds every table: rank 0's own.
  void collect_tables(float* tables) override {
    if (tables != nullptr) std::copy_n(tables_.data(), full_.embedding_params(), tables);
  }

 private:
  float* table_row(std::size_t t, std::size_t r) { return tables_.data() + (t * full_.rows + r) * full_.dim; }

  // Every rank's (table, row) ids and gradient rows, all-gathered in rank order, summed per row
  // into sums_ (summed_: flat table row -> its place in sums_).
  void sparse_allreduce() {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    std::vector<float> ids, values;
    host_work(host_work_.push, [&] {
      for (std::size_t t = 0; t < full_.tables; ++t) {
        for (std::size_t c = 0; c < lookups().rows[t].size(); ++c) {
          ids.push_back(static_cast<float>(t));
          ids.push_back(static_cast<float>(lookups().rows[t][c]));
          values.insert(values.end(), compact_grad(t, c), compact_grad(t, c) + dim);
        }
      }
    });
    std::vector<float> counts(static_cast<std::size_t>(p_));
    const float mine = static_cast<float>(ids.size() / 2);
    timed(CollectiveKind::allgather, 1, [&] { comm.allgather(&mine, counts.data(), 1); });
    std::vector<std::size_t> id_counts, value_counts;
    std::size_t before = 0, total = 0;
    for (int r = 0; r < p_; ++r) {
      const auto n = static_cast<std::size_t>(counts[static_cast<std::size_t>(r)]);
      if (r < rank_) before += n;
      total += n;
      id_counts.push_back(2 * n);
      value_counts.push_back(dim * n);
    }
    std::vector<float> all_ids(2 * total), all_values(dim * total);
    std::copy(ids.begin(), ids.end(), all_ids.begin() + static_cast<std::ptrdiff_t>(2 * before));
    std::copy(values.begin(), values.end(), all_values.begin() + static_cast<std::ptrdiff_t>(dim * before));
    timed(CollectiveKind::allgather, ids.size(), [&] { comm.allgatherv(all_ids.data(), id_counts); });
    timed(CollectiveKind::allgather, values.size(), [&] { comm.allgatherv(all_values.data(), value_counts); });
    host_work(host_work_.push, [&] {
      summed_.clear();
      sums_.clear();
      for (std::size_t j = 0; j < total; ++j) {
        const std::size_t row = static_cast<std::size_t>(all_ids[2 * j]) * full_.rows +
                                static_cast<std::size_t>(all_ids[2 * j + 1]);
        const auto [it, fresh] = summed_.try_emplace(row, sums_.size());
        if (fresh) sums_.resize(sums_.size() + dim, 0.0f);
        for (std::size_t c = 0; c < dim; ++c) sums_[it->second + c] += all_values[j * dim + c];
      }
    });
  }

  Array<float> tables_;                                  // the replica's tables: [tables, rows, dim]
  Array<float> state_;                                   // adagrad's sums of squares, as tables_; else empty
  std::unordered_map<std::size_t, std::size_t> summed_;  // this step's rows: flat row -> offset in sums_
  std::vector<float> sums_;
};

}  // namespace

std::unique_ptr<ModeRank> make_sparse_allreduce_rank(const RankSetup& setup) {
  return std::make_unique<SparseAllreduceRank>(setup);
}

}  // namespace dpbench
