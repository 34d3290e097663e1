// What the sparse-gradient paths of the strategies share (--workload dlrm --sparse-grad:
// sharded_ps/sparse_embeddings.hpp, allreduce/sparse_allreduce.hpp): the checks every such path
// makes, and the replica's compact tables (the rows its batch looks up, renumbered).
#pragma once

#include <cstddef>
#include <vector>

#include "train/training.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

// Throws InputError (one line, "--sparse-grad: ...") on what no sparse path runs: a workload other
// than dlrm, a device other than the CPU, an optimizer other than SGD or weight decay (the tables
// step with SGD without momentum, PyTorch's SGD on a sparse gradient), --hierarchy, --rank-batch,
// checkpoints, --init-params, a communication hook, or more than 2^24 rows per step.
// No-op without --sparse-grad.
void validate_sparse_grad(const TrainConfig& config);

// The rows of every table one batch looks up, for a replica that holds only those: rows[t] the
// unique rows of table t in ascending order. compact_lookups writes the batch into x_out with each
// index replaced by its row's place in rows[t] (what the model then computes with on tables of
// `capacity` rows; capacity >= batch x lookups). inputs, x_out: [batch, s.row_stride()] host
// floats, not overlapping.
struct CompactTables {
  std::vector<std::vector<std::size_t>> rows;
};
CompactTables compact_lookups(const float* inputs, float* x_out, std::size_t batch, const cpu::BagShape& s);

}  // namespace dpbench
