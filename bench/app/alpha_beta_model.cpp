#include "bench/app/alpha_beta_model.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

LinkModel link_preset(const std::string& name) {
  // Bandwidths are the design figures of the interconnect (achievable PCIe, NVLink 4 ring busbw,
  // NDR 400 Gb/s per GPU); latencies are typical per-hop software + link latencies.
  if (name == "pcie4") return {"pcie4", 5e-6, 1.0 / 25e9, "preset: PCIe 4.0 x16, 25 GB/s achievable"};
  if (name == "pcie5") return {"pcie5", 5e-6, 1.0 / 50e9, "preset: PCIe 5.0 x16, 50 GB/s achievable"};
  if (name == "nvlink4") return {"nvlink4", 3e-6, 1.0 / 370e9, "preset: NVLink 4, 370 GB/s ring busbw"};
  if (name == "ib-ndr") return {"ib-ndr", 5e-6, 1.0 / 50e9, "preset: InfiniBand NDR, 50 GB/s per GPU"};
  throw InputError(fmt::format("--link {}: unknown link (choose measured, pcie4, pcie5, nvlink4, ib-ndr)", name));
}

const std::vector<std::string>& projected_modes() {
  static const std::vector<std::string> modes = {"allreduce", "ps_collective", "ps_p2p"};
  return modes;
}

StepPrediction predict_step(const StepModel& m, const LinkModel& link, const std::string& mode,
                            int p, double b, double compute_share) {
  if (p < 1) throw Error(fmt::format("world size {}: must be at least 1", p));
  const double pd = p;
  const double a = link.alpha_s, beta = link.beta_s_per_byte, n = m.param_bytes;
  StepPrediction out;
  out.compute_s = b * m.per_sample_compute_s / compute_share + m.optimizer_s;
  if (p == 1) {
    out.step_s = out.compute_s;
    return out;
  }
  if (mode == "allreduce") {
    out.comm_s = 2.0 * (pd - 1.0) * a + 2.0 * (pd - 1.0) / pd * n * beta;
    out.step_s = out.compute_s + m.exposed_fraction * out.comm_s;
    return out;
  }
  // The reducer scatters the inputs of the global batch, gathers the logits and scatters their
  // gradients: the other ranks' share of B = p * b samples crosses its link.
  const double batch_traffic = (pd - 1.0) * b * (m.sample_bytes + 2.0 * m.logit_bytes) * beta + 3.0 * a;
  if (mode == "ps_collective") {
    out.comm_s = 2.0 * ((pd - 1.0) * a + n * beta) + batch_traffic;
  } else if (mode == "ps_p2p") {
    out.comm_s = 2.0 * (pd - 1.0) * (a + n * beta) + batch_traffic;
  } else {
    throw Error(fmt::format("projection mode {}: unknown", mode));
  }
  out.step_s = out.compute_s + out.comm_s;
  return out;
}

}  // namespace dpbench
