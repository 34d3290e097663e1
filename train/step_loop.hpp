// The one training loop every mode runs (run_step_loop). The loop owns what all modes share:
// the data loader and staging, the epochs and steps, warm-up and timing, the bucket-ready
// callbacks of backward, faults, progress, checkpoints and the run's result. A mode is one
// ModeRank per rank: what the rank holds, and the named verbs of one step, which the loop calls
// in this order:
//
//   replicate()              the parameters (and BatchNorm buffers) the replica computes with
//   forward(batch)           forward and the loss, on this rank's rows
//   backward(on_grad_ready)  backward; with buckets(), start_grad_sync(b) as each bucket is ready
//   finish_grad_sync()       the optimizer's gradients are complete on this rank
//   optimizer_step()         the optimizer on the parameters this rank updates
//   param_sync()             the parameters updated elsewhere come back
//
// the way PyTorch's data_parallel.py reads as scatter / replicate / parallel_apply / gather and
// PyTorch DDP's Reducer as bucket-ready hooks and a wait before the optimizer. With one rank every mode
// runs plain training (PlainRank): forward, backward, optimizer, no communication, as
// DataParallel and DDP do with a single device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/comm_stream.hpp"
#include "train/buckets.hpp"
#include "train/models.hpp"
#include "train/optimizer.hpp"
#include "train/rank_context.hpp"
#include "train/training.hpp"

namespace dpbench {

// Called by backward as parameter `param`'s gradient becomes final (Model::backward's hook).
using GradReadyFn = std::function<void(std::size_t param)>;

// One rank of a mode. Every call comes from the rank's thread.
class ModeRank {
 public:
  virtual ~ModeRank() = default;

  // ---- what the rank holds and loads
  // The model of this rank's replica.
  virtual Model& model() = 0;
  // The parameters checkpoints save and restore and evaluation reads on rank 0 (the master
  // copy of a parameter server, the replica elsewhere); null on a rank that holds none.
  virtual float* master_params() = 0;
  // The optimizer this rank steps with (its state goes into checkpoints).
  virtual Optimizer& optimizer() = 0;
  // Ranks 0..checkpoint_writers()-1 write a checkpoint file each (train/checkpoint.hpp).
  virtual int checkpoint_writers() const { return 1; }
  // Samples this rank computes per step (its RankResult::local_batch).
  virtual std::size_t rows() const = 0;
  // Samples this rank's DataLoader yields per step; 0: the rank loads nothing.
  virtual std::size_t loaded_rows() const = 0;
  // The sample indices this rank loads in `epoch`: steps_per_epoch * loaded_rows() of them.
  virtual std::vector<std::int64_t> epoch_order(int epoch) = 0;
  // Samples behind rank 0's recorded loss per step (the progress line's mean).
  virtual std::size_t loss_rows() const = 0;
  // Gradient buckets in the order backward readies them; empty: no gradient sync overlaps
  // backward.
  virtual const std::vector<Bucket>& buckets() const;
  // The communication thread SyncBatchNorm's collectives share with the buckets; null when the
  // backend orders its own operations.
  virtual CommStream* comm_thread() { return nullptr; }
  // The floats of a typical collective of the step, for the engine probe: the gradient's, unless
  // the mode's gradient sync sends smaller messages (a compressing hook).
  virtual std::size_t probe_floats() { return model().num_params(); }
  // The engine probe's size for `kind` (train/engine_probe.hpp), all of the ranks' floats
  // together: what the step moves in that collective; probe_floats() unless a mode's step moves
  // something else in it (ps's scatter and gather move the batch and its logits).
  virtual std::size_t probe_floats_of(CollectiveKind) { return probe_floats(); }
  // The collectives of its engine the step runs, which the engine probe times on an emulated
  // cluster (train/engine_probe.hpp; p2p: pairwise sendrecv rounds); empty: none.
  virtual std::vector<CollectiveKind> probed_collectives() const { return {}; }
  // The segments of `kind` (a v-collective) as the step meets them ([world_size], summing to
  // probe_floats_of(kind)); empty: even ones.
  virtual std::vector<std::size_t> probe_counts_of(CollectiveKind) { return {}; }
  // Before the first step, after a checkpoint was restored: every replica starts equal.
  virtual void start() {}

  // ---- the verbs of one step
  virtual void replicate() {}
  // `batch` holds loaded_rows() samples (nothing when 0). `timer` is the step's: a mode that
  // communicates inside forward laps PhaseTimes::comm_exposed around it.
  virtual void forward(const StagedBatch& batch, long step, StepTimer& timer) = 0;
  virtual void backward(const GradReadyFn& on_grad_ready) = 0;
  virtual void start_grad_sync(std::size_t /*bucket*/) {}
  // Between gradients during backward: lets started nonblocking operations advance.
  virtual void progress() {}
  virtual void finish_grad_sync() {}
  virtual void optimizer_step() = 0;
  // True when param_sync() communicates.
  virtual bool syncs_params() const { return false; }
  virtual void param_sync() {}
  // After the step's compute has used the buffers: the backend's bookkeeping.
  virtual void finish_step() {}

  // Per step (every step, warm-up included): how many versions older than the step the
  // parameters it computed on were (sharded_ps --staleness); empty for a synchronous mode.
  virtual std::vector<int> step_staleness() const { return {}; }

  // The host work (copying and summing table rows, PowerSGD's matrix products; not waiting)
  // inside the last step's communicating verbs, which its timer laid in comm_exposed: `pull`
  // within forward's exchange, `push` within finish_grad_sync's. The loop moves them to forward and optimizer, as compute
  // (what the in-run simulation plays as such). Seconds; the call resets them.
  struct HostWork {
    double pull = 0, push = 0;
  };
  virtual HostWork take_host_work() { return {}; }
  // The last step's collectives as this rank timed them, in the order it ran them (a mode that
  // times none: empty); the call resets them. The loop keeps them in the step's record.
  virtual std::vector<CollectiveTiming> take_collective_timings() { return {}; }

  // Between steps, on every rank (--test-freq): rank 0's full parameters (model().num_params()
  // floats, rank-device memory) as the last step left them, for an evaluation; a mode whose
  // parameters are spread over ranks gathers them (collective). Other ranks' value is unused.
  virtual const float* gather_params() { return master_params(); }

  // After the last step, on every rank: the training loss sums of every step over the global
  // batch, from this rank's (`local`); only rank 0's return value is used.
  virtual std::vector<double> global_losses(std::vector<double> local) { return local; }
};

// What a mode's ranks are built from. `data.train` and `config` outlive the rank.
struct RankSetup {
  const TrainConfig& config;
  RankContext& ctx;
  const Dataset& train;
  long steps_per_epoch;
};
using MakeModeRank = std::function<std::unique_ptr<ModeRank>(const RankSetup&)>;

// The order a rank that loads the whole global batch reads in `epoch` (DataParallel's loader,
// and DistributedSampler's at world_size 1): the (seed + epoch) shuffle cut to whole steps,
// setup.steps_per_epoch * config.global_batch indices.
std::vector<std::int64_t> global_batch_order(const RankSetup& setup, int epoch);

// Plain single-replica training on one rank: the whole batch, forward, backward, the optimizer,
// no communication. What every mode runs at world_size 1.
std::unique_ptr<ModeRank> make_plain_rank(const RankSetup& setup);

// Runs `config` on config.device with `make_rank`'s ranks (make_plain_rank's at world_size 1).
// The config must have passed the mode's validation. Throws Error if a rank fails.
RunResult run_step_loop(const TrainConfig& config, const TrainData& data, const MakeModeRank& make_rank);

}  // namespace dpbench
