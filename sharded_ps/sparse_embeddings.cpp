#include "sharded_ps/sparse_embeddings.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/ring.hpp"
#include "sharded_ps/sharded_ps.hpp"
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
// the compact tables.
struct Slot {
  std::size_t table, row;  // a compact row
};
struct Pull {
  std::vector<float> ids;
  std::vector<Slot> slots;
};

class SparseEmbeddingRank final : public CompactReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return sharded_ps_probed_collectives(s_.config); }
  explicit SparseEmbeddingRank(const RankSetup& s)
      : CompactReplicaRank(s),
        own_(ring_chunk(full_.rows, p_, rank_)),
        shard_(s.ctx, MemoryCategory::parameters, full_.tables * own_.length * full_.dim),
        shard_grad_(s.ctx, MemoryCategory::gradients, full_.tables * own_.length * full_.dim),
        adagrad_(full_.embedding_optimizer == "adagrad"),
        shard_state_(s.ctx, MemoryCategory::optimizer_state, adagrad_ ? full_.tables * own_.length * full_.dim : 0),
        touched_(full_.tables * own_.length, 0),
        pulls_(static_cast<std::size_t>(p_)),
        served_(static_cast<std::size_t>(p_)) {
    for (int k = 0; k <= p_; ++k) starts_.push_back(k < p_ ? ring_chunk(full_.rows, p_, k).offset : full_.rows);
    for (std::size_t t = 0; t < full_.tables; ++t) {
      initial_table_rows(t, own_.offset, own_.offset + own_.length, shard_table(t));
    }
  }

 protected:
  // pull: what each server owns of the batch's rows, asked for and received.
  bool fill_rows() override {
    host_work(host_work_.pull, [&] {
      for (Pull& p : pulls_) p = {};
      for (std::size_t t = 0; t < full_.tables; ++t) {
        const std::vector<std::size_t>& rows = lookups().rows[t];
        for (std::size_t c = 0; c < rows.size(); ++c) {
          Pull& p = pulls_[static_cast<std::size_t>(owner(rows[c]))];
          p.ids.push_back(static_cast<float>(t));
          p.ids.push_back(static_cast<float>(rows[c]));
          p.slots.push_back({t, c});
        }
      }
    });
    pull();
    return true;
  }
  void exchange_rows() override { push(); }
  // The server's step: the tables' optimizer on every row pulled this step, its gradient sum
  // cleared.
  void step_rows(float lr) override {
    step_touched_rows(adagrad_, lr, shard_.data(), shard_grad_.data(), shard_state_.data(), touched_, full_.dim);
  }
  // Every server's rows of each table gathered on rank 0.
  void collect_tables(float* tables) override {
    std::vector<std::size_t> counts;
    for (int k = 0; k < p_; ++k) counts.push_back((starts_[k + 1] - starts_[k]) * full_.dim);
    for (std::size_t t = 0; t < full_.tables; ++t) {
      s_.ctx.comm().gatherv(shard_table(t), counts, tables ? tables + t * full_.rows * full_.dim : nullptr, 0);
    }
  }

 private:
  // Table t's first served row in shard_.
  float* shard_table(std::size_t t) { return shard_.data() + t * own_.length * full_.dim; }
  int owner(std::size_t r) const {
    return static_cast<int>(std::upper_bound(starts_.begin(), starts_.end(), r) - starts_.begin()) - 1;
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
    const Pull& mine = pulls_[static_cast<std::size_t>(rank_)];
    host_work(host_work_.pull, [&] {
      for (std::size_t j = 0; j < mine.slots.size(); ++j) {
        std::copy_n(shard_.data() + served_row(&mine.ids[2 * j]) * dim, dim, slot_param(mine.slots[j]));
      }
    });
    for (int d = 1; d < p_; ++d) {
      const auto dst = static_cast<std::size_t>((rank_ + d) % p_),
                 src = static_cast<std::size_t>((rank_ - d + p_) % p_);
      const Pull& want = pulls_[dst];
      std::vector<float>& asked = served_[src];
      float n_want = static_cast<float>(want.slots.size()), n_asked = 0;
      comm.sendrecv(&n_want, 1, static_cast<int>(dst), &n_asked, 1, static_cast<int>(src));
      asked.resize(2 * static_cast<std::size_t>(n_asked));
      comm.sendrecv(want.ids.data(), want.ids.size(), static_cast<int>(dst), asked.data(), asked.size(),
                    static_cast<int>(src));
      std::vector<float> reply(asked.size() / 2 * dim), got(want.slots.size() * dim);
      host_work(host_work_.pull, [&] {
        for (std::size_t j = 0; j < asked.size() / 2; ++j) {
          std::copy_n(shard_.data() + served_row(&asked[2 * j]) * dim, dim, reply.data() + j * dim);
        }
      });
      comm.sendrecv(reply.data(), reply.size(), static_cast<int>(src), got.data(), got.size(), static_cast<int>(dst));
      host_work(host_work_.pull, [&] {
        for (std::size_t j = 0; j < want.slots.size(); ++j)
          std::copy_n(got.data() + j * dim, dim, slot_param(want.slots[j]));
      });
    }
  }

  // push: each server's pulled rows' gradients, summed into its gradient sums.
  void push() {
    Communicator& comm = s_.ctx.comm();
    const std::size_t dim = full_.dim;
    const auto add = [&](const float* id, const float* g) {
      float* acc = shard_grad_.data() + served_row(id) * dim;
      for (std::size_t c = 0; c < dim; ++c) acc[c] += g[c];
    };
    const Pull& mine = pulls_[static_cast<std::size_t>(rank_)];
    host_work(host_work_.push, [&] {
      for (std::size_t j = 0; j < mine.slots.size(); ++j) add(&mine.ids[2 * j], slot_grad(mine.slots[j]));
    });
    for (int d = 1; d < p_; ++d) {
      const auto dst = static_cast<std::size_t>((rank_ + d) % p_),
                 src = static_cast<std::size_t>((rank_ - d + p_) % p_);
      const Pull& sent = pulls_[dst];
      const std::vector<float>& asked = served_[src];
      std::vector<float> out(sent.slots.size() * dim), in(asked.size() / 2 * dim);
      host_work(host_work_.push, [&] {
        for (std::size_t j = 0; j < sent.slots.size(); ++j)
          std::copy_n(slot_grad(sent.slots[j]), dim, out.data() + j * dim);
      });
      comm.sendrecv(out.data(), out.size(), static_cast<int>(dst), in.data(), in.size(), static_cast<int>(src));
      host_work(host_work_.push, [&] {
        for (std::size_t j = 0; j < asked.size() / 2; ++j) add(&asked[2 * j], in.data() + j * dim);
      });
    }
  }
  float* slot_param(const Slot& at) { return compact_param(at.table, at.row); }
  const float* slot_grad(const Slot& at) const { return compact_grad(at.table, at.row); }

  Chunk own_;                               // the rows of every table this rank serves
  Array<float> shard_, shard_grad_;         // [tables, own_.length, dim]
  bool adagrad_;                            // the tables' optimizer
  Array<float> shard_state_;                // adagrad: its sums of squares, as shard_; else empty
  std::vector<std::uint8_t> touched_;       // per served row: pulled this step
  std::vector<std::size_t> starts_;         // [p + 1]: the first row each rank serves
  std::vector<Pull> pulls_;                 // per server: what this worker pulls from it this step
  std::vector<std::vector<float>> served_;  // per worker: the ids it asked this server for
};

}  // namespace

std::unique_ptr<ModeRank> make_sparse_embedding_rank(const RankSetup& setup) {
  return std::make_unique<SparseEmbeddingRank>(setup);
}

}  // namespace dpbench
