// The `sharded_ps` strategy's traits (train/strategy.hpp): the BytePS-style sharded parameter
// server; its transports, labels, bus bandwidth and alpha-beta terms (with K = p servers).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/ring.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "sharded_ps/stale_sync.hpp"
#include "train/sparse_grad.hpp"
#include "train/alpha_beta_model.hpp"

namespace dpbench {

namespace {

Transport sharded_transport(const TrainConfig& config) { return config.transport; }

// "sharded_ps (collective)"; the server count when not every rank is one.
std::string sharded_label(const TrainConfig& config) {
  if (config.model.dlrm.sparse_grad) return "sharded_ps (sparse push/pull)";
  if (config.sharded_ps.servers > 0 && config.sharded_ps.servers < config.world_size) {
    return fmt::format("sharded_ps ({}, {} servers)", name(config.transport), config.sharded_ps.servers);
  }
  if (config.sharded_ps.staleness > 0)
    return fmt::format("sharded_ps ({}, staleness {})", name(config.transport), config.sharded_ps.staleness);
  return fmt::format("sharded_ps ({}{})", name(config.transport),
                     config.hierarchy == Hierarchy::node ? ", node hierarchy" : "");
}

// With every rank a server, the push is a reduce-scatter and the pull an all-gather of the
// parameters: all-reduce's traffic, so busbw = algbw * 2(p-1)/p as for a ring all-reduce.
// None with fewer servers, whose links carry more than the others'.
std::optional<BusBandwidth> sharded_bus_bandwidth(const TrainConfig& config, double param_bytes) {
  if (server_count(config) != config.world_size) return std::nullopt;
  const double p = config.world_size;
  return BusBandwidth{"reduce-scatter + all-gather", param_bytes, 2.0 * (p - 1.0) / p};
}

// K = p servers. collective: reduce-scatter + all-gather (a ring: 2(p-1) alpha + 2(p-1)/p N beta);
// p2p: each server's link takes p-1 pushes of N/p and gives p-1 pulls of N/p.
double sharded_comm_time(const StepModel& m, const LinkModel& link, Transport transport, int p, double) {
  const double n = m.param_bytes;
  if (transport == Transport::p2p) return 2.0 * incast_s(link, p, n / p);
  return reduce_scatter_s(link, p, n) + allgather_s(link, p, n);
}

// PyTorch's RPC parameter server: one server holding every parameter and its optimizer state,
// workers that compute their own loss and push gradients, as sharded_ps with one server does.
std::string sharded_pytorch(const TrainConfig&) { return "rpc_ps"; }

// Every rank a replica; server k also holds its range's gradient sum and optimizer state (and,
// p2p, a receive buffer of the range); one rank alone is plain training.
std::vector<RankMemory> sharded_memory(const MemoryInputs& in) {
  const TrainConfig& config = in.config;
  if (config.model.dlrm.sparse_grad) {  // sparse_embeddings.cpp: each server's block of rows, and their sums
    std::vector<RankMemory> ranks;
    for (int r = 0; r < config.world_size; ++r) {
      const Chunk own = ring_chunk(config.model.dlrm.rows, config.world_size, r);
      ranks.push_back(sparse_rank_memory(in, static_cast<double>(own.length), true));
      ranks.back().role = "server";
    }
    return ranks;
  }
  const ShardLayout layout = shard_layout_for(config, static_cast<std::size_t>(in.num_params));
  std::vector<RankMemory> ranks;
  for (int r = 0; r < config.world_size; ++r) {
    const auto mine = static_cast<double>(layout.counts[static_cast<std::size_t>(r)]);
    RankMemory m = replica_memory(in, replica_rows(config, r));
    m.role = mine > 0 ? "server" : "worker";
    m[MemoryCategory::optimizer_state] = optimizer_bytes(config, mine);
    if (config.world_size > 1) {
      m[MemoryCategory::gradients] += mine * sizeof(float);
      if (config.transport == Transport::p2p) m[MemoryCategory::comm_buffers] = mine * sizeof(float);
      // --staleness S: S + 1 parameter versions and S + 1 pushes in flight (stale_sync.hpp).
      const double slots = config.sharded_ps.staleness > 0 ? config.sharded_ps.staleness + 1.0 : 0.0;
      m[MemoryCategory::parameters] += slots * in.num_params * sizeof(float);
      m[MemoryCategory::comm_buffers] += slots * in.num_params * sizeof(float);
    }
    ranks.push_back(m);
  }
  return ranks;
}

// --sparse-grad as sparse_embeddings.cpp runs it: before forward, the pull, in p - 1 rounds of
// sendrecv (the count of rows asked of the server at +d, their ids, and the rows back from it);
// after backward the dense layers' all-reduce, then the push of the rows' gradients in p - 1
// rounds. Each worker asks each server for the same number of rows: the runs' mean, from the
// measured bytes (sparse_rows_per_peer).
void sparse_sharded_schedule(const ScheduleInputs& in, StepSchedule& s) {
  const int p = s.world_size();
  const double dim = static_cast<double>(in.config.model.dlrm.dim) * sizeof(float);
  const double rows = sparse_rows_per_peer(in, sizeof(float), 2 * sizeof(float) + 2 * dim);
  sparse_before_forward(s, in);
  for (int d = 1; d < p; ++d) {
    sendrecv_round(s, d, sizeof(float));
    sendrecv_round(s, d, rows * 2 * sizeof(float));
    sendrecv_round(s, -d, rows * dim);
  }
  sparse_forward_backward(s, in);
  Collectives(s, in.engine).allreduce(sparse_dense_floats(in));
  for (int d = 1; d < p; ++d) sendrecv_round(s, d, rows * dim);
  sparse_optimizer(s, in);
}

// BytePS / Li et al.: collective: each bucket's push is a reduce-scatter over the servers'
// ranges on the communication stream (1) as backward readies it; p2p: after backward, every
// worker sends each server its range in turn (server k receives from the workers in rank order).
// Then every server steps its range, and the pull brings every range to every worker (an
// all-gather, or each server sending to the workers in turn). As sharded_ps.cpp runs it.
void sharded_schedule(const ScheduleInputs& in, StepSchedule& s) {
  s.set_reduction(in.reduction);
  if (in.config.model.dlrm.sparse_grad) return sparse_sharded_schedule(in, s);
  const int p = s.world_size();
  const ShardLayout layout = shard_layout_for(in.config, in.num_params);
  Collectives main(s, in.engine, 0), side(s, in.engine, 1);
  const int node_ranks = in.config.hierarchy == Hierarchy::node ? hierarchy_ranks_per_node(in.config) : 0;
  main.set_node_hierarchy(node_ranks);
  side.set_node_hierarchy(node_ranks);
  if (in.config.transport != Transport::p2p) {
    const std::vector<BucketEvents> events = replica_forward_backward(s, in);
    for (std::size_t b = 0; b < in.buckets.size(); ++b) {
      for (int r = 0; r < p; ++r) s.wait_event(r, 1, events[static_cast<std::size_t>(r)].ready[b]);
      side.reduce_scatterv(shard_counts_within(layout, in.buckets[b].offset, in.buckets[b].size));
    }
    replica_optimizer_after_buckets(s, in, events);
    return main.allgatherv(layout.counts);
  }
  for (int r = 0; r < p; ++r) {
    const RankCompute& c = in.compute.at(static_cast<std::size_t>(r));
    s.compute(r, 0, c.data, "data");
    s.compute(r, 0, c.forward, "forward");
    s.compute(r, 0, c.backward, "backward");
  }
  // The push, server by server; each server's step; the pull, server by server.
  for (int k = 0; k < p; ++k) {
    for (int w = 0; w < p && layout.counts[static_cast<std::size_t>(k)] > 0; ++w) {
      if (w == k) continue;
      main.send_recv(layout.counts[static_cast<std::size_t>(k)], w, k);
      main.reduction(k, layout.counts[static_cast<std::size_t>(k)]);
    }
  }
  for (int r = 0; r < p; ++r) s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).optimizer, "optimizer");
  for (int k = 0; k < p; ++k) {
    for (int w = 0; w < p && layout.counts[static_cast<std::size_t>(k)] > 0; ++w) {
      if (w != k) main.send_recv(layout.counts[static_cast<std::size_t>(k)], k, w);
    }
  }
}

