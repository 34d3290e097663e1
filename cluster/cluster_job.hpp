// `dpbench run --nodes N --link RATE`: the job on an emulated cluster, in three programs of one
// binary, each started as its own (hidden) subcommand by the stage before it:
//   run            the command the user typed: checks that this machine can host the cluster
//                  (exit 2 naming what is missing, before anything is made) and starts the next
//                  stage in private namespaces (cluster/netns.hpp), passing its exit code on;
//   cluster-inner  (kInnerCommand) builds the nodes and links, probes every link, starts a
//                  heartbeat across every link, then has the job's launcher start the ranks with
//                  the same options, and waits for them, stopping the job when a rank fails or a
//                  node stops answering across its link;
//   cluster-rank   (kRankCommand) one rank, started by the launcher (torchrun, mpirun, srun or
//                  directly): trains as `dpbench run` does under that launcher; rank 0 adds the
//                  network block to the result (bench/app).
// Not for: the plumbing (netns.hpp), the probe (probe.hpp), or the result's contents.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/link.hpp"

namespace dpbench::cluster {

// The subcommands of the job's second and third programs (hidden from --help).
inline constexpr const char* kInnerCommand = "cluster-inner";
inline constexpr const char* kRankCommand = "cluster-rank";

// Program one (`run`). `options`: the run's options as given (after the subcommand), passed on
// unchanged to `dpbench cluster-inner`. Throws InputError (exit 2) with one line naming what this
// machine lacks.
int run_job(const ClusterSpec& spec, const std::vector<std::string>& options);

// Program two (`cluster-inner`, inside the private namespaces): starts `dpbench cluster-rank
// OPTIONS` on every node through spec.launcher. Returns the job's exit code: 0, the first failing
// rank's code, 1 when a node stopped answering, 128 + signal when interrupted.
int run_inner(const ClusterSpec& spec, const std::vector<std::string>& options);

// In a rank: dies (SIGKILL) when the process that started it does (PR_SET_PDEATHSIG). torchrun's
// agents and mpirun's daemons start their ranks without it, so a job killed with SIGKILL would
// leave ranks that still reach each other inside the namespaces.
void die_with_parent();

// In a rank: the cluster's description written by run_inner (nodes, ranks per node, links with
// requested and probed rates and RTT, qdisc, kernel, namespaces); null outside a cluster.
nlohmann::json cluster_description();

// The environment variable a rank of an emulated cluster finds its description in.
inline constexpr const char* kDescriptionEnv = "DPBENCH_CLUSTER_INFO";

}  // namespace dpbench::cluster
