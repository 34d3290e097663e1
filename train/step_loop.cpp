#include "train/step_loop.hpp"

#include <algorithm>
#include <map>
#include <chrono>

#include "core/net_interface.hpp"
#include "train/batchnorm_sync.hpp"
#include "train/checkpoint.hpp"
#include "train/engine_probe.hpp"
#include "train/progress.hpp"
#include "workloads/distributed_sampler.hpp"

namespace dpbench {

std::vector<std::int64_t> global_batch_order(const RankSetup& s, int epoch) {
  std::vector<std::int64_t> order = shuffled_indices(s.train.size(), s.config.seed + static_cast<std::uint64_t>(epoch));
  order.resize(static_cast<std::size_t>(s.steps_per_epoch) * s.config.global_batch);
  return order;
}

const std::vector<Bucket>& ModeRank::buckets() const {
  static const std::vector<Bucket> none;
  return none;
}

namespace {

// One replica on one rank computing the whole global batch: DataParallel or DDP with a single
// device, which call the module and step the optimizer with nothing to synchronise.
class PlainRank final : public ModeRank {
 public:
  explicit PlainRank(const RankSetup& s)
      : s_(s),
        rows_(s.config.global_batch),
        classes_(static_cast<std::size_t>(s.train.num_classes())),
        model_(s.ctx.make_model(s.config, s.train.shape(), classes_, rows_)),
        params_(s.ctx, MemoryCategory::parameters, model_->num_params()),
        grads_(s.ctx, MemoryCategory::gradients, model_->num_params()),
        logits_(s.ctx, MemoryCategory::activations, rows_ * classes_),
        dlogits_(s.ctx, MemoryCategory::activations, rows_ * classes_),
        optimizer_(s.ctx, s.config, 0, model_->num_params()) {
    const std::vector<float> initial = initial_parameters(*model_, s.config);
    s.ctx.upload(params_.data(), initial.data(), initial.size());
  }

  Model& model() override { return *model_; }
  float* master_params() override { return params_.data(); }
  Optimizer& optimizer() override { return optimizer_; }
  std::size_t rows() const override { return rows_; }
  std::size_t loaded_rows() const override { return rows_; }
  std::size_t loss_rows() const override { return rows_; }
  std::vector<std::int64_t> epoch_order(int epoch) override { return global_batch_order(s_, epoch); }

  void forward(const StagedBatch& batch, long step, StepTimer&) override {
    inputs_ = batch.inputs;
    model_->forward(params_.data(), inputs_, rows_, logits_.data());
    s_.ctx.cross_entropy(logits_.data(), batch.labels, rows_, classes_, dlogits_.data(),
                         1.0f / static_cast<float>(rows_), step);
  }
  void backward(const GradReadyFn&) override {
    model_->backward(params_.data(), inputs_, dlogits_.data(), rows_, grads_.data(), nullptr);
    s_.ctx.synchronize();
  }
  void optimizer_step() override { optimizer_.step(params_.data(), grads_.data()); }

 private:
  RankSetup s_;
  std::size_t rows_;
  std::size_t classes_;
  std::unique_ptr<Model> model_;
  Array<float> params_, grads_, logits_, dlogits_;
  Optimizer optimizer_;
  const float* inputs_ = nullptr;  // this step's staged inputs, from forward to backward
};

// The loop's state on one rank, from the first step to the result.
class RankLoop {
 public:
  RankLoop(const RankSetup& s, ModeRank& mode, RunResult& result, long total)
      : s_(s),
        mode_(mode),
        result_(result),
        me_(result.ranks[static_cast<std::size_t>(s.ctx.rank())]),
        total_(total),
        checkpoints_(s.config, s.ctx, mode.model().num_params(), s.steps_per_epoch, mode.checkpoint_writers()),
        progress_(s.config, total, mode.loss_rows()),
        steps_in_epoch_(static_cast<std::size_t>(s.config.run.epochs), 0),
        launcher_(
            mode.buckets(), mode.model().params().size(),
            [this](std::size_t b) {
    if (b == 0) first_ready_ = timer_->note();
    mode_.start_grad_sync(b);
            }),
  bn_sync_(s.ctx.comm(), mode.comm_thread()) {
    // Backward's hook, when the mode has buckets: count the gradient, launch ready buckets.
    if (!mode.buckets().empty()) {
      on_grad_ready_ = [this](std::size_t param) {
        launcher_.mark_ready(param);
        mode_.progress();
      };
    }
    me_.rank = s.ctx.rank();
    me_.local_batch = mode.rows();
    if (mode.loaded_rows() > 0) {
      // augmentation: from (seed, epoch, sample) only
      loader_ = std::make_unique<DataLoader>(s.train, mode.loaded_rows(), s.config.loader, s.config.seed,
                                             s.ctx.host_tracker());
      staging_ = s.ctx.make_staging(mode.loaded_rows(), s.train.shape().features(), s.config.loader.pin_memory);
    }
    if (s.config.model.sync_bn) mode.model().set_batchnorm_sync(&bn_sync_);
  }

