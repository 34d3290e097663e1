// allreduce with sparse embedding gradients (--workload dlrm --sparse-grad): PyTorch DDP's path
// for a sparse gradient, which it gives a bucket of its own and all-reduces over gloo as an
// all-gather of every rank's indices and values, then a sum (torch/csrc/distributed/c10d/
// ProcessGroupGloo.cpp, AsyncSparseAllreduceWork). Every rank keeps a full replica, tables
// included (DDP semantics); its forward and backward run on the rows its batch looks up (copied
// from its own tables), and each step:
//   the dense layers' gradients are all-reduced (the ring);
//   every rank's touched rows are all-gathered: the counts (one float per rank), the (table, row)
//     ids (two floats per row) and the gradient rows (dim floats per row), in rank order;
//   every rank sums them per row, in rank order, and applies SGD without momentum to those rows
//     of its tables, and the run's optimizer to the dense layers.
// Each rank receives every other rank's rows, so the bytes grow with the ranks: at p ranks each
// rank receives (p - 1) pushes of the sharded server's size.
#pragma once

#include <memory>

#include "train/step_loop.hpp"

namespace dpbench {

// The rank of allreduce --sparse-grad (above). The config has passed validate_sparse_grad.
std::unique_ptr<ModeRank> make_sparse_allreduce_rank(const RankSetup& setup);

}  // namespace dpbench
