// The memory model: per-rank bytes by category (core/memory.hpp's MemoryCategory) of a training
// step, for any model size, world size and optimizer, written from what each strategy allocates
// (ps/data_parallel.cpp, train/replica_rank.cpp, sharded_ps/sharded_ps.cpp,
// train/optimizer.cpp, workloads/dataloader.cpp). Each strategy's own terms live in its folder
// (its Strategy::memory trait); the pieces they share are here. With N parameters, p ranks, a
// global batch B split into local batches b, C classes, F input features and s optimizer state
// arrays (sgd 1, adam and adamw 2), in floats:
//   replica (allreduce, every rank):  parameters N, gradients N, optimizer s N,
//                                     activations A(b) + 2 b C, data b (F + 1) per loader slot;
//   ps root (rank 0):                 parameters 2N, gradients 2N, optimizer s N,
//                                     activations A(b) + 2 b C + 2 B C (the gathered logits and
//                                     their gradient), data B (F + 1) per slot + b F;
//   ps worker:                        parameters N, gradients N, activations A(b) + 2 b C, data b F;
//   sharded_ps server k of K:         a replica, less s (N - N_k) optimizer state, plus
//                                     gradients N_k (its range's sum), N_k = N/K to a float.
// A(b) is the model's own activations for b samples (Model::activation_bytes). The
// communication buffers are those of --comm local (p2p: one range or N to receive into; a chain
// relay: two slices); other backends' scratch is not modelled. It is ZeRO stage 1's accounting
// (Rajbhandari et al. 2020, sec. 3) applied to each mode's ranks: PS holds the optimizer state
// once, all-reduce on every rank, the sharded PS 1/K on each server.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/memory.hpp"
#include "train/training.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// What the model needs to know about a model and a run.
struct MemoryInputs {
  double num_params = 0;     // N
  double buffer_floats = 0;  // BatchNorm running statistics (charged to parameters)
  double input_floats = 0;   // F per sample
  double classes = 0;        // C: logits per sample
  // The model's own activation bytes for a batch of `rows` samples (forward outputs kept for
  // backward and backward scratch; not the logits).
  std::function<double(double rows)> activation_bytes;
  TrainConfig config;  // mode, transport, world_size, global_batch, rank_batches, optimizer,
                       // sharded_ps.servers, comm, ps.coalesce_mb, loader
};

// The inputs for a built-in model (config.model.workload with its widths) on samples of `shape` with
// `classes` classes, and the run `config`. Throws InputError as make_model.
MemoryInputs builtin_memory_inputs(const TrainConfig& config, const SampleShape& shape, std::size_t classes);
// The same for a model already made: `model` on samples of `shape` with `classes` classes.
MemoryInputs model_memory_inputs(std::shared_ptr<const Model> model, const TrainConfig& config,
                                 const SampleShape& shape, std::size_t classes);

// Rank r's samples per step: its --rank-batch entry, or the global batch over the ranks.
double replica_rows(const TrainConfig& config, int rank);

// The bytes every full replica holds (train/replica_rank.cpp) with `rows` local samples:
// parameters (+ buffers), gradients, logits and their gradient, the model's activations, the
// DataLoader's slots. No optimizer state.
RankMemory replica_memory(const MemoryInputs& in, double rows);

// The DataLoader's batch buffers for `rows` samples: one slot (num_workers 0) or
// num_workers x prefetch_factor, each rows x (F floats + 1 int32 label).
double loader_bytes(const MemoryInputs& in, double rows);

// Bytes of optimizer state over `count` parameters: state arrays (1 for sgd, 2 for adam and
// adamw) x count floats.
double optimizer_bytes(const TrainConfig& config, double count);

// --comm local's chain reduce to `root` of messages of up to `largest` floats: a relay rank
// (neither the chain's start nor its end) keeps two pipeline slices of scratch.
double chain_relay_bytes(const TrainConfig& config, int rank, int root, double largest);

}  // namespace dpbench
