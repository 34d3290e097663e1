// --launcher mpirun on the emulated cluster: Open MPI's mpirun on the switch, its daemons (orted)
// started in the nodes through a remote shell of dpbench's, TCP on the cluster's subnet only, and
// the collective algorithms pinned to those whose bytes dpbench's MPI backend counts.
// Not for: the env/tcp/file ranks, torchrun or Slurm (their own launcher_*.cpp).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "cluster/cluster_job.hpp"
#include "cluster/job_common.hpp"
#include "cluster/launchers.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace dpbench::cluster {

namespace {

// Open MPI's MCA parameter mpi_yield_when_idle as an environment variable.
constexpr const char* kYieldWhenIdle = "OMPI_MCA_mpi_yield_when_idle";

// Open MPI's collective algorithms under --launcher mpirun: as far as Open MPI offers them, the
// ones whose bytes dpbench's MPI backend counts (core/mpi_comm.cpp: ring all-reduce, blocking and
// not (libnbc), ring reduce-scatter and all-gather, a chain reduce and broadcast, as Open MPI's
// pipeline of 64 KiB segments), so that the wire bytes of every node can be checked against the
// counted ones. Left to its own choice, Open MPI picks by size and rank count (at 4 ranks:
// recursive doubling, binomial trees). Two differences remain, and the wire check reports them:
// libnbc's MPI_Ireduce_scatter (sharded_ps's push) is a binomial reduce to rank 0 and a scatter,
// and Open MPI's reduce chain runs in the other order than the counted one (same total bytes,
// other nodes). Each as the OMPI_MCA_ variable, its value and its name; a variable the user set
// is kept.
struct MpiAlgorithm {
  const char* variable;
  const char* value;
  const char* collective;
  const char* name;
};
constexpr MpiAlgorithm kMpiAlgorithms[] = {
    {"OMPI_MCA_coll_tuned_allreduce_algorithm", "4", "allreduce", "ring"},
    {"OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", "iallreduce", "ring"},
    {"OMPI_MCA_coll_tuned_allgather_algorithm", "4", "allgather", "ring"},
    {"OMPI_MCA_coll_tuned_reduce_scatter_algorithm", "3", "reduce_scatter", "ring"},
    {"OMPI_MCA_coll_tuned_allgatherv_algorithm", "3", "allgatherv", "ring"},
    {"OMPI_MCA_coll_tuned_reduce_algorithm", "3", "reduce", "pipeline (chain, 64 KiB segments)"},
    {"OMPI_MCA_coll_tuned_reduce_algorithm_segmentsize", "65536", nullptr, nullptr},
    {"OMPI_MCA_coll_tuned_bcast_algorithm", "3", "bcast", "pipeline (chain, 64 KiB segments)"},
    {"OMPI_MCA_coll_tuned_bcast_algorithm_segmentsize", "65536", nullptr, nullptr},
};

// Open MPI's remote shell into a node: `agent HOST COMMAND...` runs COMMAND (one shell line, as
// ssh would) in HOST's network namespace, with the node's hostname and index. mpirun starts its
// daemon (orted) on every node with it.
std::string mpi_rsh_agent(const Cluster& c) {
  std::string cases;
  for (const auto& n : c.nodes()) {
    cases += fmt::format("  {}) ns={}; node={} ;;\n", n.hostname, n.netns, n.index);
  }
  return fmt::format(
      "#!/bin/sh\n"
      "# Written by dpbench for mpirun's plm_rsh_agent inside an emulated cluster.\n"
      "host=$1; shift\n"
      "case $host in\n{}"
      "  *) echo \"dpbench mpi agent: $host is not a node of this cluster\" >&2; exit 1 ;;\n"
      "esac\n"
      "export DPBENCH_CLUSTER_NODE=$node\n"
      "exec {} netns exec \"$ns\" {} --uts /bin/sh -c 'hostname \"$0\" && exec /bin/sh -c \"$1\"' \"$host\" \"$*\"\n",
      cases, find_tool("ip"), find_tool("unshare"));
}

// mpirun's options for the cluster's job: every rank a slot of its node's hosts line, the daemons
// started through `agent`, all traffic on the cluster's subnet over TCP.
std::vector<std::string> mpirun_options(const ClusterSpec& spec, const std::string& hostfile,
                                        const std::string& agent) {
  const std::string subnet = fmt::format("{}/{}", "198.18.0.0", kPrefixLength);
  // --leave-session-attached: the daemons stay children of their agents instead of detaching
  // (daemonize), so that they go with the job.
  return {find_tool("mpirun"),
          "--leave-session-attached",
          "-np",
          std::to_string(spec.world_size()),
          "--hostfile",
          hostfile,
          "--map-by",
          "slot",
          "--mca",
          "plm_rsh_agent",
          agent,
          "--mca",
          "plm_rsh_no_tree_spawn",
          "1",
          "--mca",
          "oob_tcp_if_include",
          subnet,
          "--mca",
          "btl_tcp_if_include",
          subnet,
          "--mca",
          "btl",
          "tcp,self"};
}

// The environment mpirun starts with: node 0's, without its node number, the collective
// algorithms dpbench's schedule models (unless the caller pinned others), and Open MPI's yield
// when idle where the cluster's ranks outnumber the host's cores (mpi_yields_when_idle).
std::vector<std::string> mpirun_env(const ClusterSpec& spec, const Cluster& c) {
  std::vector<std::string> env = node_env(c.nodes(), 0);
  env.erase(std::remove_if(env.begin(), env.end(),
                           [](const std::string& v) { return v.rfind("DPBENCH_CLUSTER_NODE=", 0) == 0; }),
            env.end());
  if (std::getenv("OMPI_MCA_coll_tuned_use_dynamic_rules") == nullptr) {
    env.push_back("OMPI_MCA_coll_tuned_use_dynamic_rules=1");
  }
  for (const auto& a : kMpiAlgorithms) {
    if (std::getenv(a.variable) == nullptr) env.push_back(fmt::format("{}={}", a.variable, a.value));
  }
  if (std::getenv(kYieldWhenIdle) == nullptr && mpi_yields_when_idle(spec)) {
    env.push_back(fmt::format("{}=1", kYieldWhenIdle));
  }
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");  // root of the run's own user namespace
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  return env;
}

}  // namespace

