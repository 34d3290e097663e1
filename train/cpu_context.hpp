// The CPU device behind RankContext: host memory charged to the rank's MemoryTracker, OpenBLAS
// models and the CPU kernels, wall-clock step timing, and the stream model of
// train/rank_context.hpp on host threads (the rank's thread is its compute stream; its events
// are reached when recorded, since CPU compute completes when the call returns).
#pragma once

#include <vector>

#include "train/rank_context.hpp"

namespace dpbench {

// The "cpu" launcher: ranks as threads of one process (comm "local") or one rank per process
// under mpirun (comm "mpi"), through run_ranks(); a CpuRankContext per rank.
void run_cpu_rank_contexts(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body);

}  // namespace dpbench
