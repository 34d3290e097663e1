// The `allreduce` mode on GPUs: the same DDP semantics as ddp_trainer.cpp, on device buffers.
// Each rank computes on its compute stream; a bucket's all-reduce starts on the communication
// stream as soon as its gradients are ready: backward records an event on the compute stream,
// the communication stream waits for it (cudaStreamWaitEvent) and runs the bucket's
// all-reduce, overlapping the rest of backward (DDP's reducer with NCCL's stream). The compute
// stream then waits for the last bucket before the optimizer step. The step breakdown comes
// from CUDA events: comm = first bucket start to last bucket end on the communication stream,
// comm_exposed = end of backward to the compute stream's wait ending.
#include <algorithm>
#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "allreduce/batchnorm_sync.hpp"
#include "allreduce/buckets.hpp"
#include "allreduce/ddp_trainer.hpp"
#include "core/comm_stream.hpp"
#include "core/cuda_training.hpp"
#include "core/error.hpp"
#include "workloads/cuda_model.hpp"
#include "workloads/distributed_sampler.hpp"

namespace dpbench {

RunResult train_allreduce_cuda(const TrainConfig& cfg, const TrainData& data) {
  const Dataset& train = *data.train;
  validate_allreduce(cfg, train);
  const auto p = static_cast<std::size_t>(cfg.world_size);
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

  run_cuda_ranks(cfg, result.ranks, [&](CudaRank& ctx) {
    const int rank = ctx.rank;
    Communicator& comm = *ctx.comm;
    DeviceAllocator& alloc = *ctx.allocator;
    void* compute = ctx.compute->handle();
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    const std::size_t local_batch = batches[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = local_batch;

    auto model = make_cuda_model(cfg, train.shape(), classes, *ctx.blas);
    model->reserve(local_batch, alloc);
    const std::size_t n = model->num_params();
    DeviceBuffer<float> params(alloc, MemoryCategory::parameters, n);
    DeviceBuffer<float> grads(alloc, MemoryCategory::gradients, n);
    DeviceBuffer<float> velocity(alloc, MemoryCategory::optimizer_state, n);
    DeviceBuffer<float> logits(alloc, MemoryCategory::activations, local_batch * classes);
    DeviceBuffer<float> dlogits(alloc, MemoryCategory::activations, local_batch * classes);
    DeviceBuffer<float> step_loss(alloc, MemoryCategory::activations, static_cast<std::size_t>(total));
    DeviceBatch batch_dev(ctx, local_batch, features, cfg.loader.pin_memory);

    // Same initial parameters everywhere: initialised on rank 0, broadcast (DDP's constructor).
    if (rank == 0) {
      std::vector<float> host(n);
      model->init_params(host.data(), cfg.seed);
      params.copy_from_host(host);
    }
    comm.broadcast(params.data(), n, 0);
    const std::size_t num_buffers = model->num_buffers();

    const std::vector<Bucket> buckets =
        assign_buckets(model->params(), sizeof(float), cfg.first_bucket_mb, cfg.bucket_cap_mb);
    std::vector<cuda::Event> bucket_ready(buckets.size());
    cuda::Event comm_start, comm_end;
    // nccl: collectives are enqueued on its stream from this thread. local: they are blocking
    // host calls, so they run on a communication thread that waits for each bucket's event.
    const bool native_async = comm.supports_async();
    std::optional<CommStream> comm_thread;
    if (!native_async) {
      comm_thread.emplace();
      const int device = ctx.device;
      comm_thread->enqueue([device] { cuda::set_device(device); });
    }
    BucketLauncher launcher(buckets, model->params().size(), [&](std::size_t b) {
      float* range = grads.data() + buckets[b].offset;
      const std::size_t len = buckets[b].size;
      bucket_ready[b].record(compute);
      if (native_async) {
        bucket_ready[b].wait_on(ctx.comm_stream);
        if (b == 0) comm_start.record(ctx.comm_stream);
        comm.allreduce_sum_start(range, len);
      } else {
        comm_thread->enqueue([&, b, range, len] {
          bucket_ready[b].synchronize();
          if (b == 0) comm_start.record(ctx.comm_stream);
          comm.allreduce_sum(range, len);
        });
      }
    });
    CommBatchNormSync bn_sync(comm, comm_thread ? &*comm_thread : nullptr);
    if (cfg.sync_bn) model->set_batchnorm_sync(&bn_sync);

    DistributedSampler sampler(train.size(), cfg.world_size, rank, /*shuffle=*/true, cfg.seed);
    DataLoaderOptions loader_options = cfg.loader;
    loader_options.seed = cfg.seed;
    DataLoader loader(train, local_batch, loader_options, *ctx.host_tracker);
    std::size_t offset_in_batch = 0;
    for (int r = 0; r < rank; ++r) offset_in_batch += batches[static_cast<std::size_t>(r)];
    const float grad_scale = 1.0f / static_cast<float>(cfg.global_batch);
    StepTimeline timeline;
    CommStats timed_start = comm.stats();
    long step = 0;
    for (int epoch = 0; epoch < cfg.epochs && step < total; ++epoch) {
      loader.start_epoch(ddp_epoch_indices(cfg, train, sampler, epoch, offset_in_batch, local_batch, spe), epoch);
      for (long s = 0; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) timed_start = comm.stats();
        maybe_inject_fault(rank, step);
        const auto t0 = std::chrono::steady_clock::now();
        PhaseClock clock;
        StepRecord rec;
        const Batch& batch = loader.next();
        rec.phases.data_wait = clock.lap();
        // DDP's broadcast_buffers: rank 0's BatchNorm running statistics (blocking; the previous
        // step's compute stream has finished).
        double buffer_sync = 0;
        if (num_buffers > 0) {
          comm.broadcast(model->buffers(), num_buffers, 0);
          buffer_sync = clock.lap();
        }

        timeline.mark(StepTimeline::start, compute);
        batch_dev.upload(batch, local_batch, compute);
        timeline.mark(StepTimeline::h2d, compute);
        model->forward(params.data(), batch_dev.inputs(), local_batch, logits.data());
        cuda::softmax_cross_entropy(logits.data(), batch_dev.labels(), local_batch, classes, dlogits.data(),
                                    grad_scale, step_loss.data() + step, compute);
        timeline.mark(StepTimeline::forward, compute);

        launcher.reset();
        model->backward(params.data(), batch_dev.inputs(), dlogits.data(), local_batch, grads.data(),
                        [&](std::size_t param) { launcher.mark_ready(param); });
        timeline.mark(StepTimeline::backward, compute);
        if (native_async) {
          comm_end.record(ctx.comm_stream);
        } else {
          comm_thread->enqueue([&] { comm_end.record(ctx.comm_stream); });
          comm_thread->synchronize();  // the host waits; the compute stream is idle meanwhile
        }
        comm_end.wait_on(compute);
        timeline.mark(StepTimeline::comm_join, compute);

        cuda::sgd_momentum(params.data(), grads.data(), velocity.data(), n, cfg.lr, cfg.momentum,
                           cfg.weight_decay, compute);
        timeline.mark(StepTimeline::optimizer, compute);
        comm.wait_all();  // nccl: completes the buckets, checking for asynchronous errors
        timeline.synchronize();
        rec.step_time = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        rec.phases.h2d = timeline.seconds(StepTimeline::start, StepTimeline::h2d);
        rec.phases.forward = timeline.seconds(StepTimeline::h2d, StepTimeline::forward);
        rec.phases.backward = timeline.seconds(StepTimeline::forward, StepTimeline::backward);
        rec.phases.comm_exposed = timeline.seconds(StepTimeline::backward, StepTimeline::comm_join) + buffer_sync;
        rec.phases.comm = static_cast<double>(cuda::Event::elapsed_ms(comm_start, comm_end)) / 1e3 + buffer_sync;
        rec.phases.optimizer = timeline.seconds(StepTimeline::comm_join, StepTimeline::optimizer);
        if (step >= cfg.warmup_steps) me.steps.push_back(rec);
        if (rank == 0) ++steps_in_epoch[static_cast<std::size_t>(epoch)];
      }
    }
    const CommStats end = comm.stats();
    record_device_used_after(ctx, me);
    finish_rank(me, {end.bytes_sent - timed_start.bytes_sent, end.bytes_received - timed_start.bytes_received},
                static_cast<long>(me.steps.size()), *ctx.tracker);

    // Outside the timed steps: the global training loss per epoch, and rank 0's evaluation (on
    // the host, with the CPU model, from the device parameters).
    const std::vector<double> local_sums = epoch_loss_sums(step_loss, step, spe, cfg.epochs);
    DeviceBuffer<float> losses(alloc, MemoryCategory::activations, local_sums.size());
    losses.copy_from_host(std::vector<float>(local_sums.begin(), local_sums.end()));
    comm.allreduce_sum(losses.data(), losses.size());
    if (rank == 0) {
      const std::vector<float> sums = losses.to_host();
      const std::vector<float> host_params = params.to_host();
      std::vector<float> host_buffers(num_buffers);
      if (num_buffers > 0) {
        cuda::memcpy_async(host_buffers.data(), model->buffers(), num_buffers * sizeof(float), compute);
        ctx.compute->synchronize();
      }
      result.steps_timed = static_cast<long>(me.steps.size());
      finish_result(result, data, std::vector<double>(sums.begin(), sums.end()), steps_in_epoch,
                    host_params.data(), n, num_buffers > 0 ? host_buffers.data() : nullptr, num_buffers);
    }
  });
  return result;
}

}  // namespace dpbench