void check_mpirun_tools() {
  if (find_tool("mpirun").empty()) {
    throw InputError("--launcher mpirun: mpirun is not installed (apt-get install openmpi-bin)");
  }
  if (find_tool("unshare").empty()) {
    throw InputError("--launcher mpirun: unshare (util-linux) is not installed");
  }
}

bool mpi_yields_when_idle(const ClusterSpec& spec) {
  if (const char* own = std::getenv(kYieldWhenIdle)) return std::string(own) != "0";
  return spec.world_size() > static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

nlohmann::json mpi_collectives_description() {
  nlohmann::json algorithms = nlohmann::json::object();
  for (const auto& a : kMpiAlgorithms) {
    if (a.collective == nullptr) continue;
    const char* own = std::getenv(a.variable);
    algorithms[a.collective] = own != nullptr ? fmt::format("{}={} (the user's)", a.variable, own) : a.name;
  }
  return algorithms;
}

int run_mpirun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                   const std::atomic<int>& lost_node) {
  const std::string hostfile = "/run/dpbench-mpi-hosts", agent = "/run/dpbench-mpi-agent";
  std::string hosts;
  for (const auto& n : c.nodes()) hosts += fmt::format("{} slots={}\n", n.hostname, spec.ranks_per_node);
  write_file_atomic(hostfile, hosts.data(), hosts.size(), "mpirun's host file");
  const std::string script = mpi_rsh_agent(c);
  write_file_atomic(agent, script.data(), script.size(), "mpirun's remote shell");
  if (chmod(agent.c_str(), 0755) != 0) throw Error(fmt::format("{}: chmod: {}", agent, std::strerror(errno)));
  std::vector<std::string> argv = mpirun_options(spec, hostfile, agent);
  std::vector<std::string> env = mpirun_env(spec, c);
  for (const char* name : {kDescriptionEnv, "DPBENCH_NET_IFACE"}) {
    argv.insert(argv.end(), {"-x", name});
  }
  if (const char* fault = std::getenv("DPBENCH_FAULT")) {
    const int n = fault_node();
    env.push_back("DPBENCH_FAULT=" +
                  (n < 0 ? std::string(fault) : fault_with(fmt::format("rank={}", n * spec.ranks_per_node))));
    argv.insert(argv.end(), {"-x", "DPBENCH_FAULT"});
  }
  argv.push_back(self_exe());
  argv.insert(argv.end(), args.begin(), args.end());
  const std::vector<JobProcess> job = {{spawn_here(argv, env), 0, "mpirun"}};
  const int code = wait_for_job(job, c, lost_node, nullptr, 0);
  // Daemons that outlived mpirun go now, while the network they would retry it on still exists.
  // This stage is PID 1 of the job's PID namespace (needs_pid_namespace), where kill(-1) reaches
  // every other process of the job and nothing outside it.
  if (getpid() == 1) kill(-1, SIGKILL);
  return code;
}

}  // namespace dpbench::cluster