// The servers and the staleness bound.
// --servers: what a run and its memory model take.
void add_servers_option(CLI::App& app, TrainConfig& config) {
  app.add_option("--servers", config.sharded_ps.servers,
                 "sharded_ps: number of server ranks K (ranks 0..K-1 each serve 1/K of the parameters "
                 "and their optimizer state); 0 = every rank")
      ->capture_default_str();
}

void add_sharded_ps_options(CLI::App& app, TrainConfig& config) {
  add_servers_option(app, config);
  app.add_option("--staleness", config.sharded_ps.staleness,
                 "sharded_ps: stale-synchronous parallel (SSP, Ho et al. 2013): a worker computes on the newest "
                 "parameters it has and runs up to S steps ahead of the slowest, its pushes and pulls on its "
                 "communication thread; 0 = synchronous (collective transport, --device cpu)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--staleness-replay", config.sharded_ps.staleness_replay,
                 "sharded_ps --staleness S: deterministic replay, each worker computing at step t on version t - d, "
                 "d drawn from this seed (uniform in 0..S): reproducible, for tests and replays")
      ->check(CLI::NonNegativeNumber);
}

// --servers, --staleness, --staleness-replay in a run's config block.
void sharded_config_json(const TrainConfig& config, nlohmann::json& j) {
  j["servers"] = config.sharded_ps.servers;
  j["staleness"] = config.sharded_ps.staleness;
  j["staleness_replay"] = config.sharded_ps.staleness_replay;
}

