// `dpbench sweep`: a grid over workloads, comms, modes, transports, world sizes, global batch
// sizes and num_workers, with repetitions, into one result file. A progress line per point goes
// to stderr; a point that fails is recorded as failed with its error and the sweep goes on.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "harness/harness.hpp"
#include "registry/strategies.hpp"
#include "core/names.hpp"
#include "train/training.hpp"

namespace dpbench {

struct SweepOptions {
  TrainConfig base;  // options every point shares
  DataOptions data;
  std::vector<std::string> workloads = {"mlp"};
  std::vector<Backend> comms = {Backend::local};
  std::vector<Mode> modes = strategy_modes();                   // default: every registered strategy
  std::vector<Transport> transports = {Transport::collective};  // strategies that take a transport
  std::optional<DeviceKind> device;                             // --device: cpu, cuda or nullopt (auto)
  std::vector<int> ranks = {1, 2, 4};
  std::vector<std::size_t> batch_sizes = {64, 256};
  std::vector<int> num_workers = {0, 2};
  // allreduce's DDP communication hooks as an axis (--comm-hooks,--comm-hook): empty, the base
  // config's hook. A hook other than `allreduce` adds the allreduce mode under it alone; the other
  // modes run once, with `allreduce` (so list it to keep them).
  std::vector<CommHook> comm_hooks;
  int repetitions = 1;
  bool cnn_default_hidden = false;  // --hidden not given: cnn points use 128
  bool cnn_default_lr = false;      // --lr not given: cnn points use 0.05
  double timeout_s = 300;
  std::string out;           // "" -> results/dpbench-sweep-<time>.json
  std::string host_profile;  // --host-profile: "" or this machine's `dpbench profile` file, recorded in the result
  bool quiet = false;
  // Over an emulated cluster (--nodes 2,4 --links 100mbit,1gbit): one `dpbench run --nodes N
  // --link L` per (nodes, link, batch size, repetition), every mode in turn inside it.
  std::vector<int> nodes;
  std::vector<std::string> links;
  std::vector<int> ranks_per_node = {1};
  // --hierarchies,--hierarchy: the node hierarchies as an axis (one job per value); empty, the
  // base config's (none).
  std::vector<Hierarchy> hierarchies;
  // --stalenesses,--staleness: sharded_ps's staleness bounds as an axis (a bound above 0 runs
  // sharded_ps alone); empty, the base config's (0).
  std::vector<int> stalenesses;
  // --zipf-alphas,--zipf-alpha: the dlrm click logs' index laws as an axis of an emulated
  // cluster's sweep (one job per value; 0: uniform indices); without --nodes, one value, the
  // data's. Empty: uniform.
  std::vector<double> zipf_alphas;
  // --link-of NODE=RATE: nodes whose link differs from --links' (a straggler), in every job.
  std::vector<std::string> link_of;
  std::string launcher = "env";  // run --launcher as given; parsed into cluster_launcher
  Launcher cluster_launcher = Launcher::env;
  // The command line's options that a `run` takes too (data, model, steps, ...), as arguments for
  // the cluster's runs; filled by the CLI.
  std::vector<std::string> shared_args;
};

struct SweepPoint {
  TrainConfig config;
  int repetition = 0;
};

// The grid's points in execution order: for each (workload, comm, ranks, batch, workers), the
// repetitions in turn, each running every mode once (a mode that takes a transport once per
// transport). Modes alternate, so load that comes and goes hits them alike and the in-file
// throughput ratios to the baseline strategy stay comparable. Throws InputError on an unknown mode.
std::vector<SweepPoint> sweep_points(const SweepOptions& options);

// The hooks' spellings (hook_name), as a sweep's config lists them.
std::vector<std::string> hook_names(const std::vector<CommHook>& hooks);

// Returns the process exit code: 0 when the file was written (even with failed points).
int sweep_command(const SweepOptions& options);

// The emulated-cluster sweep (options.nodes not empty): each point a child `dpbench run --nodes N
// --link L ...` whose runs join the sweep's file, each with a `cluster` block (nodes, ranks per
// node, link, probed links). Throws InputError for axes that do not go with --nodes (--ranks,
// --comms other than gloo, several workloads, transports or num_workers) and bad rates.
int network_sweep_command(const SweepOptions& options);

}  // namespace dpbench
