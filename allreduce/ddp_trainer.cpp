#include "allreduce/ddp_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "allreduce/batchnorm_sync.hpp"
#include "allreduce/buckets.hpp"
#include "core/comm_stream.hpp"
#include "core/error.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/distributed_sampler.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& cfg, const Dataset& train) {
  validate_config(cfg, train);
  if (cfg.rank_batches.empty() && cfg.global_batch % static_cast<std::size_t>(cfg.world_size) != 0) {
    throw InputError(fmt::format(
        "--batch-size {}: not divisible by --ranks {} (allreduce mode gives every rank "
        "global_batch / world_size samples)",
        cfg.global_batch, cfg.world_size));
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

RunResult train_allreduce(const TrainConfig& cfg, const TrainData& data) {
  const Dataset& train = *data.train;
  validate_allreduce(cfg, train);
  const auto p = static_cast<std::size_t>(cfg.world_size);
  // Every rank's batch: even, or the uneven split of --rank-batch.
  const std::vector<std::size_t> batches =
      cfg.rank_batches.empty() ? std::vector<std::size_t>(p, cfg.global_batch / p) : cfg.rank_batches;
  const long spe = steps_per_epoch(cfg, train);
  const long total = total_steps(cfg, train);
  const auto classes = static_cast<std::size_t>(train.num_classes());

  RunResult result;
  result.config = cfg;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(p);
  std::vector<long> steps_in_epoch(static_cast<std::size_t>(cfg.epochs), 0);

  run_ranks(cfg, result.ranks, [&](int rank, Communicator& comm, MemoryTracker& tracker) {
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    const std::size_t local_batch = batches[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = local_batch;

    auto model = make_model(cfg, train.shape(), classes);
    model->reserve(local_batch, tracker);
    const std::size_t n = model->num_params();
    TrackedBuffer<float> params(tracker, MemoryCategory::parameters, n);
    TrackedBuffer<float> grads(tracker, MemoryCategory::gradients, n);
    TrackedBuffer<float> velocity(tracker, MemoryCategory::optimizer_state, n);
    TrackedBuffer<float> logits(tracker, MemoryCategory::activations, local_batch * classes);
    TrackedBuffer<float> dlogits(tracker, MemoryCategory::activations, local_batch * classes);

    // Same initial parameters everywhere: initialised on rank 0, broadcast (as DDP's constructor).
    if (rank == 0) model->init_params(params.data(), cfg.seed);
    comm.broadcast(params.data(), n, 0);
    const std::size_t num_buffers = model->num_buffers();

    const std::vector<Bucket> buckets =
        assign_buckets(model->params(), sizeof(float), cfg.first_bucket_mb, cfg.bucket_cap_mb);
    // Buckets overlap the rest of backward: through the backend's own nonblocking all-reduce
    // (MPI_Iallreduce), or else on this rank's communication thread.
    const bool native_async = comm.supports_async();
    std::optional<CommStream> stream;
    if (!native_async) stream.emplace();
    std::chrono::steady_clock::time_point first_launch;
    BucketLauncher launcher(buckets, model->params().size(), [&](std::size_t b) {
      float* range = grads.data() + buckets[b].offset;
      const std::size_t len = buckets[b].size;
      if (native_async) {
        if (b == 0) first_launch = std::chrono::steady_clock::now();
        comm.allreduce_sum_start(range, len);
      } else {
        stream->enqueue([&comm, range, len] { comm.allreduce_sum(range, len); });
      }
    });
    auto on_grad_ready = [&](std::size_t param) {
      launcher.mark_ready(param);
      if (native_async) comm.progress();
    };
    // SyncBatchNorm's collectives run in order with the buckets: on the same stream.
    CommBatchNormSync bn_sync(comm, stream ? &*stream : nullptr);
    if (cfg.sync_bn) model->set_batchnorm_sync(&bn_sync);

    DistributedSampler sampler(train.size(), cfg.world_size, rank, /*shuffle=*/true, cfg.seed);
    DataLoaderOptions loader_options = cfg.loader;
    loader_options.seed = cfg.seed;  // augmentation: from (seed, epoch, sample) only
    DataLoader loader(train, local_batch, loader_options, tracker);
    std::size_t offset_in_batch = 0;  // uneven split: this rank's slice of every global batch
    for (int r = 0; r < rank; ++r) offset_in_batch += batches[static_cast<std::size_t>(r)];
    std::vector<double> loss_sum(static_cast<std::size_t>(cfg.epochs), 0.0);
    const float grad_scale = 1.0f / static_cast<float>(cfg.global_batch);
    CommStats timed_start = comm.stats();
    long step = 0;
    for (int epoch = 0; epoch < cfg.epochs && step < total; ++epoch) {
      loader.start_epoch(ddp_epoch_indices(cfg, train, sampler, epoch, offset_in_batch, local_batch, spe), epoch);
      for (long s = 0; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) timed_start = comm.stats();
        maybe_inject_fault(rank, step);
        PhaseClock clock;
        StepRecord rec;
        const Batch& batch = loader.next();
        rec.phases.data_wait = clock.lap();
        // DDP's broadcast_buffers: rank 0's BatchNorm running statistics, every step (blocking).
        double buffer_sync = 0;
        if (num_buffers > 0) {
          comm.broadcast(model->buffers(), num_buffers, 0);
          buffer_sync = clock.lap();
        }

        model->forward(params.data(), batch.inputs.data(), local_batch, logits.data());
        loss_sum[static_cast<std::size_t>(epoch)] += cpu::softmax_cross_entropy(
            logits.data(), batch.labels.data(), local_batch, classes, dlogits.data(), grad_scale);
        rec.phases.forward = clock.lap();

        launcher.reset();
        model->backward(params.data(), batch.inputs.data(), dlogits.data(), local_batch,
                        grads.data(), on_grad_ready);
        rec.phases.backward = clock.lap();

        // Wait for the buckets still in flight: the exposed part of the communication.
        if (native_async) {
          comm.wait_all();
          rec.phases.comm_exposed = clock.lap() + buffer_sync;
          // From the first bucket's launch to the last one's completion.
          rec.phases.comm = buffer_sync +
              std::chrono::duration<double>(std::chrono::steady_clock::now() - first_launch).count();
        } else {
          stream->synchronize();
          rec.phases.comm_exposed = clock.lap() + buffer_sync;
          rec.phases.comm = buffer_sync + stream->take_busy_seconds();
        }

        cpu::sgd_momentum(params.data(), grads.data(), velocity.data(), n, cfg.lr, cfg.momentum,
                          cfg.weight_decay);
        rec.phases.optimizer = clock.lap();
        rec.step_time = rec.phases.data_wait + rec.phases.forward + rec.phases.backward +
                        rec.phases.comm_exposed + rec.phases.optimizer;
        if (step >= cfg.warmup_steps) me.steps.push_back(rec);
        if (rank == 0) ++steps_in_epoch[static_cast<std::size_t>(epoch)];
      }
    }
    const CommStats end = comm.stats();
    finish_rank(me, {end.bytes_sent - timed_start.bytes_sent,
                     end.bytes_received - timed_start.bytes_received},
                static_cast<long>(me.steps.size()), tracker);

    // Outside the timed steps: the global training loss per epoch, and rank 0's evaluation.
    std::vector<float> losses(loss_sum.begin(), loss_sum.end());
    comm.allreduce_sum(losses.data(), losses.size());
    if (rank == 0) {
      result.steps_timed = static_cast<long>(me.steps.size());
      finish_result(result, data, std::vector<double>(losses.begin(), losses.end()), steps_in_epoch,
                    params.data(), n, model->buffers(), model->num_buffers());
    }
  });
  return result;
}

}  // namespace dpbench
