// --launcher srun on the emulated cluster: Slurm inside it (munged, slurmctld on node 0, a slurmd
// in every node, from a slurm.conf written for the cluster), the job started with srun from node 0.
// Not for: the env/tcp/file ranks, torchrun or mpirun (their own launcher_*.cpp).
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <fmt/format.h>

#include "cluster/job_common.hpp"
#include "cluster/launchers.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace dpbench::cluster {

namespace {

constexpr const char* kSlurmDir = "/run/dpbench-slurm";  // in the run's private /run

// The cluster as Slurm sees it: slurmctld on node 0, one slurmd per node (NodeName its hostname,
// NodeAddr its address, a CPU per rank), munge on the run's own socket, no cgroups (linuxproc
// tracks the tasks), no accounting.
std::string slurm_conf(const ClusterSpec& spec, const Cluster& c) {
  const Node& n0 = c.nodes().front();
  std::string conf = fmt::format(
      "# Written by dpbench for --launcher srun inside an emulated cluster.\n"
      "ClusterName=dpbench\nSlurmctldHost={0}({1})\n"
      "AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={2}/munge.sock\n"
      "SlurmUser=root\nSlurmdUser=root\nStateSaveLocation={2}/state\nSlurmdSpoolDir={2}/spool/%n\n"
      "SlurmctldPidFile={2}/slurmctld.pid\nSlurmdPidFile={2}/slurmd.%n.pid\n"
      "SlurmctldLogFile={2}/slurmctld.log\nSlurmdLogFile={2}/slurmd.%n.log\n"
      "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n"
      "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none\nMpiDefault=none\n"
      "SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nSchedulerType=sched/builtin\n"
      "ReturnToService=2\nSlurmctldTimeout=10\nSlurmdTimeout=10\nMessageTimeout=5\nInactiveLimit=0\n"
      "KillWait=2\nMinJobAge=2\nMailProg=/bin/true\n",
      n0.hostname, n0.address, kSlurmDir);
  for (const auto& n : c.nodes()) {
    conf += fmt::format("NodeName={} NodeAddr={} CPUs={} State=UNKNOWN\n", n.hostname, n.address, spec.ranks_per_node);
  }
  conf += "PartitionName=all Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n";
  return conf;
}

// The last non-empty line of a file, or `fallback`.
std::string last_line(const std::string& path, const std::string& fallback) {
  std::ifstream f(path);
  std::string last, line;
  while (std::getline(f, line)) last = line.empty() ? last : line;
  return last.empty() ? fallback : last;
}

// Slurm inside the cluster: munged, slurmctld on node 0 and a slurmd in every node (each in its
// node's network namespace, with its hostname), gone when this object is.
class SlurmDaemons {
 public:
  SlurmDaemons(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& env) {
    std::filesystem::create_directories(std::string(kSlurmDir) + "/state");
    std::filesystem::permissions(kSlurmDir, std::filesystem::perms::owner_all);
    for (const auto& n : c.nodes())
      std::filesystem::create_directories(fmt::format("{}/spool/{}", kSlurmDir, n.hostname));
    std::string key(1024, '\0');
    std::ifstream("/dev/urandom", std::ios::binary).read(key.data(), static_cast<std::streamsize>(key.size()));
    const std::string key_path = std::string(kSlurmDir) + "/munge.key";
    write_file_atomic(key_path, key.data(), key.size(), "munge's key");
    std::filesystem::permissions(key_path, std::filesystem::perms::owner_read);
    const std::string conf = slurm_conf(spec, c);
    write_file_atomic(conf_path(), conf.data(), conf.size(), "slurm.conf");
    const std::string d = kSlurmDir;
    // Each daemon in the foreground (its pid is the one to stop), its console output in its log.
    const auto quiet = [&](const std::string& command, const std::string& log) {
      return std::vector<std::string>{"/bin/sh", "-c", fmt::format("exec {} >>{} 2>&1", command, log)};
    };
    pids_.push_back(spawn_here(quiet(fmt::format("{} --foreground --force --key-file={} --socket={}/munge.sock "
                                                 "--pid-file={}/munged.pid --log-file={}/munged.log "
                                                 "--seed-file={}/munged.seed",
                                                 find_tool("munged"), key_path, d, d, d, d),
                                     d + "/munged.log"),
                               env));
    wait_for(
        "munged", [&] { return std::filesystem::exists(d + "/munge.sock"); }, d + "/munged.log");
    pids_.push_back(c.spawn(
        0, quiet(fmt::format("{} -D -c -f {}", find_tool("slurmctld"), conf_path()), d + "/slurmctld.log"), env));
    for (const auto& n : c.nodes()) {
      pids_.push_back(c.spawn(n.index,
                              quiet(fmt::format("{} -D -N {} -f {}", find_tool("slurmd"), n.hostname, conf_path()),
                                    fmt::format("{}/slurmd.{}.log", d, n.hostname)),
                              env));
    }
    // Every node idle in sinfo: the job can start on all of them.
    const std::string idle = d + "/idle";
    const std::string sinfo = fmt::format("{} -h -N -t idle -o %N >{} 2>&1", find_tool("sinfo"), idle);
    wait_for(
        "slurmd on every node",
        [&] {
      const pid_t pid = c.spawn(0, {"/bin/sh", "-c", sinfo}, env);
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      std::ifstream f(idle);
      std::string line;
      int nodes = 0;
      while (std::getline(f, line)) nodes += line.empty() ? 0 : 1;
      return WIFEXITED(status) && WEXITSTATUS(status) == 0 && nodes == spec.nodes;
        },
        d + "/slurmctld.log");
  }
  // SIGTERM to every daemon, SIGKILL to those still there after 3 s (a slurmd whose step is being
  // torn down waits for it); whatever they leave ends with the run's PID namespace.
  ~SlurmDaemons() {
    for (auto it = pids_.rbegin(); it != pids_.rend(); ++it) kill(*it, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    std::vector<pid_t> left = pids_;
    while (!left.empty()) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (const pid_t pid : left) kill(pid, SIGKILL);
      }
      left.erase(std::remove_if(left.begin(), left.end(),
                                [](pid_t pid) { return waitpid(pid, nullptr, WNOHANG) != 0; }),
                 left.end());
      if (!left.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  SlurmDaemons(const SlurmDaemons&) = delete;
  SlurmDaemons& operator=(const SlurmDaemons&) = delete;
  static std::string conf_path() { return std::string(kSlurmDir) + "/slurm.conf"; }

 private:
  // Polls ready() every 100 ms for 20 s; Error naming `what` and its log's last line after that.
  void wait_for(const std::string& what, const std::function<bool()>& ready, const std::string& log) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > deadline) {
        throw Error(fmt::format("--launcher srun: {} did not come up within 20 s: {}", what, last_line(log, "no log")));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  std::vector<pid_t> pids_;
};

}  // namespace

void check_srun_tools() {
  for (const char* tool : {"srun", "sinfo", "slurmctld", "slurmd", "munged"}) {
    if (find_tool(tool).empty()) {
      throw InputError(fmt::format("--launcher srun: {} is not installed (apt-get install slurmctld slurmd "
                                   "slurm-client munge)",
                                   tool));
    }
  }
}

int run_srun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                 const std::atomic<int>& lost_node) {
  std::vector<std::string> env = node_env(c.nodes(), 0);
  env.erase(std::remove_if(env.begin(), env.end(),
                           [](const std::string& v) { return v.rfind("DPBENCH_CLUSTER_NODE=", 0) == 0; }),
            env.end());
  env.push_back("SLURM_CONF=" + SlurmDaemons::conf_path());
  if (const char* fault = std::getenv("DPBENCH_FAULT")) {
    const int n = fault_node();
    env.push_back("DPBENCH_FAULT=" +
                  (n < 0 ? std::string(fault) : fault_with(fmt::format("rank={}", n * spec.ranks_per_node))));
  }
  const SlurmDaemons daemons(spec, c, env);
  std::vector<std::string> argv = {find_tool("srun"),
                                   "--nodes",
                                   std::to_string(spec.nodes),
                                   "--ntasks",
                                   std::to_string(spec.world_size()),
                                   "--ntasks-per-node",
                                   std::to_string(spec.ranks_per_node),
                                   "--kill-on-bad-exit=1",
                                   "--export=ALL",
                                   self_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  const std::vector<JobProcess> job = {{c.spawn(0, argv, env), 0, "srun"}};
  return wait_for_job(job, c, lost_node, nullptr, 0);
}

}  // namespace dpbench::cluster
