#include "allreduce/ddp_trainer.hpp"

#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "allreduce/buckets.hpp"
#include "core/comm_stream.hpp"
#include "core/error.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/distributed_sampler.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {

void validate_allreduce(const TrainConfig& cfg, const Dataset& train) {
  validate_config(cfg, train);
  if (cfg.global_batch % static_cast<std::size_t>(cfg.world_size) != 0) {
    throw InputError(fmt::format(
        "--batch-size {}: not divisible by --ranks {} (allreduce mode gives every rank "
        "global_batch / world_size samples)",
        cfg.global_batch, cfg.world_size));
  }
  if (!(cfg.bucket_cap_mb > 0)) {
    throw InputError(fmt::format("--bucket-cap-mb {}: must be positive", cfg.bucket_cap_mb));
  }
}

RunResult train_allreduce(const TrainConfig& cfg, const TrainData& data) {
  const Dataset& train = *data.train;
  validate_allreduce(cfg, train);
  const auto p = static_cast<std::size_t>(cfg.world_size);
  const std::size_t local_batch = cfg.global_batch / p;
  const long spe = steps_per_epoch(cfg, train);
  const long total = total_steps(cfg, train);
  const std::size_t features = train.shape().features();
  const auto classes = static_cast<std::size_t>(train.num_classes());

  RunResult result;
  result.config = cfg;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(p);
  std::vector<long> steps_in_epoch(static_cast<std::size_t>(cfg.epochs), 0);

  run_ranks(cfg, result.ranks, [&](int rank, Communicator& comm, MemoryTracker& tracker) {
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = local_batch;

    auto model = make_model(cfg.workload, features, cfg.hidden, classes);
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

    DistributedSampler sampler(train.size(), cfg.world_size, rank, /*shuffle=*/true, cfg.seed);
    std::vector<double> loss_sum(static_cast<std::size_t>(cfg.epochs), 0.0);
    const float grad_scale = 1.0f / static_cast<float>(cfg.global_batch);
    CommStats timed_start = comm.stats();
    long step = 0;
    for (int epoch = 0; epoch < cfg.epochs && step < total; ++epoch) {
      sampler.set_epoch(epoch);
      std::vector<std::int64_t> indices = sampler.indices();
      indices.resize(static_cast<std::size_t>(spe) * local_batch);
      DataLoader loader(train, std::move(indices), local_batch, cfg.loader, tracker);
      for (long s = 0; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) timed_start = comm.stats();
        maybe_inject_fault(rank, step);
        PhaseClock clock;
        StepRecord rec;
        const Batch& batch = loader.next();
        rec.phases.data_wait = clock.lap();

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
          rec.phases.comm_exposed = clock.lap();
          // From the first bucket's launch to the last one's completion.
          rec.phases.comm = std::chrono::duration<double>(std::chrono::steady_clock::now() - first_launch).count();
        } else {
          stream->synchronize();
          rec.phases.comm_exposed = clock.lap();
          rec.phases.comm = stream->take_busy_seconds();
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
                    params.data(), n);
    }
  });
  return result;
}

}  // namespace dpbench
