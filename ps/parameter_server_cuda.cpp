// The `ps` mode on GPUs: parameter_server.cpp's DataParallel step on device buffers. Rank 0 is
// the reducer GPU: it copies the whole global batch to its device, scatters the chunks,
// broadcasts the master parameters, gathers the logits, computes the loss, scatters the logits'
// gradient, sums the replicas' gradients and steps the optimizer, as DataParallel does on
// device 0. Nothing overlaps (DataParallel's reduce_add starts after backward), so each phase
// ends with its stream synchronised and is timed on the host.
#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "core/cuda_training.hpp"
#include "core/error.hpp"
#include "ps/parameter_server.hpp"
#include "workloads/cuda_model.hpp"
#include "workloads/distributed_sampler.hpp"

namespace dpbench {

RunResult train_parameter_server_cuda(const TrainConfig& cfg, const TrainData& data) {
  const Dataset& train = *data.train;
  validate_parameter_server(cfg, train);
  const bool p2p = cfg.transport == "p2p";
  const std::size_t B = cfg.global_batch;
  const long spe = steps_per_epoch(cfg, train);
  const long total = total_steps(cfg, train);
  const std::size_t features = train.shape().features();
  const auto classes = static_cast<std::size_t>(train.num_classes());
  const std::vector<std::size_t> rows = cfg.rank_batches.empty() ? chunk_sizes(B, cfg.world_size) : cfg.rank_batches;
  std::vector<std::size_t> input_counts(rows.size()), logit_counts(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    input_counts[r] = rows[r] * features;
    logit_counts[r] = rows[r] * classes;
  }
  const auto group = std::max<std::size_t>(
      1, static_cast<std::size_t>(cfg.coalesce_mb * 1024.0 * 1024.0) / sizeof(float));
  constexpr int kReducer = 0;

  RunResult result;
  result.config = cfg;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(static_cast<std::size_t>(cfg.world_size));

  run_cuda_ranks(cfg, result.ranks, [&](CudaRank& ctx) {
    const int rank = ctx.rank;
    const bool reducer = rank == kReducer;
    Communicator& comm = *ctx.comm;
    DeviceAllocator& alloc = *ctx.allocator;
    cuda::Stream& stream = *ctx.compute;
    void* compute = stream.handle();
    const std::size_t my_rows = rows[static_cast<std::size_t>(rank)];
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = my_rows;

    // What every replica holds.
    auto model = make_cuda_model(cfg, train.shape(), classes, *ctx.blas);
    model->reserve(std::max<std::size_t>(my_rows, 1), alloc);
    const std::size_t n = model->num_params();
    DeviceBuffer<float> replica_params(alloc, MemoryCategory::parameters, n);
    DeviceBuffer<float> replica_grads(alloc, MemoryCategory::gradients, n);  // zero: idle ranks send zeros
    DeviceBuffer<float> chunk_input(alloc, MemoryCategory::data_staging, my_rows * features);
    DeviceBuffer<float> chunk_logits(alloc, MemoryCategory::activations, my_rows * classes);
    DeviceBuffer<float> chunk_dlogits(alloc, MemoryCategory::activations, my_rows * classes);

    // What only the reducer holds: the imbalance this mode is known for.
    DeviceBuffer<float> master_params, master_grads, velocity, logits_all, dlogits_all, incoming, step_loss;
    std::unique_ptr<DeviceBatch> global_batch;
    std::unique_ptr<DataLoader> loader;
    if (reducer) {
      master_params = DeviceBuffer<float>(alloc, MemoryCategory::parameters, n);
      master_grads = DeviceBuffer<float>(alloc, MemoryCategory::gradients, n);
      velocity = DeviceBuffer<float>(alloc, MemoryCategory::optimizer_state, n);
      logits_all = DeviceBuffer<float>(alloc, MemoryCategory::activations, B * classes);
      dlogits_all = DeviceBuffer<float>(alloc, MemoryCategory::activations, B * classes);
      step_loss = DeviceBuffer<float>(alloc, MemoryCategory::activations, static_cast<std::size_t>(total));
      if (p2p) incoming = DeviceBuffer<float>(alloc, MemoryCategory::comm_buffers, n);
      std::vector<float> host(n);
      model->init_params(host.data(), cfg.seed);
      master_params.copy_from_host(host);
      global_batch = std::make_unique<DeviceBatch>(ctx, B, features, cfg.loader.pin_memory);
      DataLoaderOptions loader_options = cfg.loader;
      loader_options.seed = cfg.seed;
      loader = std::make_unique<DataLoader>(train, B, loader_options, *ctx.host_tracker);
    }

    std::vector<long> steps_in_epoch(static_cast<std::size_t>(cfg.epochs), 0);
    CommStats timed_start = comm.stats();
    long step = 0;
    for (int epoch = 0; epoch < cfg.epochs && step < total; ++epoch) {
      if (reducer) {
        std::vector<std::int64_t> order = shuffled_indices(train.size(), cfg.seed + epoch);
        order.resize(static_cast<std::size_t>(spe) * B);
        loader->start_epoch(std::move(order), epoch);
      }
      for (long s = 0; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) timed_start = comm.stats();
        maybe_inject_fault(rank, step);
        PhaseClock clock;
        StepRecord rec;
        const Batch* batch = nullptr;
        if (reducer) batch = &loader->next();
        rec.phases.data_wait = clock.lap();
        if (reducer) {
          global_batch->upload(*batch, B, compute);
          stream.synchronize();
        }
        rec.phases.h2d = clock.lap();

        // 1-2. scatter the inputs, broadcast the parameters (and the reducer's BatchNorm buffers).
        comm.scatterv(reducer ? global_batch->inputs() : nullptr, input_counts, chunk_input.data(), kReducer);
        if (p2p) {
          if (reducer) {
            for (int r = 1; r < cfg.world_size; ++r) comm.send(master_params.data(), n, r);
          } else {
            comm.recv(replica_params.data(), n, kReducer);
          }
        } else {
          float* buf = reducer ? master_params.data() : replica_params.data();
          for (std::size_t off = 0; off < n; off += group) comm.broadcast(buf + off, std::min(group, n - off), kReducer);
        }
        if (reducer) {
          cuda::memcpy_async(replica_params.data(), master_params.data(), n * sizeof(float), compute);
          stream.synchronize();
        }
        if (model->num_buffers() > 0) comm.broadcast(model->buffers(), model->num_buffers(), kReducer);
        rec.phases.comm += clock.lap();

        // 3. replica forward.
        if (my_rows > 0) model->forward(replica_params.data(), chunk_input.data(), my_rows, chunk_logits.data());
        stream.synchronize();
        rec.phases.forward += clock.lap();

        // 4. gather logits; loss on the reducer over the full batch; scatter d(loss)/d(logits).
        comm.gatherv(chunk_logits.data(), logit_counts, logits_all.data(), kReducer);
        rec.phases.comm += clock.lap();
        if (reducer) {
          cuda::softmax_cross_entropy(logits_all.data(), global_batch->labels(), B, classes, dlogits_all.data(),
                                      1.0f / static_cast<float>(B), step_loss.data() + step, compute);
          stream.synchronize();
        }
        rec.phases.forward += clock.lap();
        comm.scatterv(dlogits_all.data(), logit_counts, chunk_dlogits.data(), kReducer);
        rec.phases.comm += clock.lap();

        // 5. replica backward, then sum the gradients onto the reducer.
        if (my_rows > 0) {
          model->backward(replica_params.data(), chunk_input.data(), chunk_dlogits.data(), my_rows,
                          replica_grads.data(), nullptr);
        }
        if (reducer) cuda::memcpy_async(master_grads.data(), replica_grads.data(), n * sizeof(float), compute);
        stream.synchronize();
        rec.phases.backward = clock.lap();
        if (p2p) {
          if (reducer) {
            for (int r = 1; r < cfg.world_size; ++r) {
              comm.recv(incoming.data(), n, r);
              cuda::add_inplace(master_grads.data(), incoming.data(), n, compute);
              stream.synchronize();  // `incoming` is reused by the next receive
            }
          } else {
            comm.send(replica_grads.data(), n, kReducer);
          }
        } else {
          float* buf = reducer ? master_grads.data() : replica_grads.data();
          for (std::size_t off = 0; off < n; off += group) comm.reduce_sum(buf + off, std::min(group, n - off), kReducer);
        }
        rec.phases.comm += clock.lap();
        rec.phases.comm_exposed = rec.phases.comm;  // every transfer blocks this step

        // 6. the optimizer step, on the reducer only.
        if (reducer) {
          cuda::sgd_momentum(master_params.data(), master_grads.data(), velocity.data(), n, cfg.lr, cfg.momentum,
                             cfg.weight_decay, compute);
          stream.synchronize();
        }
        rec.phases.optimizer = clock.lap();
        const PhaseTimes& ph = rec.phases;
        rec.step_time = ph.data_wait + ph.h2d + ph.comm + ph.forward + ph.backward + ph.optimizer;
        if (step >= cfg.warmup_steps) me.steps.push_back(rec);
        ++steps_in_epoch[static_cast<std::size_t>(epoch)];
      }
    }
    const CommStats end = comm.stats();
    record_device_used_after(ctx, me);
    finish_rank(me, {end.bytes_sent - timed_start.bytes_sent, end.bytes_received - timed_start.bytes_received},
                static_cast<long>(me.steps.size()), *ctx.tracker);
    if (reducer) {
      const std::vector<float> host_params = master_params.to_host();
      std::vector<float> host_buffers(model->num_buffers());
      if (!host_buffers.empty()) {
        cuda::memcpy_async(host_buffers.data(), model->buffers(), host_buffers.size() * sizeof(float), compute);
        stream.synchronize();
      }
      result.steps_timed = static_cast<long>(me.steps.size());
      finish_result(result, data, epoch_loss_sums(step_loss, step, spe, cfg.epochs), steps_in_epoch,
                    host_params.data(), n, host_buffers.empty() ? nullptr : host_buffers.data(),
                    host_buffers.size());
    }
  });
  return result;
}

}  // namespace dpbench
