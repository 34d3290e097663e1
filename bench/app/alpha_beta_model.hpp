// The alpha-beta (Hockney) model of one training step in each mode, for projecting measured
// runs to world sizes one machine cannot reach. A message of n bytes over one link costs
// alpha + n * beta. Per step, with N gradient bytes and p ranks:
//   allreduce (ring):       2(p-1) alpha + 2(p-1)/p N beta       (Patarasuk & Yuan 2009)
//   ps, collective:         2 [(p-1) alpha + N beta]   pipelined chain reduce + broadcast
//   ps, p2p (incast):       2 (p-1) (alpha + N beta)   every transfer through the reducer's link
// and ps also scatters the inputs and gathers the logits and their gradients through the
// reducer: (p-1)/p * B * (F + 2C) * 4 bytes * beta. Compute comes from a measured single-rank
// run: per-sample time c (data wait, forward, backward) and the optimizer step t_opt.
// allreduce hides the non-exposed share of its communication behind backward; ps hides none.
#pragma once

#include <string>
#include <vector>

namespace dpbench {

struct LinkModel {
  std::string name;            // "pcie4", "measured", ...
  double alpha_s = 0;          // per-message latency, seconds
  double beta_s_per_byte = 0;  // 1 / bandwidth
  std::string source;          // where the numbers come from
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
  double exposed_fraction = 1.0;    // allreduce: exposed / total communication
};

struct StepPrediction {
  double compute_s = 0;
  double comm_s = 0;   // total communication time
  double step_s = 0;   // compute + exposed communication
};

// Step time of `mode` ("allreduce", "ps_collective" or "ps_p2p") at world size p where every
// rank computes `per_rank_batch` samples on its own device. compute_share: the fraction of the
// calibration device each rank gets (1 for separate devices; 1/p for p ranks sharing it).
// Throws Error on an unknown mode or p < 1.
StepPrediction predict_step(const StepModel& model, const LinkModel& link, const std::string& mode,
                            int p, double per_rank_batch, double compute_share = 1.0);

// The modes predict_step knows.
const std::vector<std::string>& projected_modes();

}  // namespace dpbench
