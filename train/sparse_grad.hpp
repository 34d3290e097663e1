// What the sparse-gradient paths of the strategies share (--workload dlrm --sparse-grad:
// sharded_ps/sparse_embeddings.hpp, allreduce/sparse_allreduce.hpp): the checks every such path
// makes, and the replica's compact tables (the rows its batch looks up, renumbered).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "train/memory_model.hpp"
#include "train/optimizer.hpp"
#include "train/step_loop.hpp"
#include "train/training.hpp"
#include "workloads/distributed_sampler.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

// Throws InputError (one line, "--sparse-grad: ...") on what no sparse path runs: a workload other
// than dlrm, a device other than the CPU, an optimizer other than SGD or weight decay (the tables
// step with SGD without momentum, PyTorch's SGD on a sparse gradient), --hierarchy, --rank-batch,
// checkpoints, --init-params, a communication hook, or more than 2^24 rows per step.
// No-op without --sparse-grad.
void validate_sparse_grad(const TrainConfig& config);

// The epsilon torch.optim.Adagrad adds to the root of its sum of squares (its default).
inline constexpr float kAdagradEps = 1e-10f;
// One table row's step with the tables' optimizer (DlrmShape::embedding_optimizer), on its summed
// gradient g[dim]: sgd: w -= lr g; adagrad: state += g^2, w -= lr g / (sqrt(state) + eps)
// (torch/optim/adagrad.py on a sparse gradient: lr_decay 0, initial accumulator 0, no weight
// decay; state [dim], unused by sgd).
void step_table_row(bool adagrad, float lr, float* w, const float* g, float* state, std::size_t dim);
// step_table_row on every row i marked in touched (then unmarked), its gradient sum g[i] cleared:
// w, g and state hold touched.size() rows of dim floats (state null with sgd).
void step_touched_rows(bool adagrad, float lr, float* w, float* g, float* state, std::vector<std::uint8_t>& touched,
                       std::size_t dim);

// The bytes one rank of a sparse path holds, by category (CompactReplicaRank and its tables, as
// the allocator counts them): the compact replica (local batch x lookups rows of every table, and
// the dense layers) as parameters and gradients, the dense layers' optimizer state, the model's
// activations with the logits, their gradient and the compacted batch, the DataLoader's buffers;
// then `table_rows` rows of every table as parameters, as gradient sums too when
// `table_gradients` (a server's), and with Adagrad (--embedding-optimizer) their sums of squares
// as optimizer state. Role "replica".
RankMemory sparse_rank_memory(const MemoryInputs& in, double table_rows, bool table_gradients);

// The rows of every table one batch looks up, for a replica that holds only those: rows[t] the
// unique rows of table t in ascending order. compact_lookups writes the batch into x_out with each
// index replaced by its row's place in rows[t] (what the model then computes with on tables of
// `capacity` rows; capacity >= batch x lookups). inputs, x_out: [batch, s.row_stride()] host
// floats, not overlapping.
struct CompactTables {
  std::vector<std::vector<std::size_t>> rows;
};
CompactTables compact_lookups(const float* inputs, float* x_out, std::size_t batch, const cpu::BagShape& s);

// The worker both sparse paths share: a replica of the dlrm model holding the dense layers and, of
// the tables, only the rows its batch looks up, in compact tables of local_batch x lookups rows
// each (the batch's indices renumbered by compact_lookups). Its DistributedSampler shard as DDP's;
// the dense layers start equal on every rank (one seed, or --init-params). DenseLayers::allreduced
// (DDP's): their gradients are all-reduced and every rank steps them with the run's optimizer;
// DenseLayers::on_root (DataParallel's): rank 0 alone holds their optimizer, sums their gradients
// (a reduce) and steps them, and broadcasts them to every replica before each forward. Where the
// table rows live is the derived path's:
//   fill_rows()     before forward: the batch's rows (lookups()) into the compact tables;
//   exchange_rows() after the dense all-reduce: the compact gradient rows to where they are summed;
//   step_rows(lr)   after the dense optimizer: the tables' optimizer (step_table_row) on the
//                   summed rows;
//   collect_tables  after the last step, on every rank: rank 0's `tables` (else null) receives
//                   every table in full, [tables, rows, dim], for the result's evaluation.
class CompactReplicaRank : public ModeRank {
 public:
  enum class DenseLayers { allreduced, on_root };
  explicit CompactReplicaRank(const RankSetup& setup, DenseLayers dense = DenseLayers::allreduced);

