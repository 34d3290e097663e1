// `dpbench run`: trains one workload under each requested mode with the same seed, data and
// global batch, prints a side-by-side comparison table and writes one result file.
#pragma once

#include <string>
#include <vector>

#include "harness/harness.hpp"
#include "bench/reference/reference.hpp"
#include "registry/strategies.hpp"
#include "cluster/link.hpp"
#include "launch/resolve.hpp"
#include "train/training.hpp"

namespace dpbench {

struct RunOptions {
  TrainConfig base;                            // mode is filled in per run
  std::vector<Mode> modes = strategy_modes();  // default: every registered strategy
  std::optional<DeviceKind> device;            // --device: cpu, cuda or nullopt (auto)
  DataOptions data;
  bool ranks_given = false;      // --ranks on the command line (else the launcher's)
  ExplicitInit init;             // --init-method, --rank: PyTorch's explicit form
  std::string launcher = "env";  // --launcher as given; parsed into cluster.launcher
  double timeout_s = 300;        // sets base.timeout
  std::string out;               // "" -> results/dpbench-run-<time>.json
  std::string save_params;       // "" or PREFIX: PREFIX-<mode>.f32
  std::string init_params;       // "" or a raw float32 file of initial parameters
  std::string host_profile;      // --host-profile: "" or this machine's `dpbench profile` file, recorded in the result
  ReferenceOptions reference;    // --reference pytorch: PyTorch on the same work
  bool quiet = false;
  int repetitions = 3;             // runs of every mode, the modes alternating (for the spread of ratios)
  bool repetitions_given = false;  // --repetitions on the command line
  // --nodes N --link RATE [--link-of I=RATE ...] [--ranks-per-node K]: the job on an emulated
  // cluster (cluster/cluster_job.hpp); nodes 0: on this machine as usual.
  cluster::ClusterSpec cluster;
  std::string link;                  // --link, parsed into cluster.link
  std::vector<std::string> link_of;  // --link-of values, parsed into cluster.link_of
  std::vector<std::string> args;     // the options as given (after the subcommand), for the cluster's programs
  bool cluster_rank = false;         // `dpbench cluster-rank`: a rank of an emulated cluster's job
};

// `dpbench run`: with --nodes, starts the job on an emulated cluster (cluster::run_job), else
// trains every mode here. Returns the process exit code. Throws InputError / Error for main() to
// report.
int run_command(const RunOptions& options);

// `dpbench cluster-rank` (cluster/cluster_job.hpp's third program): one rank of an emulated
// cluster's job, started by its launcher; dies with the process that started it, then trains as
// `run` does under that launcher. Returns the process exit code; throws as run_command.
int cluster_rank_command(const RunOptions& options);

}  // namespace dpbench
