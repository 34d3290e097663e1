#include "ps/parameter_server.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/distributed_sampler.hpp"
#include "train/checkpoint.hpp"
#include "train/models.hpp"
#include "train/optimizer.hpp"
#include "train/progress.hpp"
#include "train/rank_context.hpp"

namespace dpbench {

namespace {
// One rank's step without a replica (DataParallel on one device calls the module itself):
// forward on the whole batch, the loss, backward into the master gradients. No communication.
void plain_step(RankContext& ctx, Model& model, StepTimer& timer, const StagedBatch& batch, float* params,
                float* grads, float* logits, float* dlogits, std::size_t rows, std::size_t classes, long step) {
  model.forward(params, batch.inputs, rows, logits);
  ctx.cross_entropy(logits, batch.labels, rows, classes, dlogits, 1.0f / static_cast<float>(rows), step);
  timer.lap(&PhaseTimes::forward);
  model.backward(params, batch.inputs, dlogits, rows, grads, nullptr);
  ctx.synchronize();
  timer.lap(&PhaseTimes::backward);
}
}  // namespace

namespace {
constexpr int kReducer = 0;

std::vector<std::size_t> scaled(const std::vector<std::size_t>& rows, std::size_t width) {
  std::vector<std::size_t> out(rows.size());
  std::transform(rows.begin(), rows.end(), out.begin(), [&](std::size_t r) { return r * width; });
  return out;
}

// Applies fn(offset, length) over [0, n) in groups of at most `group` elements: DataParallel's
// broadcast_coalesced / reduce_add_coalesced buffer size.
template <typename Fn>
void for_each_group(std::size_t n, std::size_t group, Fn fn) {
  for (std::size_t off = 0; off < n; off += group) fn(off, std::min(group, n - off));
}
}  // namespace

std::vector<std::size_t> chunk_sizes(std::size_t batch, int world_size) {
  const auto p = static_cast<std::size_t>(world_size);
  const std::size_t chunk = (batch + p - 1) / p;
  std::vector<std::size_t> sizes(p, 0);
  for (std::size_t r = 0; r < p; ++r) {
    const std::size_t start = r * chunk;
    sizes[r] = start >= batch ? 0 : std::min(chunk, batch - start);
  }
  return sizes;
}

void validate_parameter_server(const TrainConfig& cfg, const Dataset& train) {
  validate_config(cfg, train);
  if (cfg.sync_bn) {
    throw InputError("--sync-bn: not available in ps mode (DataParallel normalises each replica's chunk "
                     "with its own statistics); use --mode allreduce");
  }
  if (cfg.transport != "collective" && cfg.transport != "p2p") {
    throw InputError(fmt::format("--transport {}: unknown (available: collective, p2p)",
                                 cfg.transport));
  }
}

RunResult train_parameter_server(const TrainConfig& cfg, const TrainData& data) {
  const Dataset& train = *data.train;
  validate_parameter_server(cfg, train);
  const bool p2p = cfg.transport == "p2p";
  const std::size_t B = cfg.global_batch;
  const long spe = steps_per_epoch(cfg, train);
  const long total = total_steps(cfg, train);
  const std::size_t features = train.shape().features();
  const auto classes = static_cast<std::size_t>(train.num_classes());
  // Rows per replica: torch.chunk's, or the uneven split of --rank-batch.
  const std::vector<std::size_t> rows = cfg.rank_batches.empty() ? chunk_sizes(B, cfg.world_size) : cfg.rank_batches;
  const std::vector<std::size_t> input_counts = scaled(rows, features);
  const std::vector<std::size_t> logit_counts = scaled(rows, classes);
  const auto group = std::max<std::size_t>(
      1, static_cast<std::size_t>(cfg.coalesce_mb * 1024.0 * 1024.0) / sizeof(float));

  RunResult result;
  result.config = cfg;
  result.dataset = train.name();
  result.steps_total = total;
  result.ranks.resize(static_cast<std::size_t>(cfg.world_size));

  run_rank_contexts(cfg, result.ranks, [&](RankContext& ctx) {
    const int rank = ctx.rank();
    const bool reducer = rank == kReducer;
    Communicator& comm = ctx.comm();
    const std::size_t my_rows = rows[static_cast<std::size_t>(rank)];
    RankResult& me = result.ranks[static_cast<std::size_t>(rank)];
    me.rank = rank;
    me.local_batch = my_rows;

    // What every replica holds. With one rank there is no replica: DataParallel on one device
    // calls the module itself, so the step is plain training on the master parameters.
    const bool plain = cfg.world_size == 1;
    auto model = ctx.make_model(cfg, train.shape(), classes, std::max<std::size_t>(my_rows, 1));
    const std::size_t n = model->num_params();
    Array<float> replica_params, replica_grads, chunk_input, chunk_logits, chunk_dlogits;
    if (!plain) {
      replica_params = Array<float>(ctx, MemoryCategory::parameters, n);
      replica_grads = Array<float>(ctx, MemoryCategory::gradients, n);
      chunk_input = Array<float>(ctx, MemoryCategory::data_staging, my_rows * features);
      chunk_logits = Array<float>(ctx, MemoryCategory::activations, my_rows * classes);
      chunk_dlogits = Array<float>(ctx, MemoryCategory::activations, my_rows * classes);
    }

    // What only the reducer holds: the imbalance this mode is known for.
    Array<float> master_params, master_grads, logits_all, dlogits_all, incoming;
    std::unique_ptr<DataLoader> loader;  // the reducer loads the whole global batch
    std::unique_ptr<BatchStaging> staging;
    if (reducer) {
      master_params = Array<float>(ctx, MemoryCategory::parameters, n);
      master_grads = Array<float>(ctx, MemoryCategory::gradients, n);
      logits_all = Array<float>(ctx, MemoryCategory::activations, B * classes);
      dlogits_all = Array<float>(ctx, MemoryCategory::activations, B * classes);
      if (p2p && !plain) incoming = Array<float>(ctx, MemoryCategory::comm_buffers, n);
      const std::vector<float> initial = initial_parameters(*model, cfg);
      ctx.upload(master_params.data(), initial.data(), n);
      staging = ctx.make_staging(B, features, cfg.loader.pin_memory);
      DataLoaderOptions loader_options = cfg.loader;
      loader_options.seed = cfg.seed;  // augmentation: from (seed, epoch, sample) only
      loader = std::make_unique<DataLoader>(train, B, loader_options, ctx.host_tracker());
    }

    // --resume: the reducer's master parameters, buffers and momentum from the checkpoint.
    Checkpointer checkpoints(cfg, ctx, n, spe, /*writers=*/1);
    Optimizer optimizer(ctx, cfg, 0, reducer ? n : 0);  // the reducer's alone
    const long start = checkpoints.restore(master_params.data(), model->buffers(), model->num_buffers(), optimizer.shard());
    optimizer.resume_at(start);
    if (reducer) result.resumed_from_step = start > 0 ? start : -1;
    std::vector<long> steps_in_epoch(static_cast<std::size_t>(cfg.epochs), 0);
    for (long s = 0; s < start && s / spe < cfg.epochs; ++s) ++steps_in_epoch[static_cast<std::size_t>(s / spe)];
    ProgressMeter progress(cfg, total, cfg.global_batch);  // the reducer's loss covers the whole batch
    progress.resume_at(start);
    const std::unique_ptr<StepTimer> timer = ctx.make_step_timer();
    CommStats timed_start = comm.stats();
    ctx.mark_timed_start();
    const int first_epoch = static_cast<int>(start / spe);
    long step = start;
    ctx.before_first_collective();
    for (int epoch = first_epoch; epoch < cfg.epochs && step < total; ++epoch) {
      // Resumed mid-epoch: the epoch's order is rebuilt from (seed, epoch) and the batches
      // already trained on are skipped.
      const long skip = epoch == first_epoch ? start % spe : 0;
      if (reducer) {
        std::vector<std::int64_t> order = shuffled_indices(train.size(), cfg.seed + epoch);
        order.resize(static_cast<std::size_t>(spe) * B);
        order.erase(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(skip) * B));
        loader->start_epoch(std::move(order), epoch);
      }
      for (long s = skip; s < spe && step < total; ++s, ++step) {
        if (step == cfg.warmup_steps) {
          timed_start = comm.stats();
          ctx.mark_timed_start();
        }
        maybe_inject_fault(rank, step);
        timer->begin();
        maybe_delay_step(cfg.mode);
        StagedBatch batch;
        const Batch* loaded = reducer ? &loader->next() : nullptr;
        timer->lap(&PhaseTimes::data_wait);
        if (reducer) {
          batch = staging->stage(*loaded, B);
          ctx.synchronize();  // the scatter below reads the staged inputs
        }
        timer->lap(&PhaseTimes::h2d);
        if (plain) {
          plain_step(ctx, *model, *timer, batch, master_params.data(), master_grads.data(), logits_all.data(),
                     dlogits_all.data(), B, classes, step);
        } else {

          // 1-2. scatter the inputs, broadcast the parameters.
          comm.scatterv(batch.inputs, input_counts, chunk_input.data(), kReducer);
          if (p2p) {
            if (reducer) {
              for (int r = 1; r < cfg.world_size; ++r) comm.send(master_params.data(), n, r);
            } else {
              comm.recv(replica_params.data(), n, kReducer);
            }
          } else {
            float* buf = reducer ? master_params.data() : replica_params.data();
            for_each_group(n, group, [&](std::size_t off, std::size_t len) {
              comm.broadcast(buf + off, len, kReducer);
            });
          }
          if (reducer) ctx.copy(replica_params.data(), master_params.data(), n);
          // Buffers (BatchNorm running statistics) come from the reducer's replica, whose updates
          // alone persist, as DataParallel's replicate() copies them from device 0 every step.
          if (model->num_buffers() > 0) {
            ctx.synchronize();  // the reducer's last step wrote them on its compute stream
            comm.broadcast(model->buffers(), model->num_buffers(), kReducer);
          }
          timer->lap(&PhaseTimes::comm);

          // 3. replica forward.
          if (my_rows > 0) {
            model->forward(replica_params.data(), chunk_input.data(), my_rows, chunk_logits.data());
          }
          ctx.synchronize();  // the gather below reads the logits
          timer->lap(&PhaseTimes::forward);

          // 4. gather logits; loss on the reducer over the full batch; scatter d(loss)/d(logits).
          comm.gatherv(chunk_logits.data(), logit_counts, logits_all.data(), kReducer);
          timer->lap(&PhaseTimes::comm);
          if (reducer) {
            ctx.cross_entropy(logits_all.data(), batch.labels, B, classes, dlogits_all.data(),
                              1.0f / static_cast<float>(B), step);
            ctx.synchronize();  // the scatter below reads the logits' gradient
          }
          timer->lap(&PhaseTimes::forward);
          comm.scatterv(dlogits_all.data(), logit_counts, chunk_dlogits.data(), kReducer);
          timer->lap(&PhaseTimes::comm);

          // 5. replica backward, then sum the gradients onto the reducer.
          if (my_rows > 0) {
            model->backward(replica_params.data(), chunk_input.data(), chunk_dlogits.data(), my_rows,
                            replica_grads.data(), nullptr);
          } else {
            ctx.fill_zero(replica_grads.data(), n);
          }
          if (reducer) ctx.copy(master_grads.data(), replica_grads.data(), n);
          ctx.synchronize();  // the reduction below reads the gradients
          timer->lap(&PhaseTimes::backward);
          if (p2p) {
            if (reducer) {
              for (int r = 1; r < cfg.world_size; ++r) {
                comm.recv(incoming.data(), n, r);
                ctx.add_inplace(master_grads.data(), incoming.data(), n);
                ctx.synchronize();  // `incoming` is reused by the next receive
              }
            } else {
              comm.send(replica_grads.data(), n, kReducer);
            }
          } else {
            float* buf = reducer ? master_grads.data() : replica_grads.data();
            for_each_group(n, group, [&](std::size_t off, std::size_t len) {
              comm.reduce_sum(buf + off, len, kReducer);
            });
          }
          timer->lap(&PhaseTimes::comm);
        }

        // 6. the optimizer step, on the reducer only.
        if (reducer) optimizer.step(master_params.data(), master_grads.data());
        timer->lap(&PhaseTimes::optimizer);
        StepRecord rec = timer->end();
        rec.phases.comm_exposed = rec.phases.comm;  // every transfer blocks this step
        if (step >= cfg.warmup_steps) me.steps.push_back(rec);
        ++steps_in_epoch[static_cast<std::size_t>(epoch)];
        progress.step_done(ctx, epoch, step);
        checkpoints.maybe_save(step + 1, master_params.data(), model->buffers(), model->num_buffers(), optimizer.shard(),
                               me, timed_start);
      }
    }
    finish_timed_rank(ctx, me, timed_start);
    if (reducer) {
      result.steps_timed = static_cast<long>(me.steps.size());
      std::vector<double> step_sums = ctx.step_losses(step);
      checkpoints.merge_losses(step_sums);
      finish_result_on_rank(ctx, result, data, *model, master_params.data(), step_sums, spe, steps_in_epoch);
    }
  });
  return result;
}

}  // namespace dpbench