// sharded_ps --staleness: the bound, the replay seed, and the histogram of the timed steps'
// staleness over every rank (how many versions old the parameters each step computed on were),
// with every rank's own.
void sharded_run_json(const RunResult& run, nlohmann::json& j) {
  const TrainConfig& config = run.config;
  if (config.sharded_ps.staleness <= 0) return;
  std::vector<std::vector<int>> all;
  nlohmann::json per_rank = nlohmann::json::array();
  double sum = 0, count = 0;
  for (const RankResult& r : run.ranks) {
    all.push_back(r.step_staleness);
    per_rank.push_back(staleness_histogram({r.step_staleness}, config.run.warmup_steps, config.sharded_ps.staleness));
  }
  const std::vector<long> histogram = staleness_histogram(all, config.run.warmup_steps, config.sharded_ps.staleness);
  for (std::size_t s = 0; s < histogram.size(); ++s) {
    sum += static_cast<double>(s) * static_cast<double>(histogram[s]);
    count += static_cast<double>(histogram[s]);
  }
  j["staleness"] = {{"bound", config.sharded_ps.staleness},
                    {"replay_seed", config.sharded_ps.staleness_replay >= 0
                                        ? nlohmann::json(config.sharded_ps.staleness_replay)
                                        : nlohmann::json()},
                    {"histogram", histogram},
                    {"mean", count > 0 ? sum / count : 0.0},
                    {"per_rank_histogram", per_rank}};
}

// --staleness (any value but 0), which no other mode has.
std::optional<OwnOption> sharded_own_option(const TrainConfig& config) {
  if (config.sharded_ps.staleness == 0) return std::nullopt;
  return OwnOption{fmt::format("--staleness {}", config.sharded_ps.staleness), "a bounded-staleness mode"};
}

// A --staleness run's steps overlap one another's pushes and pulls.
std::string sharded_unsimulated(const TrainConfig& config) {
  return config.sharded_ps.staleness > 0 ? kStaleStepsNotSimulated : "";
}

}  // namespace

const Strategy& sharded_ps_strategy() {
  static const Strategy strategy{
      .mode = Mode::sharded_ps,
      .description = "sharded parameter server (BytePS): every rank serves 1/K of the parameters and "
                     "their optimizer state; push gradients, step, pull parameters",
      .validate = &validate_sharded_ps,
      .train = &train_sharded_ps,
      .transports = {Transport::collective, Transport::p2p},
      .transport = &sharded_transport,
      .label = &sharded_label,
      .bus_bandwidth = &sharded_bus_bandwidth,
      .has_root = false,
      .baseline = false,
      // The collective push overlaps backward, the pull never does: half of its time may hide.
      .projected = {{"sharded_ps_collective", Transport::collective, 0.5}, {"sharded_ps_p2p", Transport::p2p, 0.0}},
      .comm_time = &sharded_comm_time,
      .pytorch_counterpart = &sharded_pytorch,
      .memory = &sharded_memory,
      .own_option_given = &sharded_own_option,
      .add_options = &add_sharded_ps_options,
      .add_memory_options = &add_servers_option,
      .config_json = &sharded_config_json,
      .run_json = &sharded_run_json,
      .schedule = &sharded_schedule,
      .probed_collectives = &sharded_ps_probed_collectives,
      // The collective push reduces DDP's buckets as backward readies them.
      .schedule_buckets = &model_schedule_buckets,
      .unsimulated = &sharded_unsimulated,
      .shards_optimizer = true,
      .sparse_grad = true,
  };
  return strategy;
}

}  // namespace dpbench
