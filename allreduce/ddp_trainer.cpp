#include "allreduce/ddp_trainer.hpp"

#include <optional>

#include <fmt/format.h>

#include "allreduce/powersgd.hpp"
#include "allreduce/sparse_allreduce.hpp"
#include "core/hierarchical.hpp"
#include "train/engine_probe.hpp"
#include "train/grad_bucket_sync.hpp"
#include "train/sparse_grad.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& config, const Dataset& train) {
  validate_replicas(config, train);
  validate_sparse_grad(config);
  if (config.allreduce.comm_hook != CommHook{} && config.device != DeviceKind::cpu) {
    throw InputError(fmt::format("--comm-hook {}: packs and adds on the host; run it with --device cpu, not {}",
                                 hook_name(config.allreduce.comm_hook), config.device));
  }
  if (config.allreduce.comm_hook.powersgd_rank > 0) {
    if (config.allreduce.start_powersgd_iter < 2) {
      throw InputError(fmt::format("--start-powersgd-iter {}: must be at least 2 (PyTorch's PowerSGDState with error "
                                   "feedback and warm start)",
                                   config.allreduce.start_powersgd_iter));
    }
    if (config.checkpoint.every > 0 || config.checkpoint.resume) {
      throw InputError(fmt::format("--comm-hook {}: checkpoints do not hold PowerSGD's error feedback and Q matrices; "
                                   "run it without --checkpoint-every and --resume",
                                   hook_name(config.allreduce.comm_hook)));
    }
  }
  validate_node_hierarchy(config);
}

namespace {

// DDP: every bucket all-reduced as soon as backward readies it, then the same optimizer step on
// every replica.
class AllreduceRank final : public ReplicaRank {
 public:
  std::vector<CollectiveKind> probed_collectives() const override { return allreduce_probed_collectives(s_.config); }
  explicit AllreduceRank(const RankSetup& s)
      : ReplicaRank(s), optimizer_(s.ctx, s.config, 0, n_), grad_sync_(s.ctx, buckets_.size()) {
    if (const int rank = s.config.allreduce.comm_hook.powersgd_rank; rank > 0) {
      powersgd_.emplace(model_->params(), buckets_, rank, s.config.seed, how_.ranks_per_node);
    }
  }

  // Every replica's optimizer state equals rank 0's, so rank 0's checkpoint holds it for all.
  Optimizer& optimizer() override { return optimizer_; }
  CommStream* comm_thread() override { return grad_sync_.thread(); }

  void forward(const StagedBatch& batch, long step, StepTimer& timer) override {
    step_ = step;
    ReplicaRank::forward(batch, step, timer);
  }

  void start_grad_sync(std::size_t b) override {
    float* grads = grads_.data() + buckets_[b].offset;
    const std::size_t n = buckets_[b].size;
    if (powersgd_ && step_ >= s_.config.allreduce.start_powersgd_iter) {
      grad_sync_.start(b, [this, b, grads](Communicator& comm, bool) { powersgd_->reduce(comm, b, grads); });
      return;
    }
    if (how_.ranks_per_node == 0) {
      grad_sync_.start(b, grads, n);
      return;
    }
    // Blocking on every backend: on the communication thread where there is one, else here;
    // timed for the in-run simulation's calibration (read after the join).
    grad_sync_.start(b, [this, grads, n](Communicator& comm, bool) {
      time_collective(timings_, CollectiveKind::allreduce, n,
                      [&] { hierarchical_allreduce_sum(comm, grads, n, how_.ranks_per_node, scratch_, how_.format); });
    });
  }
  // Under PowerSGD, the mean size of the all-reduces of a compressed step.
  std::size_t probe_floats() override {
    if (!powersgd_) return model_->num_params();
    std::size_t floats = 0, count = 0;
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const PowerSgdMessages m = powersgd_messages(powersgd_->tensors(b));
      for (const std::size_t n : {m.uncompressed, m.p, m.q}) {
        floats += n;
        count += n > 0 ? 1 : 0;
      }
    }
    return count > 0 ? floats / count : model_->num_params();
  }
  void progress() override { grad_sync_.progress(); }
  void finish_grad_sync() override { grad_sync_.join(); }
  void optimizer_step() override { optimizer_.step(params_.data(), grads_.data()); }
  void finish_step() override { grad_sync_.finish_step(); }
  // PowerSGD's own work on the communication thread (its matrix products and orthogonalisation),
  // which the step's timer laid in the exposed communication: as compute, with the optimizer's.
  HostWork take_host_work() override { return {0.0, powersgd_ ? powersgd_->take_compute_s() : 0.0}; }
  // PowerSGD's all-reduces, or the project's rings' (--hierarchy node, --comm-hook fp16/bf16), as
  // they were timed: the in-run simulation's calibration. (DDP's own all-reduces are not timed.)
  std::vector<CollectiveTiming> take_collective_timings() override {
    return powersgd_ ? powersgd_->take_timings() : std::exchange(timings_, {});
  }

 private:
  Optimizer optimizer_;
  GradBucketSync grad_sync_;
  // --hierarchy node and --comm-hook: core/hierarchical.hpp's rings; else the backend's own.
  BucketAllreduce how_ = bucket_allreduce(s_.config);
  std::vector<float> scratch_;             // one received chunk of those rings
  std::optional<PowerSgdHook> powersgd_;   // --comm-hook powersgd:R
  long step_ = 0;                          // the step being run
  std::vector<CollectiveTiming> timings_;  // the node hierarchy's all-reduces this step, in order
};

}  // namespace

std::vector<CollectiveKind> allreduce_probed_collectives(const TrainConfig& config) {
  std::vector<CollectiveKind> kinds(config.model.dlrm.sparse_grad ? 1 + kSparseProbeRounds / 2 : 1,
                                    CollectiveKind::allgather);
  kinds.front() = CollectiveKind::allreduce;
  return kinds;
}

std::vector<ScheduleBucket> ddp_schedule_buckets(const Model& model, const TrainConfig& config) {
  std::vector<ScheduleBucket> out = model_schedule_buckets(model, config);
  const int powersgd = config.allreduce.comm_hook.powersgd_rank;
  if (powersgd == 0) return out;
  const std::vector<Bucket> buckets = assign_buckets(model.params(), sizeof(float), config.allreduce.first_bucket_mb,
                                                     config.allreduce.bucket_cap_mb, model.grad_ready_order());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const PowerSgdMessages m = powersgd_messages(powersgd_tensors(model.params(), buckets[i], powersgd));
    out[i].allreduces = {m.uncompressed, m.p, m.q};
  }
  return out;
}

RunResult train_allreduce(const TrainConfig& config, const TrainData& data) {
  validate_allreduce(config, *data.train);
  if (config.model.dlrm.sparse_grad) return run_step_loop(config, data, make_sparse_allreduce_rank);
  return run_step_loop(config, data, [](const RankSetup& s) { return std::make_unique<AllreduceRank>(s); });
}

}  // namespace dpbench
