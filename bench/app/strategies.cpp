#include "bench/app/strategies.hpp"

#include <fmt/format.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "ps/parameter_server.hpp"

namespace dpbench {

namespace {

// "ps (collective)": the mode and the transport it ran.
std::string name_and_transport(const std::string& name, const std::string& transport) {
  return fmt::format("{} ({})", name, transport);
}

// ---- ps: DataParallel, rank 0 reduces, steps and broadcasts ---------------------------------

std::string ps_transport(const TrainConfig& c) { return c.transport; }
std::string ps_label(const TrainConfig& c) { return name_and_transport("ps", c.transport); }

// None: its comm time mixes the reduce and broadcast with the batch scatter and gather, so no
// one collective's bandwidth can be read off it.
std::optional<BusBandwidth> ps_bus_bandwidth(const TrainConfig&, double) { return std::nullopt; }

// Gradients reduced to and parameters broadcast from rank 0 through its link, plus the batch
// scatter / logit gather of DataParallel; nothing overlaps.
double ps_comm_time(const StepModel& m, const LinkModel& link, const std::string& transport, int p, double b) {
  const double n = m.param_bytes;
  const double params_and_grads =
      transport == "p2p" ? 2.0 * incast_s(link, p, n) : 2.0 * pipelined_root_s(link, p, n);
  return params_and_grads + root_batch_traffic_s(m, link, p, b);
}

// ---- allreduce: DistributedDataParallel, bucketed ring all-reduce ---------------------------

std::string ring_transport(const TrainConfig&) { return "ring"; }
std::string allreduce_label(const TrainConfig&) { return name_and_transport("allreduce", "ring"); }

// The gradient all-reduce: algbw counts the gradient bytes, busbw = algbw * 2(p-1)/p.
std::optional<BusBandwidth> allreduce_bus_bandwidth(const TrainConfig& c, double param_bytes) {
  const double p = c.world_size;
  return BusBandwidth{"all-reduce", param_bytes, 2.0 * (p - 1.0) / p};
}

double allreduce_comm_time(const StepModel& m, const LinkModel& link, const std::string&, int p, double) {
  return ring_allreduce_s(link, p, m.param_bytes);
}

}  // namespace

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> list = {
      {.name = "ps",
       .description = "DataParallel: rank 0 reduces gradients, steps the optimizer, broadcasts parameters",
       .validate = &validate_parameter_server, .train = &train_parameter_server,
       .transports = {"collective", "p2p"}, .transport = &ps_transport, .label = &ps_label,
       .bus_bandwidth = &ps_bus_bandwidth,
       .overlaps_backward = false, .has_reducer = true, .reference = true,
       .projected = {{"ps_collective", "collective"}, {"ps_p2p", "p2p"}}, .comm_time = &ps_comm_time},
      {.name = "allreduce",
       .description = "DistributedDataParallel: bucketed ring all-reduce overlapping backward",
       .validate = &validate_allreduce, .train = &train_allreduce,
       .transports = {}, .transport = &ring_transport, .label = &allreduce_label,
       .bus_bandwidth = &allreduce_bus_bandwidth,
       .overlaps_backward = true, .has_reducer = false, .reference = false,
       .projected = {{"allreduce", "ring"}}, .comm_time = &allreduce_comm_time},
  };
  return list;
}

const Strategy& find_strategy(const std::string& name) {
  std::string names;
  for (const auto& s : strategies()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw InputError(fmt::format("--mode {}: unknown mode (available: {})", name, names));
}

const Strategy& reference_strategy() {
  for (const auto& s : strategies()) {
    if (s.reference) return s;
  }
  throw Error("strategy registry: no strategy is marked as the reference");
}

const std::string& projected_key(const Strategy& s, const TrainConfig& config) {
  const std::string transport = s.transport(config);
  for (const auto& m : s.projected) {
    if (m.transport == transport) return m.key;
  }
  throw Error(fmt::format("mode {}: no projection for transport {}", s.name, transport));
}

const std::vector<ProjectedCurve>& projected_modes() {
  static const std::vector<ProjectedCurve> curves = [] {
    std::vector<ProjectedCurve> out;
    // Non-reference strategies first, as the projection table has always listed allreduce first.
    for (const bool reference : {false, true}) {
      for (const auto& s : strategies()) {
        if (s.reference != reference) continue;
        for (const auto& m : s.projected) {
          TrainConfig c;
          c.mode = s.name;
          c.transport = m.transport;
          out.push_back({&s, m, s.label(c)});
        }
      }
    }
    return out;
  }();
  return curves;
}

StepPrediction predict_step(const StepModel& model, const LinkModel& link, const std::string& key, int p,
                            double per_rank_batch, double compute_share) {
  for (const auto& curve : projected_modes()) {
    if (curve.mode.key != key) continue;
    const Strategy& s = *curve.strategy;
    const double comm = p >= 2 ? s.comm_time(model, link, curve.mode.transport, p, per_rank_batch) : 0.0;
    return combine_step(model, p, per_rank_batch, compute_share, comm,
                        s.overlaps_backward ? model.exposed_fraction : 1.0);
  }
  throw Error(fmt::format("projection mode {}: unknown", key));
}

}  // namespace dpbench
