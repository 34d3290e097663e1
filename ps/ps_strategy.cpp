// The `ps` strategy's traits (train/strategy.hpp): DataParallel's root is the reference the
// other strategies are compared with; its transports, labels and alpha-beta terms.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ps/data_parallel.hpp"
#include "train/sparse_grad.hpp"

namespace dpbench {

namespace {

Transport ps_transport(const TrainConfig& config) { return config.transport; }
std::string ps_label(const TrainConfig& config) {
  if (config.model.dlrm.sparse_grad) return "ps (sparse gather)";
  return fmt::format("ps ({}{})", name(config.transport),
                     config.hierarchy == Hierarchy::node ? ", node hierarchy" : "");
}

// None: its comm time mixes the reduce and broadcast with the batch scatter and gather, so no
// one collective's bandwidth can be read off it.
std::optional<BusBandwidth> ps_bus_bandwidth(const TrainConfig&, double) { return std::nullopt; }

// Gradients reduced to and parameters broadcast from rank 0 through its link, plus the batch
// scatter / logit gather of DataParallel; nothing overlaps.
double ps_comm_time(const StepModel& m, const LinkModel& link, Transport transport, int p, double b) {
  const double n = m.param_bytes;
  const double params_and_grads = transport == Transport::p2p ? 2.0 * incast_s(link, p, n)
                                                              : reduce_s(link, p, n) + broadcast_s(link, p, n);
  return params_and_grads + root_batch_traffic_s(m, link, p, b);
}

// DataParallel's data flow over gloo (collective), or PyTorch's RPC parameter server (p2p).
std::string ps_pytorch(const TrainConfig& config) {
  return config.transport == Transport::p2p ? "rpc_ps" : "dataparallel";
}

// --sparse-grad as sparse_data_parallel.cpp runs it: every rank a compact replica; the root also
// every table, their gradient sums (and Adagrad's sums of squares) and the dense layers'
// optimizer state, which the workers do not hold; the local backend's chain relays the dense
// layers' broadcast and reduce.
std::vector<RankMemory> sparse_ps_memory(const MemoryInputs& in) {
  const TrainConfig& config = in.config;
  const double dense = in.num_params - static_cast<double>(config.model.dlrm.embedding_params());
  std::vector<RankMemory> ranks;
  for (int r = 0; r < config.world_size; ++r) {
    const bool root = r == 0;
    RankMemory m = sparse_rank_memory(in, root ? static_cast<double>(config.model.dlrm.rows) : 0.0, root);
    m.role = root ? "root" : "worker";
    if (!root) m[MemoryCategory::optimizer_state] = 0;
    if (config.world_size > 1) m[MemoryCategory::comm_buffers] = chain_relay_bytes(config, r, 0, dense);
    ranks.push_back(m);
  }
  return ranks;
}

// DataParallel's ranks: rank 0 the root (master parameters, gradients and optimizer state, the
// whole batch's loader and gathered logits, plus its own replica and chunk), the others a replica
// and their chunk. One rank: plain training on the master parameters, no replica.
std::vector<RankMemory> ps_memory(const MemoryInputs& in) {
  if (in.config.model.dlrm.sparse_grad) return sparse_ps_memory(in);
  const TrainConfig& config = in.config;
  const int p = config.world_size;
  const double n = in.num_params, B = static_cast<double>(config.global_batch), f = sizeof(float);
  const std::vector<std::size_t> rows = config.rank_batches.empty() ? chunk_sizes(config.global_batch, p)
                                                                    : config.rank_batches;
  const double group = std::max<double>(1.0, std::floor(config.ps.coalesce_mb * 1024.0 * 1024.0 / f));
  std::vector<RankMemory> ranks;
  for (int r = 0; r < p; ++r) {
    const auto b = static_cast<double>(rows[static_cast<std::size_t>(r)]);
    RankMemory m;
    m.role = r == 0 ? "root" : "worker";
    const double replicas = p > 1 ? 1.0 : 0.0;  // the replica's parameters, gradients and chunk
    const double master = r == 0 ? 1.0 : 0.0;
    m[MemoryCategory::parameters] = (replicas + master) * n * f + in.buffer_floats * f;
    m[MemoryCategory::gradients] = (replicas + master) * n * f;
    m[MemoryCategory::optimizer_state] = master * optimizer_bytes(config, n);
    m[MemoryCategory::activations] = in.activation_bytes(std::max(b, 1.0)) + replicas * 2.0 * b * in.classes * f +
                                     master * 2.0 * B * in.classes * f;
    m[MemoryCategory::data_staging] = replicas * b * in.input_floats * f + master * loader_bytes(in, B);
    // The local backend's chain relay; the node hierarchy's rings relay nothing.
    m[MemoryCategory::comm_buffers] = config.transport == Transport::p2p ? master * replicas * n * f
                                      : config.hierarchy == Hierarchy::node
                                          ? 0.0
                                          : chain_relay_bytes(config, r, 0, std::min(n, group));
    ranks.push_back(m);
  }
  return ranks;
}

// The messages of a --sparse-grad ps step whose every rank pulls `rows` rows, in order: before
// forward the dense layers' broadcast, the all-gather of the counts, the gather of the ids and the
// scatter of the rows; after backward the dense layers' reduce and the gather of the rows'
// gradients.
void sparse_ps_refresh(Collectives& comm, const ScheduleInputs& in, double rows) {
  const auto p = static_cast<std::size_t>(in.config.world_size);
  const std::size_t dim = in.config.model.dlrm.dim, n = static_cast<std::size_t>(std::llround(rows));
  comm.broadcast(sparse_dense_floats(in), 0);
  comm.allgatherv(std::vector<std::size_t>(p, 1));
  comm.gatherv(std::vector<std::size_t>(p, 2 * n), 0);
  comm.scatterv(std::vector<std::size_t>(p, dim * n), 0);
}
void sparse_ps_push(Collectives& comm, const ScheduleInputs& in, double rows) {
  const auto p = static_cast<std::size_t>(in.config.world_size);
  const std::size_t dim = in.config.model.dlrm.dim, n = static_cast<std::size_t>(std::llround(rows));
  comm.reduce(sparse_dense_floats(in), 0);
  comm.gatherv(std::vector<std::size_t>(p, dim * n), 0);
}

// --sparse-grad as sparse_data_parallel.cpp runs it (above), every rank pulling the same number
// of rows: the one that makes the ranks' mean bytes sent per step the measured one
// (sparse_rows_from_bytes).
void sparse_ps_schedule(const ScheduleInputs& in, StepSchedule& s) {
  const double rows = sparse_rows_from_bytes(in, [&](Collectives& comm, double r) {
    sparse_ps_refresh(comm, in, r);
    sparse_ps_push(comm, in, r);
  });
  Collectives comm(s, in.engine);
  sparse_before_forward(s, in);
  sparse_ps_refresh(comm, in, rows);
  sparse_forward_backward(s, in);
  sparse_ps_push(comm, in, rows);
  s.compute(0, 0, in.compute.at(0).optimizer, "optimizer");
}

// DataParallel (torch/nn/parallel/data_parallel.py) as data_parallel.cpp runs it: the root
// loads the whole batch; replicate (the parameters broadcast in coalesced groups, or sent to each
// worker in turn under p2p); scatter of the inputs; every replica's forward; gather of the
// logits; scatter of their gradient; backward; reduce_add (coalesced groups, or received from
// each worker in turn); the root's optimizer step. Nothing overlaps.
void ps_schedule(const ScheduleInputs& in, StepSchedule& s) {
  s.set_reduction(in.reduction);
  if (in.config.model.dlrm.sparse_grad) return sparse_ps_schedule(in, s);
  const int p = s.world_size();
  const TrainConfig& config = in.config;
  const bool p2p = config.transport == Transport::p2p;
  const std::size_t n = in.num_params;
  const auto group = std::max<std::size_t>(1, static_cast<std::size_t>(config.ps.coalesce_mb * 1024.0 * 1024.0) /
                                                  sizeof(float));
  const std::vector<std::size_t> rows = config.rank_batches.empty() ? chunk_sizes(config.global_batch, p)
                                                                    : config.rank_batches;
  std::vector<std::size_t> inputs, logits;
  for (std::size_t b : rows) {
    inputs.push_back(b * in.input_floats);
    logits.push_back(b * in.classes);
  }
  Collectives comm(s, in.engine, 0);
  comm.set_node_hierarchy(config.hierarchy == Hierarchy::node ? hierarchy_ranks_per_node(config) : 0);
  s.compute(0, 0, in.compute.at(0).data, "data");
  for (int w = 1; p2p && w < p; ++w) comm.send_recv(n, 0, w);
  for (std::size_t off = 0; !p2p && off < n; off += group) comm.broadcast(std::min(group, n - off), 0);
  comm.scatterv(inputs, 0);
  for (int r = 0; r < p; ++r) s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).forward, "forward");
  comm.gatherv(logits, 0);
  comm.scatterv(logits, 0);
  for (int r = 0; r < p; ++r) s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).backward, "backward");
  for (int w = 1; p2p && w < p; ++w) {
    comm.send_recv(n, w, 0);
    comm.reduction(0, n);  // the root adds each worker's gradients as they come (reduce_p2p)
  }
  for (std::size_t off = 0; !p2p && off < n; off += group) comm.reduce(std::min(group, n - off), 0);
  s.compute(0, 0, in.compute.at(0).optimizer, "optimizer");
}

// The root's coalescing group (no command-line option) in a run's config block.
void ps_config_json(const TrainConfig& config, nlohmann::json& j) { j["coalesce_mb"] = config.ps.coalesce_mb; }

}  // namespace

const Strategy& data_parallel_strategy() {
  static const Strategy strategy{
      .mode = Mode::ps,
      .description = "DataParallel: rank 0 reduces gradients, steps the optimizer, broadcasts parameters",
      .validate = &validate_data_parallel,
      .train = &train_data_parallel,
      .transports = {Transport::collective, Transport::p2p},
      .transport = &ps_transport,
      .label = &ps_label,
      .bus_bandwidth = &ps_bus_bandwidth,
      .has_root = true,
      .baseline = true,
      .projected = {{"ps_collective", Transport::collective, 0.0}, {"ps_p2p", Transport::p2p, 0.0}},
      .comm_time = &ps_comm_time,
      .pytorch_counterpart = &ps_pytorch,
      .memory = &ps_memory,
      .config_json = &ps_config_json,
      .schedule = &ps_schedule,
      .probed_collectives = &data_parallel_probed_collectives,
      .sparse_grad = true,
  };
  return strategy;
}

}  // namespace dpbench
