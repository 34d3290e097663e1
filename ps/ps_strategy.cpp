// The `ps` strategy's traits (train/strategy.hpp): DataParallel's reducer is the reference the
// other strategies are compared with; its transports, labels and alpha-beta terms.
#include <fmt/format.h>

#include "ps/parameter_server.hpp"

namespace dpbench {

namespace {

std::string ps_transport(const TrainConfig& c) { return c.transport; }
std::string ps_label(const TrainConfig& c) { return fmt::format("ps ({})", c.transport); }

// None: its comm time mixes the reduce and broadcast with the batch scatter and gather, so no
// one collective's bandwidth can be read off it.
std::optional<BusBandwidth> ps_bus_bandwidth(const TrainConfig&, double) { return std::nullopt; }

// Gradients reduced to and parameters broadcast from rank 0 through its link, plus the batch
// scatter / logit gather of DataParallel; nothing overlaps.
double ps_comm_time(const StepModel& m, const LinkModel& link, const std::string& transport, int p, double b) {
  const double n = m.param_bytes;
  const double params_and_grads =
      transport == "p2p" ? 2.0 * incast_s(link, p, n) : reduce_s(link, p, n) + broadcast_s(link, p, n);
  return params_and_grads + root_batch_traffic_s(m, link, p, b);
}

// DataParallel's data flow over gloo (collective), or PyTorch's RPC parameter server (p2p).
std::string ps_pytorch(const TrainConfig& c) { return c.transport == "p2p" ? "rpc_ps" : "dataparallel"; }

}  // namespace

const Strategy& parameter_server_strategy() {
  static const Strategy strategy{
      .name = "ps",
      .description = "DataParallel: rank 0 reduces gradients, steps the optimizer, broadcasts parameters",
      .validate = &validate_parameter_server, .train = &train_parameter_server,
      .transports = {"collective", "p2p"}, .transport = &ps_transport, .label = &ps_label,
      .bus_bandwidth = &ps_bus_bandwidth,
      .has_reducer = true, .reference = true,
      .projected = {{"ps_collective", "collective", 0.0}, {"ps_p2p", "p2p", 0.0}}, .comm_time = &ps_comm_time,
      .pytorch_counterpart = &ps_pytorch,
  };
  return strategy;
}

}  // namespace dpbench
