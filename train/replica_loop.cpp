#include "train/replica_loop.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.hpp"
#include "train/batchnorm_sync.hpp"
#include "train/models.hpp"
#include "train/progress.hpp"

namespace dpbench {

void validate_replicas(const TrainConfig& cfg, const Dataset& train) {
  validate_config(cfg, train);
  if (cfg.rank_batches.empty() && cfg.global_batch % static_cast<std::size_t>(cfg.world_size) != 0) {
    throw InputError(fmt::format(
        "--batch-size {}: not divisible by --ranks {} ({} mode gives every rank "
        "global_batch / world_size samples)",
        cfg.global_batch, cfg.world_size, cfg.mode));
  }
  if (!(cfg.bucket_cap_mb > 0)) {
    throw InputError(fmt::format("--bucket-cap-mb {}: must be positive", cfg.bucket_cap_mb));
  }
  if (!(cfg.first_bucket_mb > 0)) {
    throw InputError(fmt::format("--first-bucket-mb {}: must be positive", cfg.first_bucket_mb));
  }
}

std::vector<std::int64_t> ddp_epoch_indices(const TrainConfig& cfg, const Dataset& train,
                                            DistributedSampler& sampler, int epoch,
                                            std::size_t offset_in_batch, std::size_t local_batch, long spe) {
  if (cfg.rank_batches.empty()) {
    sampler.set_epoch(epoch);
    std::vector<std::int64_t> indices = sampler.indices();
    indices.resize(static_cast<std::size_t>(spe) * local_batch);
    return indices;
  }
  // Uneven split: the data is partitioned in proportion to the rank batches, rank r taking its
  // slice of every global batch, so the ranks together see the 1-rank run's batches.
  return proportional_shard(shuffled_indices(train.size(), cfg.seed + static_cast<std::uint64_t>(epoch)),
                            cfg.global_batch, offset_in_batch, local_batch, spe);
}

RunResult train_replicas(const TrainConfig& cfg, const TrainData& data, const MakeReplicaSync& make_sync) {
  const Dataset& train = *data.train;
  const auto p = static_cast<std::size_t>(cfg.world_size);
  // Every rank's batch: even, or the uneven split of --rank-batch.
  const std::vector<std::size_t> batches =
      cfg.rank_batches.empty() ? std::vector<std::size_t>(p, cfg.global_batch / p) : cfg.rank_batches;
  const long spe = steps_per_epoch(cfg, train);
  const long total = total_steps(cfg, train);
  const auto classes = static_cast<std::size_t>(train.num_classes());
  const std::size_t features = train.shape().features();

  RunResult result;
  result.config = cfg;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(p);
  std::vector<long> steps_in_epoch(static_cast<std::size_t>(cfg.epochs), 0);

  run_rank_contexts(cfg, result.ranks, [&](RankContext& ctx) {
    const int rank = ctx.rank();
    Communicator& comm = ctx.comm();
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    const std::size_t local_batch = batches[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = local_batch;

    auto model = ctx.make_model(cfg, train.shape(), classes, local_batch);
    const std::size_t n = model->num_params();
    Array<float> params(ctx, MemoryCategory::parameters, n);
    Array<float> grads(ctx, MemoryCategory::gradients, n);
    Array<float> logits(ctx, MemoryCategory::activations, local_batch * classes);
    Array<float> dlogits(ctx, MemoryCategory::activations, local_batch * classes);
    const std::unique_ptr<BatchStaging> staging = ctx.make_staging(local_batch, features, cfg.loader.pin_memory);

    // Same initial parameters everywhere: initialised on rank 0, broadcast (as DDP's constructor).
    if (rank == 0) {
      const std::vector<float> initial = initial_parameters(*model, cfg);
      ctx.upload(params.data(), initial.data(), n);
    }
    const std::size_t num_buffers = model->num_buffers();

    // Buckets are communicated as their gradients become ready, overlapping the rest of
    // backward (the reducer's communication hook); the optimizer waits for all of them.
    const std::vector<Bucket> buckets =
        assign_buckets(model->params(), sizeof(float), cfg.first_bucket_mb, cfg.bucket_cap_mb);
    const std::unique_ptr<ReplicaSync> sync = make_sync({cfg, ctx, params.data(), grads.data(), n, buckets});
    // --resume: rank 0's parameters and buffers, every rank's momentum, from the checkpoint.
    Checkpointer checkpoints(cfg, ctx, n, spe, sync->checkpoint_writers());
    const OptimizerShard optimizer = sync->optimizer().shard();
    const long start = checkpoints.restore(params.data(), model->buffers(), num_buffers, optimizer);
    sync->optimizer().resume_at(start);
    if (rank == 0) {
      result.resumed_from_step = start > 0 ? start : -1;
      for (long s = 0; s < start && s / spe < cfg.epochs; ++s) ++steps_in_epoch[static_cast<std::size_t>(s / spe)];
    }
    ctx.before_first_collective();
    comm.broadcast(params.data(), n, 0);
    const std::unique_ptr<StepTimer> timer = ctx.make_step_timer();
    StepTimer::Mark first_ready = 0;
    BucketLauncher launcher(buckets, model->params().size(), [&](std::size_t b) {
      if (b == 0) first_ready = timer->note();
      sync->bucket_ready(b);
    });
    auto on_grad_ready = [&](std::size_t param) {
      launcher.mark_ready(param);
      sync->progress();
    };
    // SyncBatchNorm's collectives run in order with the buckets: on the same stream.
    CommBatchNormSync bn_sync(comm, sync->thread());
    if (cfg.sync_bn) model->set_batchnorm_sync(&bn_sync);

    DistributedSampler sampler(train.size(), cfg.world_size, rank, /*shuffle=*/true, cfg.seed);
    DataLoaderOptions loader_options = cfg.loader;
    loader_options.seed = cfg.seed;  // augmentation: from (seed, epoch, sample) only
    DataLoader loader(train, local_batch, loader_options, ctx.host_tracker());
    std::size_t offset_in_batch = 0;  // uneven split: this rank's slice of every global batch
    for (int r = 0; r < rank; ++r) offset_in_batch += batches[static_cast<std::size_t>(r)];
    const float grad_scale = 1.0f / static_cast<float>(cfg.global_batch);
    ProgressMeter progress(cfg, total, local_batch);
    progress.resume_at(start);
    CommStats timed_start = comm.stats();
    ctx.mark_timed_start();
    const int first_epoch = static_cast<int>(start / spe);
    long step = start;
    for (int epoch = first_epoch; epoch < cfg.epochs && step < total; ++epoch) {
      // Resumed mid-epoch: the epoch's order is rebuilt from (seed, epoch) and the batches
      // already trained on are skipped.
      const long skip = epoch == first_epoch ? start % spe : 0;
      std::vector<std::int64_t> indices = ddp_epoch_indices(cfg, train, sampler, epoch, offset_in_batch, local_batch, spe);
      indices.erase(indices.begin(), indices.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(skip) * local_batch));
      loader.start_epoch(std::move(indices), epoch);
      for (long s = skip; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) {
          timed_start = comm.stats();
          ctx.mark_timed_start();
        }
        maybe_inject_fault(rank, step);
        timer->begin();
        maybe_delay_step(cfg.mode);
        const Batch& loaded = loader.next();
        const StepTimer::Mark loaded_mark = timer->lap(&PhaseTimes::data_wait);
        // DDP's broadcast_buffers: rank 0's BatchNorm running statistics, every step (blocking,
        // so exposed in full; the previous step's compute has finished).
        double buffer_sync = 0;
        if (num_buffers > 0) {
          comm.broadcast(model->buffers(), num_buffers, 0);
          buffer_sync = timer->seconds(loaded_mark, timer->lap(&PhaseTimes::comm_exposed));
        }
        const StagedBatch batch = staging->stage(loaded, local_batch);
        timer->lap(&PhaseTimes::h2d);

        model->forward(params.data(), batch.inputs, local_batch, logits.data());
        ctx.cross_entropy(logits.data(), batch.labels, local_batch, classes, dlogits.data(), grad_scale, step);
        timer->lap(&PhaseTimes::forward);

        launcher.reset();
        model->backward(params.data(), batch.inputs, dlogits.data(), local_batch, grads.data(), on_grad_ready);
        const StepTimer::Mark backward_end = timer->lap(&PhaseTimes::backward);
        // The buckets still in flight when backward ends: the exposed part of the communication.
        sync->join();
        const StepTimer::Mark joined = timer->lap(&PhaseTimes::comm_exposed);

        sync->step();
        const StepTimer::Mark stepped = timer->lap(&PhaseTimes::optimizer);
        double pulled = 0;
        if (sync->pulls()) {
          sync->pull();
          pulled = timer->seconds(stepped, timer->lap(&PhaseTimes::comm_exposed));
        }
        sync->finish_step();
        StepRecord rec = timer->end();
        // Total: from the first bucket being ready (the end of backward when nothing overlaps)
        // to the step going on past the last one, plus the pull. It starts no later than the end
        // of backward, where the exposed part starts, and ends where that ends, so exposed <=
        // total on every step.
        rec.phases.comm = buffer_sync +
                          timer->seconds(sync->overlaps_backward() ? first_ready : backward_end, joined) + pulled;
        if (step >= cfg.warmup_steps) me.steps.push_back(rec);
        if (rank == 0) ++steps_in_epoch[static_cast<std::size_t>(epoch)];
        progress.step_done(ctx, epoch, step);
        checkpoints.maybe_save(step + 1, params.data(), model->buffers(), num_buffers, optimizer, me, timed_start);
      }
    }
    finish_timed_rank(ctx, me, timed_start);

    // Outside the timed steps: the global training loss of every step, and rank 0's evaluation.
    std::vector<double> local_sums = ctx.step_losses(step);
    checkpoints.merge_losses(local_sums);
    Array<float> losses(ctx, MemoryCategory::activations, std::max<std::size_t>(1, local_sums.size()));
    const std::vector<float> host_sums(local_sums.begin(), local_sums.end());
    ctx.upload(losses.data(), host_sums.data(), host_sums.size());
    comm.allreduce_sum(losses.data(), host_sums.size());
    if (rank == 0) {
      std::vector<float> sums(host_sums.size());
      ctx.download(sums.data(), losses.data(), sums.size());
      result.steps_timed = static_cast<long>(me.steps.size());
      finish_result_on_rank(ctx, result, data, *model, params.data(),
                            std::vector<double>(sums.begin(), sums.end()), spe, steps_in_epoch);
    }
  });
  return result;
}

}  // namespace dpbench
