#include "allreduce/ddp_trainer.hpp"

#include "train/grad_reducer.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& cfg, const Dataset& train) { validate_replicas(cfg, train); }

namespace {

// DDP: every bucket all-reduced as it becomes ready, then the same optimizer step on every replica.
class AllreduceSync final : public ReplicaSync {
 public:
  explicit AllreduceSync(const ReplicaState& s)
      : s_(s), optimizer_(s.ctx, s.config, 0, s.n), reducer_(s.ctx, s.buckets.size()) {}
  void bucket_ready(std::size_t b) override {
    reducer_.start(b, s_.grads + s_.buckets[b].offset, s_.buckets[b].size);
  }
  void progress() override { reducer_.progress(); }
  bool overlaps_backward() const override { return true; }
  void join() override { reducer_.join(); }
  void step() override { optimizer_.step(s_.params, s_.grads); }
  void finish_step() override { reducer_.finish_step(); }
  CommStream* thread() override { return reducer_.thread(); }
  // Every replica's optimizer state equals rank 0's, so rank 0's file holds it for all.
  Optimizer& optimizer() override { return optimizer_; }

 private:
  ReplicaState s_;
  Optimizer optimizer_;
  GradReducer reducer_;
};

}  // namespace

RunResult train_allreduce(const TrainConfig& cfg, const TrainData& data) {
  validate_allreduce(cfg, *data.train);
  return train_replicas(cfg, data, [](const ReplicaState& s) { return std::make_unique<AllreduceSync>(s); });
}

}  // namespace dpbench
