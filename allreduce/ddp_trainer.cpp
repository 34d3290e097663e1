#include "allreduce/ddp_trainer.hpp"

#include "train/grad_reducer.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& cfg, const Dataset& train) { validate_replicas(cfg, train); }

namespace {

// DDP: every bucket all-reduced as it becomes ready, then the same SGD step on every replica.
class AllreduceSync final : public ReplicaSync {
 public:
  explicit AllreduceSync(const ReplicaState& s)
      : s_(s), velocity_(s.ctx, MemoryCategory::optimizer_state, s.n), reducer_(s.ctx, s.buckets.size()) {}
  void bucket_ready(std::size_t b) override {
    reducer_.start(b, s_.grads + s_.buckets[b].offset, s_.buckets[b].size);
  }
  void progress() override { reducer_.progress(); }
  bool overlaps_backward() const override { return true; }
  void join() override { reducer_.join(); }
  void step() override {
    const TrainConfig& c = s_.config;
    s_.ctx.sgd_momentum(s_.params, s_.grads, velocity_.data(), s_.n, c.lr, c.momentum, c.weight_decay);
  }
  void finish_step() override { reducer_.finish_step(); }
  CommStream* thread() override { return reducer_.thread(); }
  // Every replica's momentum equals rank 0's, so rank 0's file holds it for all.
  OptimizerShard optimizer_state() override { return {velocity_.data(), 0, s_.n}; }

 private:
  ReplicaState s_;
  Array<float> velocity_;
  GradReducer reducer_;
};

}  // namespace

RunResult train_allreduce(const TrainConfig& cfg, const TrainData& data) {
  validate_allreduce(cfg, *data.train);
  return train_replicas(cfg, data, [](const ReplicaState& s) { return std::make_unique<AllreduceSync>(s); });
}

}  // namespace dpbench
