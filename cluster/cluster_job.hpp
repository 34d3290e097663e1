// `dpbench run --nodes N --link RATE`: the job on an emulated cluster, in three stages of one
// program, told apart by $DPBENCH_CLUSTER_STAGE:
//   (none)  the command the user typed: checks that this machine can host the cluster (exit 2
//           naming what is missing, before anything is made) and starts the next stage in private
//           namespaces (cluster/netns.hpp), passing its exit code on;
//   inner   builds the nodes and links, probes every link, starts a heartbeat across every link,
//           then starts ranks per node the torchrun way (RANK, WORLD_SIZE, LOCAL_RANK,
//           LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR = node 0's hostname, MASTER_PORT) with the
//           same arguments, and waits for them, stopping the job when a rank fails or a node
//           stops answering across its link;
//   rank    one rank: `dpbench run --comm gloo` as under torchrun; rank 0 adds the network block
//           to the result (bench/app).
// Not for: the plumbing (netns.hpp), the probe (probe.hpp), or the result's contents.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/link.hpp"

namespace dpbench::cluster {

// "" (not in a cluster), "inner" or "rank".
std::string stage();

// Stage one. `args`: the command's arguments after the program name, passed on unchanged.
// Throws InputError (exit 2) with one line naming what this machine lacks.
int run_job(const ClusterSpec& spec, const std::vector<std::string>& args);

// Stage two (inside the private namespaces). Returns the job's exit code: 0, the first failing
// rank's code, 1 when a node stopped answering, 128 + signal when interrupted.
int run_inner(const ClusterSpec& spec, const std::vector<std::string>& args);

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
