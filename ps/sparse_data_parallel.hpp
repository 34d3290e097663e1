// ps with sparse embedding gradients (--workload dlrm --sparse-grad): DataParallel's root as the
// one parameter server of the tables. Rank 0 holds every table, their gradient sums and the
// optimizer state of the tables and the dense layers; every rank (the root too) is a replica that
// holds the dense layers and, of the tables, only the rows its batch looks up (compact tables,
// train/sparse_grad.hpp), and loads its own DistributedSampler shard. Each step:
//   refresh (in forward): the root broadcasts the dense layers; every rank's count of rows is
//     all-gathered, their (table, row) ids gathered to the root (two floats per row), and the
//     root scatters those rows back (dim floats per row): the replicas refreshed from the root,
//     as DataParallel's replicate() is, for the rows the batch needs;
//   forward and backward on the compact tables;
//   the dense layers' gradients are summed onto the root (a reduce); the touched rows' gradients
//     are gathered to the root, in the order they were pulled, and summed there per row in rank
//     order (DataParallel's reduce_add of a sparse gradient: only the touched rows travel);
//   the root alone steps: the run's optimizer on the dense layers, the tables' optimizer (SGD
//     without momentum, or Adagrad) on the touched rows.
// Per step, with n_r the rows rank r pulls (unique per table) and D the dense layers' floats:
// each worker sends 1 + 2 n_r + dim n_r floats besides the dense reduce, and the root sends dim
// n_r to each worker besides the dense broadcast: the root's link carries every worker's rows
// twice, the incast DataParallel is known for.
#pragma once

#include <memory>

#include "train/step_loop.hpp"

namespace dpbench {

// Throws InputError on a config this path cannot run: validate_sparse_grad's checks
// (train/sparse_grad.hpp), a --batch-size not divisible by the ranks, and --transport p2p (the
// rows go through the root's collectives). No-op without --sparse-grad.
void validate_sparse_data_parallel(const TrainConfig& config);

// The collectives the engine probe times for this path, in a step's order: the dense layers'
// broadcast, the all-gather of the counts, the gather of the ids, the scatter of the rows, the
// dense layers' reduce and the gather of the rows' gradients; kSparseProbeRounds / 3 times, as
// one such small message alone samples too little of a host whose ranks share cores.
std::vector<CollectiveKind> sparse_data_parallel_probed_collectives();

// The rank of ps --sparse-grad (above). The config has passed validate_sparse_data_parallel.
std::unique_ptr<ModeRank> make_sparse_data_parallel_rank(const RankSetup& setup);

}  // namespace dpbench
