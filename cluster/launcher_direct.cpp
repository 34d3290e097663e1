// --launcher env, tcp and file on the emulated cluster: each rank a process started in its node,
// given torchrun's variables (env) or PyTorch's explicit --init-method and --rank (tcp, file).
// Not for: torchrun's agents, mpirun or Slurm (their own launcher_*.cpp).
#include <unistd.h>

#include <cstdlib>

#include <fmt/format.h>

#include "cluster/job_common.hpp"
#include "cluster/launchers.hpp"
#include "launch/resolve.hpp"

namespace dpbench::cluster {

namespace {

constexpr int kMasterPort = 29500;  // torchrun's default; the namespaces are the run's own

// The environment of rank `rank` on `node` under the env launcher: node_env plus the torchrun-style
// variables. DPBENCH_FAULT's node=N becomes rank=<first rank of node N>.
// Under the tcp and file launchers only LOCAL_RANK and LOCAL_WORLD_SIZE: the rest is on the command
// line.
std::vector<std::string> rank_env(const ClusterSpec& spec, const std::vector<Node>& nodes, int node, int local) {
  std::vector<std::string> env = node_env(nodes, node);
  const int rank = node * spec.ranks_per_node + local;
  env.push_back(fmt::format("LOCAL_RANK={}", local));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", spec.ranks_per_node));
  if (!explicit_init(spec.launcher)) {
    env.push_back(fmt::format("RANK={}", rank));
    env.push_back(fmt::format("WORLD_SIZE={}", spec.world_size()));
    env.push_back(fmt::format("GROUP_RANK={}", node));
    env.push_back("MASTER_ADDR=" + nodes.front().hostname);
    env.push_back(fmt::format("MASTER_PORT={}", kMasterPort));
  }
  if (std::getenv("DPBENCH_FAULT") != nullptr) {
    const int n = fault_node();
    env.push_back("DPBENCH_FAULT=" + (n < 0 ? std::string(std::getenv("DPBENCH_FAULT"))
                                            : fault_with(fmt::format("rank={}", n * spec.ranks_per_node))));
  }
  return env;
}

}  // namespace

std::string explicit_init_method(const ClusterSpec& spec, const Cluster& c) {
  if (spec.launcher == Launcher::file) return fmt::format("file:///run/dpbench-{}.init", getpid());
  return fmt::format("tcp://{}:{}", c.nodes().front().hostname, kMasterPort);
}

int run_direct_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                   const std::atomic<int>& lost_node) {
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<JobProcess> ranks;
  for (int node = 0; node < spec.nodes; ++node) {
    for (int local = 0; local < spec.ranks_per_node; ++local) {
      const int rank = node * spec.ranks_per_node + local;
      std::vector<std::string> rank_argv = argv;
      if (explicit_init(spec.launcher)) {  // PyTorch's explicit form: the world size is the cluster's
        rank_argv.insert(rank_argv.end(),
                         {"--init-method", explicit_init_method(spec, c), "--rank", std::to_string(rank)});
      }
      ranks.push_back(
          {c.spawn(node, rank_argv, rank_env(spec, c.nodes(), node, local)), node, fmt::format("rank {}", rank)});
    }
  }
  return wait_for_job(ranks, c, lost_node, nullptr, 0);
}

}  // namespace dpbench::cluster
