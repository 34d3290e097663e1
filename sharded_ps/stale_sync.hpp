// `sharded_ps --staleness S`: stale-synchronous parallel (SSP; Ho et al., "More Effective
// Distributed ML via a Stale Synchronous Parallel Parameter Server", NIPS 2013; the bounded delay
// of Li et al., OSDI 2014). A worker may run up to S steps ahead of the slowest: at step t it
// computes on the newest parameter version it holds, waiting only while that version is older
// than t - S (version v = the parameters after the servers applied the pushes of steps 0..v-1).
//
// Each rank's push, server step and pull of step t run on its communication thread, in step order,
// while the rank goes on computing: push = the reduce-scatter of step t's gradients over the
// servers' ranges (every worker's, so the servers sum exactly the S-stale gradients of step t),
// server step = SGD (or Adam) on the range, pull = the all-gather of the updated ranges as version
// t + 1. A worker therefore never sees version v before every worker pushed step v - 1, and never
// computes on a version older than t - S: SSP's bound, with the reads of a version always whole
// (every range at the same version). S = 0 is the synchronous mode (sharded_ps.cpp).
//
// Not the synchronous mode's: DDP's buckets (the push starts after backward), the BatchNorm
// buffers' broadcast (each rank keeps its own running statistics, DDP's broadcast_buffers=False).
// Before the first timed step and after the last the rank waits for every push, so the timed
// steps start with nothing in flight and the final parameters are the last version.
//
// Deterministic replay (--staleness-replay SEED): instead of the newest version, the worker
// computes at step t on version t - d exactly, d = ssp_replay_staleness(SEED, rank, t, S): the
// run is then reproducible bit for bit on one backend, and across backends to the float
// tolerance of their sums' order, as the synchronous modes are.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "train/step_loop.hpp"

namespace dpbench {

// The replay schedule's staleness of `rank` at `step`: uniform in 0..min(bound, step), from a
// splitmix64 hash of (seed, rank, step). bound >= 0.
int ssp_replay_staleness(std::uint64_t seed, int rank, long step, int bound);

// Why a --staleness run has no simulated step (its record's "unavailable"): one step's schedule
// does not hold steps that overlap one another's pushes and pulls.
inline constexpr const char* kStaleStepsNotSimulated =
    "sharded_ps --staleness: a worker's steps overlap the pushes and pulls of earlier ones, which one step's "
    "schedule does not hold";

// One rank of sharded_ps under config.sharded_ps.staleness > 0 (host buffers, collective transport).
std::unique_ptr<ModeRank> make_stale_sync_rank(const RankSetup& setup);

// The staleness histogram of the timed steps (step >= warmup) over every rank: counts[s] = the
// rank-steps that computed on a version s steps old, s = 0..bound.
std::vector<long> staleness_histogram(const std::vector<std::vector<int>>& per_rank_steps, int warmup, int bound);

}  // namespace dpbench
