// The `allreduce` strategy's traits (train/strategy.hpp): DDP's bucketed ring all-reduce, which
// overlaps backward; its label, bus bandwidth (nccl-tests all-reduce factor) and alpha-beta term.
#include <cmath>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "allreduce/ddp_trainer.hpp"
#include "train/sparse_grad.hpp"

namespace dpbench {

namespace {

Transport ring_transport(const TrainConfig&) { return Transport::ring; }
std::string allreduce_label(const TrainConfig& config) {
  if (config.model.dlrm.sparse_grad) return "allreduce (sparse all-gather)";
  std::string how = "ring";
  if (config.hierarchy == Hierarchy::node) how += ", node hierarchy";
  if (config.allreduce.comm_hook != CommHook{}) how += ", " + hook_name(config.allreduce.comm_hook);
  return "allreduce (" + how + ")";
}

// The gradient all-reduce: algbw counts the gradient bytes, busbw = algbw * 2(p-1)/p.
std::optional<BusBandwidth> allreduce_bus_bandwidth(const TrainConfig& config, double param_bytes) {
  const double p = config.world_size;
  return BusBandwidth{"all-reduce", param_bytes, 2.0 * (p - 1.0) / p};
}

double allreduce_comm_time(const StepModel& m, const LinkModel& link, Transport, int p, double) {
  return ring_allreduce_s(link, p, m.param_bytes);
}

// DistributedDataParallel over gloo.
std::string allreduce_pytorch(const TrainConfig&) { return "ddp"; }

// Every rank a full replica with the whole optimizer state (DDP; ZeRO's baseline).
std::vector<RankMemory> allreduce_memory(const MemoryInputs& in) {
  std::vector<RankMemory> ranks;
  if (in.config.model.dlrm.sparse_grad) {  // sparse_allreduce.cpp: every replica keeps every table
    const auto rows = static_cast<double>(in.config.model.dlrm.rows);
    for (int r = 0; r < in.config.world_size; ++r) ranks.push_back(sparse_rank_memory(in, rows, false));
    return ranks;
  }
  for (int r = 0; r < in.config.world_size; ++r) {
    RankMemory m = replica_memory(in, replica_rows(in.config, r));
    m[MemoryCategory::optimizer_state] = optimizer_bytes(in.config, in.num_params);
    ranks.push_back(m);
  }
  return ranks;
}

// --sparse-grad as sparse_allreduce.cpp runs it: after backward, the dense layers' all-reduce,
// then the all-gather of every rank's count of rows, their ids and their gradient rows (PyTorch's
// sparse all-reduce over gloo). Every rank gathers the same number of rows: the runs' mean, from
// the measured bytes (sparse_rows_per_peer).
void sparse_allreduce_schedule(const ScheduleInputs& in, StepSchedule& s) {
  const auto p = static_cast<std::size_t>(s.world_size());
  const std::size_t dim = in.config.model.dlrm.dim;
  const double rows = sparse_rows_per_peer(in, sizeof(float), static_cast<double>((2 + dim) * sizeof(float)));
  const auto n = static_cast<std::size_t>(std::llround(rows));
  sparse_before_forward(s, in);
  sparse_forward_backward(s, in);
  Collectives comm(s, in.engine);
  comm.allreduce(sparse_dense_floats(in));
  comm.allgatherv(std::vector<std::size_t>(p, 1));
  comm.allgatherv(std::vector<std::size_t>(p, 2 * n));
  comm.allgatherv(std::vector<std::size_t>(p, dim * n));
  sparse_optimizer(s, in);
}

// DDP (torch/csrc/distributed/c10d/reducer.cpp): forward, then backward readies the buckets one
// after the other; the communication stream (1) all-reduces each as soon as it is ready, while
// backward goes on; the optimizer waits for the last bucket.
void allreduce_schedule(const ScheduleInputs& in, StepSchedule& s) {
  s.set_reduction(in.reduction);
  if (in.config.model.dlrm.sparse_grad) return sparse_allreduce_schedule(in, s);
  const std::vector<BucketEvents> events = replica_forward_backward(s, in);
  Collectives comm(s, in.engine, 1);
  const BucketAllreduce how = bucket_allreduce(in.config);
  comm.set_node_hierarchy(how.ranks_per_node);
  comm.set_wire_format(how.format);
  comm.set_tree_allreduce(in.tree_ranks_per_node);
  for (std::size_t b = 0; b < in.buckets.size(); ++b) {
    for (int r = 0; r < s.world_size(); ++r) s.wait_event(r, 1, events[static_cast<std::size_t>(r)].ready[b]);
    if (in.buckets[b].allreduces.empty()) {
      comm.allreduce(in.buckets[b].size);
      continue;
    }
    for (const std::size_t n : in.buckets[b].allreduces) {
      if (n > 0) comm.allreduce(n);
    }
  }
  replica_optimizer_after_buckets(s, in, events);
}

// DDP's buckets and communication hook, PyTorch's names.
void add_allreduce_options(CLI::App& app, TrainConfig& config) {
  app.add_option("--bucket-cap-mb", config.allreduce.bucket_cap_mb,
                 "allreduce: DDP bucket_cap_mb, gradient bucket size in MiB (first bucket 1 MiB)")
      ->capture_default_str();
  app.add_option("--first-bucket-mb", config.allreduce.first_bucket_mb,
                 "allreduce: size of DDP's first gradient bucket in MiB (PyTorch's "
                 "_DEFAULT_FIRST_BUCKET_BYTES, 1 MiB); smaller lets a small model's first "
                 "all-reduce start before backward ends")
      ->capture_default_str();
  app.add_option_function<std::string>(
         "--comm-hook", [&config](const std::string& text) { config.allreduce.comm_hook = parse_comm_hook(text); },
         "allreduce: DDP communication hook, PyTorch's: allreduce (allreduce_hook), fp16 "
         "(fp16_compress_hook) or bf16 (bf16_compress_hook): buckets cross the wire in 16 bits; powersgd:R "
         "(powerSGD_hook, matrix_approximation_rank R, error feedback, warm start); host buffers")
      ->default_str(hook_name(config.allreduce.comm_hook));
  app.add_option("--start-powersgd-iter", config.allreduce.start_powersgd_iter,
                 "allreduce --comm-hook powersgd:R: the first step that compresses (PyTorch's start_powerSGD_iter, "
                 "at least 2; PyTorch's default is 1000); earlier steps all-reduce as they are (after the warm-up: a "
                 "warning, the timed steps mix both)")
      ->capture_default_str();
}

// --bucket-cap-mb, --first-bucket-mb, --comm-hook, --start-powersgd-iter in a run's config block.
void allreduce_config_json(const TrainConfig& config, nlohmann::json& j) {
  j["bucket_cap_mb"] = config.allreduce.bucket_cap_mb;
  j["first_bucket_mb"] = config.allreduce.first_bucket_mb;
  j["comm_hook"] = hook_name(config.allreduce.comm_hook);
  j["start_powersgd_iter"] = config.allreduce.start_powersgd_iter;
}

// PowerSGD that starts compressing after the warm-up: the timed steps mix both.
std::vector<std::string> allreduce_warnings(const TrainConfig& config) {
  if (config.allreduce.comm_hook.kind != CommHook::Kind::powersgd ||
      config.allreduce.start_powersgd_iter <= config.run.warmup_steps) {
    return {};
  }
  return {fmt::format("--start-powersgd-iter {} after {} warm-up steps: the first timed steps all-reduce "
                      "uncompressed, so per-step times and bytes mix both",
                      config.allreduce.start_powersgd_iter, config.run.warmup_steps)};
}

// --comm-hook (any hook but the default allreduce), which no other mode has.
std::optional<OwnOption> allreduce_own_option(const TrainConfig& config) {
  if (config.allreduce.comm_hook == CommHook{}) return std::nullopt;
  return OwnOption{fmt::format("--comm-hook {}", hook_name(config.allreduce.comm_hook)), "communication hooks"};
}

}  // namespace

const Strategy& allreduce_strategy() {
  static const Strategy strategy{
      .mode = Mode::allreduce,
      .description = "DistributedDataParallel: bucketed ring all-reduce overlapping backward",
      .validate = &validate_allreduce,
      .train = &train_allreduce,
      .transports = {},
      .transport = &ring_transport,
      .label = &allreduce_label,
      .bus_bandwidth = &allreduce_bus_bandwidth,
      .has_root = false,
      .baseline = false,
      .projected = {{"allreduce", Transport::ring, 1.0}},
      .comm_time = &allreduce_comm_time,
      .pytorch_counterpart = &allreduce_pytorch,
      .memory = &allreduce_memory,
      .own_option_given = &allreduce_own_option,
      .add_options = &add_allreduce_options,
      .config_json = &allreduce_config_json,
      .warnings = &allreduce_warnings,
      .schedule = &allreduce_schedule,
      .probed_collectives = &allreduce_probed_collectives,
      .schedule_buckets = &ddp_schedule_buckets,
      .sparse_grad = true,
  };
  return strategy;
}

}  // namespace dpbench