  Model& model() override { return *full_model_; }  // the run's model: its names and sizes
  float* master_params() override { return full_params_.data(); }
  Optimizer& optimizer() override { return optimizer_; }
  std::size_t rows() const override { return local_batch_; }
  std::size_t loaded_rows() const override { return local_batch_; }
  std::size_t loss_rows() const override { return local_batch_; }
  std::vector<std::int64_t> epoch_order(int epoch) override;
  std::size_t probe_floats() override { return n_ - dense_at_; }

  // The batch compacted, the dense layers' broadcast (on_root), fill_rows() (their time the
  // step's exposed communication when they communicate), forward and the loss scaled by
  // 1 / global_batch.
  void forward(const StagedBatch& batch, long step, StepTimer& timer) override;
  void backward(const GradReadyFn& on_grad_ready) override;
  void finish_grad_sync() override;
  void optimizer_step() override;
  // Rank 0's full parameters: collect_tables (every rank) and its dense layers.
  const float* gather_params() override;
  HostWork take_host_work() override { return std::exchange(host_work_, {}); }
  std::vector<CollectiveTiming> take_collective_timings() override { return std::exchange(timings_, {}); }
  // The step losses summed onto rank 0, then gather_params().
  std::vector<double> global_losses(std::vector<double> local) override;

 protected:
  // Returns true when it communicated.
  virtual bool fill_rows() = 0;
  virtual void exchange_rows() = 0;
  virtual void step_rows(float lr) = 0;
  virtual void collect_tables(float* tables) = 0;

  // Rows [begin, end) of table t as the run starts them: --init-params' (the full model's
  // layout) when given, else init_table_rows from the seed. (end - begin) x dim floats into out.
  void initial_table_rows(std::size_t t, std::size_t begin, std::size_t end, float* out) const;
  const CompactTables& lookups() const { return lookups_; }
  // Runs f() and adds its seconds to `into` (host_work_.pull or .push): the row copies and sums
  // between a step's messages, which take_host_work() reports as compute.
  template <typename F>
  void host_work(double& into, F&& f) {
    const auto start = std::chrono::steady_clock::now();
    f();
    into += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Runs the collective f() and, where time_collectives_, notes its kind, floats (this rank's
  // segment for an all-gather) and entry and exit (CollectiveTiming) for the step's record.
  template <typename F>
  void timed(CollectiveKind kind, std::size_t floats, F&& f) {
    if (!time_collectives_) return f();
    time_collective(timings_, kind, floats, f);
  }
  // Compact row c of table t in the replica's parameters or gradients.
  float* compact_param(std::size_t t, std::size_t c) { return params_.data() + (t * cap_ + c) * full_.dim; }
  const float* compact_grad(std::size_t t, std::size_t c) const { return grads_.data() + (t * cap_ + c) * full_.dim; }

  RankSetup s_;
  HostWork host_work_;                     // this step's, so far
  bool time_collectives_ = false;          // the derived path times its step's collectives
  std::vector<CollectiveTiming> timings_;  // this step's, so far
  int p_, rank_;
  std::size_t local_batch_;
  DlrmShape full_;  // the run's shape
  DenseLayers dense_;

 private:
  std::size_t cap_;                    // compact rows per table: local_batch x lookups
  TrainConfig compact_config_;         // the run's, its tables cut to cap_ rows
  std::unique_ptr<Model> full_model_;  // never computed with
  std::unique_ptr<Model> model_;       // the compact replica
  std::size_t n_, dense_at_;           // the replica's floats; where its dense layers start
  Array<float> params_, grads_, logits_, dlogits_, x_;
  Optimizer optimizer_;  // the dense layers'
  DistributedSampler sampler_;
  CompactTables lookups_;
  std::vector<float> full_params_;  // rank 0, after the last step
};

}  // namespace dpbench
