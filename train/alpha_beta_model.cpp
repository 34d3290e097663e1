#include "train/alpha_beta_model.hpp"

#include <algorithm>
#include <vector>

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

double ring_allreduce_s(const LinkModel& link, int p, double bytes) {
  const double pd = p;
  return 2.0 * (pd - 1.0) * link.alpha_s + 2.0 * (pd - 1.0) / pd * bytes * link.beta_s_per_byte;
}

double pipelined_root_s(const LinkModel& link, int p, double bytes) {
  return (p - 1.0) * link.alpha_s + bytes * link.beta_s_per_byte;
}

namespace {
bool gloo_collectives(const LinkModel& link) { return link.collectives == CollectiveFamily::gloo; }
int ceil_log2(int p) {
  int d = 0;
  while ((1 << d) < p) ++d;
  return d;
}
}  // namespace

double reduce_s(const LinkModel& link, int p, double bytes) {
  if (!gloo_collectives(link)) return pipelined_root_s(link, p, bytes);
  return 2.0 * ((p - 1.0) * link.alpha_s + (p - 1.0) / p * bytes * link.beta_s_per_byte);
}

double broadcast_s(const LinkModel& link, int p, double bytes) {
  if (!gloo_collectives(link)) return pipelined_root_s(link, p, bytes);
  // Virtual rank v has the data at done[v]; it then starts all its sends at once, which share its
  // link, so each child has the data after (its parent's children) (alpha + bytes beta).
  const int d = ceil_log2(p);
  std::vector<double> done(static_cast<std::size_t>(p), 0.0);
  double last = 0;
  for (int v = 0; v < p; ++v) {
    int bits = 0;
    while ((1 << bits) <= v) ++bits;
    std::vector<int> children;
    for (int i = bits; i < d; ++i) {
      if (v + (1 << i) < p) children.push_back(v + (1 << i));
    }
    for (int c : children) {
      done[static_cast<std::size_t>(c)] = done[static_cast<std::size_t>(v)] +
                                          static_cast<double>(children.size()) *
                                              (link.alpha_s + bytes * link.beta_s_per_byte);
      last = std::max(last, done[static_cast<std::size_t>(c)]);
    }
  }
  return last;
}

double reduce_scatter_s(const LinkModel& link, int p, double bytes) {
  if (gloo_collectives(link)) return p * reduce_s(link, p, bytes / p);
  return (p - 1.0) * link.alpha_s + (p - 1.0) / p * bytes * link.beta_s_per_byte;
}

double allgather_s(const LinkModel& link, int p, double bytes) {
  return (p - 1.0) * link.alpha_s + (p - 1.0) / p * bytes * link.beta_s_per_byte;
}

double incast_s(const LinkModel& link, int p, double bytes) {
  return (p - 1.0) * (link.alpha_s + bytes * link.beta_s_per_byte);
}

double root_batch_traffic_s(const StepModel& m, const LinkModel& link, int p, double b) {
  return (p - 1.0) * b * (m.sample_bytes + 2.0 * m.logit_bytes) * link.beta_s_per_byte + 3.0 * link.alpha_s;
}

double StepModel::compute_slowdown(int p) const {
  if (!(host_cores > 0) || p < 2) return 1.0;
  return host_slowdown_at_2 * std::max(1.0, p / host_cores) / std::max(1.0, 2.0 / host_cores);
}

StepPrediction combine_step(const StepModel& m, int p, double b, double compute_share, double comm_s,
                            double exposed_fraction) {
  if (p < 1) throw Error(fmt::format("world size {}: must be at least 1", p));
  StepPrediction out;
  out.compute_s = (b * m.per_sample_compute_s / compute_share + m.optimizer_s) * m.compute_slowdown(p);
  out.comm_s = p == 1 ? 0.0 : comm_s;
  out.step_s = out.compute_s + exposed_fraction * out.comm_s;
  return out;
}

}  // namespace dpbench