  // A mode's segments for the probe, scaled down in proportion to at most kMaxProbeFloats
  // together; empty (even segments) when the mode has none or they hold fewer than a float per rank.
  static std::vector<std::size_t> probe_segments(std::vector<std::size_t> counts, std::size_t p) {
    std::size_t sum = 0;
    for (std::size_t c : counts) sum += c;
    if (counts.size() != p || sum == 0) return {};
    if (sum > kMaxProbeFloats) {
      const double scale = static_cast<double>(kMaxProbeFloats) / static_cast<double>(sum);
      sum = 0;
      for (std::size_t& c : counts) sum += c = static_cast<std::size_t>(static_cast<double>(c) * scale);
    }
    return sum >= p ? counts : std::vector<std::size_t>{};
  }

  // On an emulated cluster, every rank runs the collectives of the mode's schedule back to back
  // before the first step (train/engine_probe.hpp: each at ModeRank::probe_floats_of, at most
  // kMaxProbeFloats, after 0.3 s unmeasured, the mean of 5 repetitions, more on fast links until 0.3 s), then, with two
  // ranks or more per node, local ranks 0 and 1 of every node ping-pong (ModeRank::probe_floats, at
  // most 1 Mi, at least kIntraNodeProbeFloats, 5 repetitions);
  // rank 0 keeps the probe in its result, for the calibrated simulation. Outside the timed steps.
  void probe_engine_on_cluster() {
    Communicator& comm = s_.ctx.comm();
    if (cluster_interface().empty() || comm.world_size() < 2) return;
    const auto kinds = mode_.probed_collectives();
    // Node 0's rank count, as rank 0 has it, so that every rank takes the same probes.
    float node0_ranks = static_cast<float>(s_.config.process.ranks_on_this_node);
    comm.broadcast(&node0_ranks, 1, 0);
    const int per_node = static_cast<int>(node0_ranks);
    if (kinds.empty() && per_node < 2) return;
    const auto p = static_cast<std::size_t>(comm.world_size());
    const std::size_t floats = std::max<std::size_t>(p,
                                                     std::min<std::size_t>(mode_.probe_floats(), std::size_t{1} << 20));
    std::vector<std::size_t> sizes;
    std::vector<std::vector<std::size_t>> segments;
    std::map<CollectiveKind, int> seen;  // a kind's entries so far
    for (CollectiveKind kind : kinds) {
      segments.push_back(probe_segments(mode_.probe_counts_of(kind), p));
      std::size_t sum = 0;
      for (std::size_t c : segments.back()) sum += c;
      sizes.push_back(segments.back().empty() ? std::clamp(mode_.probe_floats_of(kind), p, kMaxProbeFloats) : sum);
      const bool sparse = s_.config.model.dlrm.sparse_grad;
      const auto of_kind = static_cast<int>(std::count(kinds.begin(), kinds.end(), kind));
      if (sparse && segments.back().empty() && probed_per_message(kind, sparse) && 2 * seen[kind]++ >= of_kind)
        sizes.back() = std::min(sizes.back() * kLargeProbeFactor, kMaxProbeFloats);
    }
    std::optional<EngineProbe> probe;
    if (!kinds.empty()) {
      probe = probe_engine(comm, kinds, sizes, 5, 0.3, bucket_allreduce(s_.config).ranks_per_node,
                           bucket_allreduce(s_.config).format, segments);
    }
    auto intra = probe_intra_node(comm, per_node, std::max<std::size_t>(floats, kIntraNodeProbeFloats), 5);
    if (comm.rank() == 0) {
      if (!probe) probe = EngineProbe{};
      probe->intra_node = intra;
      probe->reduction = probe_reduction(default_reduction_sizes(), kReductionProbeRepetitions);
      result_.engine_probe = std::move(probe);
    }
  }

