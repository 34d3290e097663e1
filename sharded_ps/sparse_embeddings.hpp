// sharded_ps with sparse embedding gradients (--workload dlrm --sparse-grad): the parameter
// server's push and pull of the touched keys only (Li et al., OSDI 2014; Parallax, EuroSys 2019,
// sends sparse variables through servers). Every rank serves rows ring_chunk(rows, p, k) of every
// table, which no other rank holds, and is a worker whose replica holds the dense layers (bottom
// and top MLP) and, of the tables, only the rows its batch looks up: at most local_batch x
// lookups rows per table, indexed by a compact copy of the batch's indices. Each step:
//   pull (in forward): each worker sends every server the (table, row) ids of its batch that the
//     server owns and gets those rows back: pairwise rounds of sendrecv (round d: to rank + d,
//     from rank - d), one float per count, two per id, dim per row;
//   forward and backward on the compact tables;
//   push: the dense layers' gradients are all-reduced (DDP); each worker sends each server the
//     gradients of the rows it pulled from it, in the same order (no ids);
//   step: each server sums the pushed rows and applies SGD without momentum to them (PyTorch's
//     SGD on a sparse gradient: an untouched row does not move); every worker applies the run's
//     optimizer to the dense layers.
// After the last step the servers' rows are gathered on rank 0, outside the timed steps and the
// tracked memory, for the result's evaluation.
// Per rank and step, with u_w the rows worker w pulls from this server, v_k those this worker
// pulls from server k (unique per table), D the dense layers' floats:
//   sends: sum over k != me of (1 + 2 v_k + dim v_k) + sum over w != me of dim u_w, plus the
//   dense all-reduce's 2(p-1)/p D; receives the mirror image.
#pragma once

#include <memory>

#include "train/step_loop.hpp"

namespace dpbench {

// Throws InputError on a config this path cannot run: validate_sparse_grad's checks
// (train/sparse_grad.hpp), and --servers other than every rank or --staleness.
void validate_sparse_embeddings(const TrainConfig& config);

// The rank of sharded_ps --sparse-grad (above).
std::unique_ptr<ModeRank> make_sparse_embedding_rank(const RankSetup& setup);

}  // namespace dpbench
