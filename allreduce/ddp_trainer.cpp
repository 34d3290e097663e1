#include "allreduce/ddp_trainer.hpp"

#include "train/grad_reducer.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& cfg, const Dataset& train) { validate_replicas(cfg, train); }

namespace {

// DDP: every bucket all-reduced as soon as backward readies it, then the same optimizer step on
// every replica.
class AllreduceRank final : public ReplicaRank {
 public:
  explicit AllreduceRank(const RankSetup& s)
      : ReplicaRank(s), optimizer_(s.ctx, s.config, 0, n_), reducer_(s.ctx, buckets_.size()) {}

  // Every replica's optimizer state equals rank 0's, so rank 0's checkpoint holds it for all.
  Optimizer& optimizer() override { return optimizer_; }
  CommStream* comm_thread() override { return reducer_.thread(); }

  void start_grad_sync(std::size_t b) override {
    reducer_.start(b, grads_.data() + buckets_[b].offset, buckets_[b].size);
  }
  void progress() override { reducer_.progress(); }
  void finish_grad_sync() override { reducer_.join(); }
  void optimizer_step() override { optimizer_.step(params_.data(), grads_.data()); }
  void finish_step() override { reducer_.finish_step(); }

 private:
  Optimizer optimizer_;
  GradReducer reducer_;
};

}  // namespace

RunResult train_allreduce(const TrainConfig& cfg, const TrainData& data) {
  validate_allreduce(cfg, *data.train);
  return run_step_loop(cfg, data, [](const RankSetup& s) { return std::make_unique<AllreduceRank>(s); });
}

}  // namespace dpbench