  // Restores --resume's checkpoint, then trains every step left (evaluating `data.test` every
  // --test-freq steps).
  void train(const TrainData& data) {
    Model& model = mode_.model();
    const long start = checkpoints_.restore(mode_.master_params(), model.buffers(), model.num_buffers(),
                                            mode_.optimizer().shard());
    mode_.optimizer().resume_at(start);
    if (s_.ctx.rank() == 0) result_.resumed_from_step = start > 0 ? start : -1;
    const long spe = s_.steps_per_epoch;
    for (long s = 0; s < start && s / spe < s_.config.run.epochs; ++s)
      ++steps_in_epoch_[static_cast<std::size_t>(s / spe)];
    progress_.resume_at(start);
    s_.ctx.before_first_collective();
    probe_engine_on_cluster();
    mode_.start();
    timer_ = s_.ctx.make_step_timer();
    timed_start_ = s_.ctx.comm().stats();
    s_.ctx.mark_timed_start();
    const int first_epoch = static_cast<int>(start / spe);
    step_ = start;
    for (int epoch = first_epoch; epoch < s_.config.run.epochs && step_ < total_; ++epoch) {
      // Resumed mid-epoch: the epoch's order is rebuilt from (seed, epoch) and the batches
      // already trained on are skipped.
      const long skip = epoch == first_epoch ? start % spe : 0;
      start_epoch(epoch, skip);
      for (long s = skip; s < spe && step_ < total_; ++s, ++step_) {
        if (step_ == s_.config.run.warmup_steps) {
          timed_start_ = s_.ctx.comm().stats();
          s_.ctx.mark_timed_start();
        }
        if (step_end_s_.empty()) first_step_start_ = std::chrono::steady_clock::now();
        const StepRecord rec = run_step(s + 1 < spe && step_ + 1 < total_);
        step_end_s_.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - first_step_start_).count());
        if (step_ >= s_.config.run.warmup_steps) me_.steps.push_back(rec);
        ++steps_in_epoch_[static_cast<std::size_t>(epoch)];
        progress_.step_done(s_.ctx, epoch, step_);
        checkpoints_.maybe_save(step_ + 1, mode_.master_params(), model.buffers(), model.num_buffers(),
                                mode_.optimizer().shard(), me_, timed_start_);
        maybe_evaluate(data);
      }
    }
    finish_timed_rank(s_.ctx, me_, timed_start_);
    me_.step_staleness = mode_.step_staleness();
  }

  // Outside the timed steps: the global training loss of every step and rank 0's evaluation.
  void finish(const TrainData& data) {
    std::vector<double> local = s_.ctx.step_losses(step_);
    checkpoints_.merge_losses(local);
    const std::vector<double> sums = mode_.global_losses(std::move(local));
    if (s_.ctx.rank() != 0) return;
    result_.steps_timed = static_cast<long>(me_.steps.size());
    result_.step_end_s = step_end_s_;
    finish_result_on_rank(s_.ctx, result_, data, mode_.model(), mode_.master_params(), sums, s_.steps_per_epoch,
                          steps_in_epoch_);
  }

 private:
  // --test-freq: after every test_freq-th step, rank 0 evaluates the test set on the parameters
  // the mode gathers for it, and the ranks meet at a barrier before the next step. The pause is
  // left out of the run's figures: its seconds (step_end_s, timed_wall_s), the bytes of the
  // gather and the barrier (bytes per step) and its link bytes (wire_per_step).
  void maybe_evaluate(const TrainData& data) {
    const long freq = s_.config.run.test_freq;
    if (freq <= 0 || !s_.config.evaluate || data.test == nullptr || (step_ + 1) % freq != 0) return;
    const RankContext::TimingPause pause = s_.ctx.pause_timing();
    Communicator& comm = s_.ctx.comm();
    const CommStats before = comm.stats();
    const float* params = mode_.gather_params();
    if (s_.ctx.rank() == 0) {
      const TestMetrics m = evaluate_on_rank(s_.ctx, s_.config, *data.test, mode_.model(), params);
      result_.test_curve.push_back({step_ + 1, step_end_s_.back(), m.accuracy, m.auc});
    }
    comm.barrier();
    const CommStats after = comm.stats();
    timed_start_.bytes_sent += after.bytes_sent - before.bytes_sent;
    timed_start_.bytes_received += after.bytes_received - before.bytes_received;
    first_step_start_ += s_.ctx.resume_timing(pause);
  }

