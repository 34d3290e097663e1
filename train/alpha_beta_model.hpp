// The alpha-beta (Hockney) model of one training step, for projecting measured runs to world
// sizes one machine cannot reach. A message of n bytes over one link costs alpha + n * beta.
// This file holds the pieces every strategy shares: the link, the compute term, the cost of the
// collectives over one link, and how a step combines compute with exposed communication. Each
// strategy's own communication term lives in its folder (ps/ps_strategy.cpp, ...), e.g.
// with N gradient bytes and p ranks:
//   allreduce (ring):       2(p-1) alpha + 2(p-1)/p N beta       (Patarasuk & Yuan 2009)
//   ps, collective:         2 [(p-1) alpha + N beta]   pipelined chain reduce + broadcast
//   ps, p2p (incast):       2 (p-1) (alpha + N beta)   every transfer through the root's link
// Compute comes from a measured single-rank run: per-sample time c (data wait, forward,
// backward) and the optimizer step t_opt. A strategy that overlaps communication with backward
// hides the non-exposed share of it; the others hide none.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "core/names.hpp"
#include "core/reduction.hpp"

namespace dpbench {

struct LinkModel {
  std::string name;            // "pcie4", "measured", ...
  double alpha_s = 0;          // per-message latency, seconds
  double beta_s_per_byte = 0;  // 1 / bandwidth
  std::string source;          // where the numbers come from
  // Whose collective algorithms run over the link: ring (dpbench's own and the model of MPI and
  // NCCL: ring all-reduce, reduce-scatter and all-gather, pipelined chain reduce and broadcast)
  // or gloo (gloo's: ring all-reduce and all-gather; reduce = ring reduce-scatter + gather to
  // the root; binomial-tree broadcast; reduce-scatter over uneven segments = one reduce per
  // segment). See reduce_s and the functions after it.
  CollectiveFamily collectives = CollectiveFamily::ring;
  // The all-reduce played as NCCL's tree (project --nccl-algo tree; Collectives::tree_allreduce)
  // in the simulation; the alpha-beta model keeps the ring's.
  bool tree_allreduce = false;
};

// Datasheet-based presets: pcie4 (25 GB/s achievable), pcie5 (50 GB/s), nvlink4 (370 GB/s ring
// busbw), ib-ndr (50 GB/s per GPU). Throws InputError naming an unknown preset.
LinkModel link_preset(const std::string& name);

struct StepModel {
  double per_sample_compute_s = 0;  // c
  double optimizer_s = 0;           // t_opt
  double param_bytes = 0;           // N
  double sample_bytes = 0;          // F * 4
  double logit_bytes = 0;           // C * 4 per sample
  double exposed_fraction = 1.0;    // overlapping strategies: exposed / total communication
  // A described model (--model): its name, whose tensors cut the simulation's DDP buckets and
  // whose layer times place their ready points; "" for a measured workload (ddp_buckets below).
  std::string described_model;
  // A measured workload's DDP buckets ({offset, size} floats, ready order: the calibration run's
  // ddp_buckets); empty: a flat gradient cut at the caps.
  std::vector<std::pair<std::size_t, std::size_t>> ddp_buckets;
  double forward_share = 1.0 / 3.0;  // of per_sample_compute_s, the rest is backward
  // Ranks sharing a host's cores (an emulated cluster: every node's ranks on one machine): a
  // 2-rank run there computed host_slowdown_at_2 times slower than the 1-rank run; p ranks on
  // host_cores cores compute host_slowdown_at_2 x max(1, p / cores) / max(1, 2 / cores) times
  // slower (time-sharing once ranks outnumber cores). 0 cores: not modelled.
  double host_cores = 0;
  double host_slowdown_at_2 = 1;
  // The host's reductions (core/reduction.hpp), which a simulated point's schedule pays for where
  // its collectives sum (ScheduleInputs::reduction): the calibration files' probe, or a host
  // profile's. Empty: the adds cost nothing. Not slowed by ranks sharing cores.
  ReductionCost reduction;
  // The factor on a rank's compute (and optimizer) at p ranks: 1 at one rank or without a host.
  double compute_slowdown(int p) const;
};

struct StepPrediction {
  double compute_s = 0;
  double comm_s = 0;  // total communication time
  double step_s = 0;  // compute + exposed communication
};

// Seconds of ring all-reduce of `bytes` over p ranks: 2(p-1) alpha + 2(p-1)/p bytes beta.
double ring_allreduce_s(const LinkModel& link, int p, double bytes);

// Seconds of a pipelined chain reduce (or broadcast) of `bytes` to (from) one root over p ranks:
// (p-1) alpha + bytes beta; the root's link carries the bytes once.
double pipelined_root_s(const LinkModel& link, int p, double bytes);

// Seconds of one reduce (to a root) of `bytes` over p ranks under link.collectives:
//   ring: pipelined_root_s;
//   gloo: ring reduce-scatter, (p-1) alpha + (p-1)/p bytes beta, then the root's link takes the
//         other p-1 chunks, (p-1) alpha + (p-1)/p bytes beta.
double reduce_s(const LinkModel& link, int p, double bytes);
// Seconds of one broadcast of `bytes` from a root over p ranks under link.collectives:
//   ring: pipelined_root_s;
//   gloo: binomial tree (gloo/broadcast.cc): a rank starts all its sends at once as soon as it
//         has the data, so they share its link and each child has it k (alpha + bytes beta) later
//         for a parent of k children; the time is the last rank's (p = 3: 2, p = 4: 3, p = 8: 6
//         times alpha + bytes beta).
double broadcast_s(const LinkModel& link, int p, double bytes);
// Seconds of a reduce-scatter of `bytes` (all segments together) over p ranks:
//   ring: (p-1) alpha + (p-1)/p bytes beta;  gloo: p reduces of bytes / p.
double reduce_scatter_s(const LinkModel& link, int p, double bytes);
// Seconds of an all-gather of `bytes` (all segments together), a ring under both:
// (p-1) alpha + (p-1)/p bytes beta.
double allgather_s(const LinkModel& link, int p, double bytes);

// Seconds of p-1 point-to-point messages of `bytes` each through one rank's link (incast):
// (p-1) (alpha + bytes beta).
double incast_s(const LinkModel& link, int p, double bytes);

// Seconds for one root to scatter the inputs of p * b samples and to gather the logits and
// scatter their gradients back (DataParallel's scatter / gather): the other ranks' share
// crosses the root's link, (p-1) b (F + 2C) beta + 3 alpha.
double root_batch_traffic_s(const StepModel& model, const LinkModel& link, int p, double per_rank_batch);

// The step at world size p where every rank computes `per_rank_batch` samples and spends
// `comm_s` seconds communicating (ignored at p = 1), of which `exposed_fraction` is not hidden
// behind compute. compute_share: the fraction of the calibration device each rank gets (1 for
// separate devices; 1/p for p ranks sharing it). Throws Error when p < 1.
StepPrediction combine_step(const StepModel& model, int p, double per_rank_batch, double compute_share, double comm_s,
                            double exposed_fraction);

}  // namespace dpbench
