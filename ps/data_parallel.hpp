// The `ps` mode: DataParallel semantics (PyTorch torch/nn/parallel/data_parallel.py) with rank 0
// as the root. The root owns the master parameters, their gradients and the momentum
// buffer; every rank (the root included) runs a replica. Each step:
//   1. the root loads the whole global batch and scatters it along dim 0 with chunk semantics
//      (chunk size ceil(B/p): B=10, p=4 -> 3,3,3,1; B=6, p=4 -> 2,2,2,0: rank 3 idles);
//   2. the root broadcasts the master parameters to every replica (coalesced groups);
//   3. each replica runs forward on its chunk;
//   4. logits are gathered to the root, which computes the loss on the full batch and
//      scatters the gradient of the logits back;
//   5. each replica runs backward; only then are the replica gradients summed onto the root
//      (reduce-add in coalesced groups; no overlap with backward);
//   6. the root alone applies SGD with momentum to the master parameters.
// Transports for steps 2 and 5: "collective" (the communicator's reduce and broadcast, what
// DataParallel does through NCCL) or "p2p" (each worker sends its gradients to, and receives the
// parameters from, the root: the classic parameter-server incast). --hierarchy node
// (collective): a per-node pre-reduction, core/hierarchical.hpp's reduce and broadcast: the
// gradients are summed inside each node before they cross its link (a reduce-scatter inside the
// node, one ring per local rank across the nodes, each rank's summed segment to rank 0), and the
// parameters come back as segments from rank 0 and an all-gather across then inside the nodes:
// per step, (2N-1)/N n floats each way on each node's link but rank 0's, 3(N-1)/N n on rank 0's
// (N nodes).
// --workload dlrm --sparse-grad: the root serves the tables' rows (ps/sparse_data_parallel.hpp).
#pragma once

#include <cstddef>
#include <vector>

#include "train/strategy.hpp"
#include "train/training.hpp"

namespace dpbench {

// Rows of each rank's chunk when `batch` rows are split over world_size ranks with
// torch.chunk semantics: ceil(batch / world_size) each, the last non-empty chunk takes the rest,
// trailing ranks may get 0.
std::vector<std::size_t> chunk_sizes(std::size_t batch, int world_size);

// Throws InputError on a config this mode cannot run with this data (unknown transport, ...).
void validate_data_parallel(const TrainConfig& config, const Dataset& train);

// The collectives of a ps step (Strategy::probed_collectives): broadcast, scatter, gather and
// reduce; over the p2p transport scatter and gather (the parameters and gradients go point to
// point).
std::vector<CollectiveKind> data_parallel_probed_collectives(const TrainConfig& config);

// Trains on config.device (every device a launcher is registered for, train/rank_context.hpp).
// Throws as validate_data_parallel does, and Error if a rank fails.
RunResult train_data_parallel(const TrainConfig& config, const TrainData& data);

// The strategy's registry entry: trainer and traits (ps/ps_strategy.cpp).
const Strategy& data_parallel_strategy();

}  // namespace dpbench
