// What the emulated cluster's launchers share (internal to cluster/): the environment of a process
// on a node, DPBENCH_FAULT's node=N, the job's processes and the loop that waits for them, stopping
// the job when one fails, a node stops answering across its link or a signal came.
// Not for: starting processes (each launcher's own file, cluster/launchers.hpp) or the stages
// (cluster/cluster_job.hpp).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "cluster/netns.hpp"

namespace dpbench::cluster {

inline constexpr const char* kDescriptionPath = "/run/dpbench-cluster.json";
inline constexpr auto kHeartbeatTimeout = std::chrono::milliseconds(10000);

// The SIGINT/SIGTERM handler run_inner installs: records `sig`; wait_for_job then stops the job
// and returns 128 + sig.
void on_signal(int sig);

// This program's path (torchrun starts it by path in every node). Throws Error when
// /proc/self/exe cannot be read.
std::string self_exe();

// The environment of a process on `node` (a rank, or a torchrun agent, whose ranks inherit it):
// this one's, less any launcher variables and DPBENCH_FAULT, plus what a rank of the cluster
// reads: its stage, the cluster's description, its node's interface and index.
std::vector<std::string> node_env(const std::vector<Node>& nodes, int node);

// $DPBENCH_FAULT's node=N, if it names a node: N, else -1.
int fault_node();

// $DPBENCH_FAULT with node=N replaced by `by` ("rank=R", "local_rank=0"); $DPBENCH_FAULT must be
// set.
std::string fault_with(const std::string& by);

// A process the job waits for: a rank (env launcher) or a node's torchrun agent.
struct JobProcess {
  pid_t pid = -1;
  int node = 0;
  std::string what;  // "rank 3", "the torchrun agent"
};

// Waits for every process; stops them all when one fails, a node stops answering (said on stderr,
// naming the node and the job's processes on it) or a signal came. A torchrun agent killed by a
// signal is a node that died: restart_node(node) starts it again, up to `node_restarts` times in
// all (a scheduler bringing the node back), when given. Returns the job's exit code: 0, the first
// failing process's code (128 + signal when killed), 1 when `lost_node` became a node's index (it
// stopped answering), 128 + signal when interrupted.
int wait_for_job(std::vector<JobProcess> procs, const Cluster& c, const std::atomic<int>& lost_node,
                 const std::function<pid_t(int)>& restart_node, int node_restarts);

}  // namespace dpbench::cluster