  void start_epoch(int epoch, long skip) {
    if (!loader_) return;
    std::vector<std::int64_t> order = mode_.epoch_order(epoch);
    const std::size_t skipped = static_cast<std::size_t>(skip) * mode_.loaded_rows();
    order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(skipped));
    loader_->start_epoch(std::move(order), epoch);
  }

  // One step through the mode's verbs. Every communication that blocks the step is laid in
  // comm_exposed; comm adds the part of the gradient sync that overlapped backward (from the
  // first bucket being ready to the end of backward), so exposed <= total on every step.
  // Where the staging prefetches (GPUs with pin_memory) and `next_in_epoch`, the next step's
  // batch is loaded and its copy started once forward is enqueued; the time the compute stream
  // then waits for the host is data wait.
  StepRecord run_step(bool next_in_epoch) {
    StepTimer& timer = *timer_;
    maybe_inject_fault(s_.ctx.rank(), step_);
    timer.begin();
    maybe_delay_step(s_.config.mode);
    maybe_send_extra_message(s_.config, s_.ctx.comm(), s_.ctx.rank());
    const bool prefetched = prefetched_;
    const Batch* loaded = loader_ && !prefetched ? &loader_->next() : nullptr;
    timer.lap(&PhaseTimes::data_wait);
    mode_.replicate();
    timer.lap(&PhaseTimes::comm_exposed);
    StagedBatch batch;
    if (prefetched) {
      batch = staging_->take_prefetched();
      prefetched_ = false;
    } else if (loaded) {
      batch = staging_->stage(*loaded, mode_.loaded_rows());
    }
    timer.lap(&PhaseTimes::h2d);
    mode_.forward(batch, step_, timer);
    timer.lap(&PhaseTimes::forward);
    if (loader_ && next_in_epoch && staging_->prefetches()) {
      staging_->prefetch(loader_->next(), mode_.loaded_rows());
      prefetched_ = true;
      timer.lap(&PhaseTimes::data_wait);
    }
    launcher_.reset();
    mode_.backward(on_grad_ready_);
    const StepTimer::Mark backward_end = timer.lap(&PhaseTimes::backward);
    mode_.finish_grad_sync();
    timer.lap(&PhaseTimes::comm_exposed);
    mode_.optimizer_step();
    timer.lap(&PhaseTimes::optimizer);
    if (mode_.syncs_params()) {
      mode_.param_sync();
      timer.lap(&PhaseTimes::comm_exposed);
    }
    mode_.finish_step();
    StepRecord rec = timer.end();
    rec.phases.comm = rec.phases.comm_exposed + (on_grad_ready_ ? timer.seconds(first_ready_, backward_end) : 0.0);
    move_host_work(rec.phases, mode_.take_host_work());
    rec.collectives = mode_.take_collective_timings();
    return rec;
  }

  // ModeRank::take_host_work's seconds out of the communication phases, into forward and optimizer.
  static void move_host_work(PhaseTimes& t, const ModeRank::HostWork& w) {
    const double pull = std::min(w.pull, t.comm_exposed), push = std::min(w.push, t.comm_exposed - pull);
    t.forward += pull;
    t.optimizer += push;
    t.comm_exposed -= pull + push;
    t.comm = std::max(0.0, t.comm - pull - push);
  }

  const RankSetup& s_;
  ModeRank& mode_;
  RunResult& result_;
  RankResult& me_;
  long total_;
  Checkpointer checkpoints_;
  ProgressMeter progress_;
  std::vector<long> steps_in_epoch_;  // steps trained per epoch (rank 0's go into the result)
  std::unique_ptr<DataLoader> loader_;
  std::unique_ptr<BatchStaging> staging_;
  std::unique_ptr<StepTimer> timer_;
  StepTimer::Mark first_ready_ = 0;
  bool prefetched_ = false;  // the staging holds the next step's batch (BatchStaging::prefetch)
  BucketLauncher launcher_;
  GradReadyFn on_grad_ready_;  // empty when the mode has no buckets (nothing overlaps backward)
  CommBatchNormSync bn_sync_;
  CommStats timed_start_;
  long step_ = 0;
  std::chrono::steady_clock::time_point first_step_start_;
  std::vector<double> step_end_s_;  // seconds from the first step's start to each step's end
};

}  // namespace

std::unique_ptr<ModeRank> make_plain_rank(const RankSetup& setup) { return std::make_unique<PlainRank>(setup); }

RunResult run_step_loop(const TrainConfig& config, const TrainData& data, const MakeModeRank& make_rank) {
  const Dataset& train = *data.train;
  const long total = total_steps(config, train);
  RunResult result;
  result.config = config;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(static_cast<std::size_t>(config.world_size));
  run_rank_contexts(config, result.ranks, [&](RankContext& ctx) {
    const RankSetup setup{config, ctx, train, steps_per_epoch(config, train)};
    const std::unique_ptr<ModeRank> mode = config.world_size == 1 ? make_plain_rank(setup) : make_rank(setup);
    RankLoop loop(setup, *mode, result, total);
    loop.train(data);
    loop.finish(data);
  });
  return result;
}

}  // namespace dpbench
