#include "cluster/cluster_job.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cluster/netns.hpp"
#include "cluster/probe.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "launch/resolve.hpp"

extern char** environ;

namespace dpbench::cluster {

namespace {

constexpr const char* kStageEnv = "DPBENCH_CLUSTER_STAGE";
constexpr const char* kDescriptionPath = "/run/dpbench-cluster.json";
constexpr int kMasterPort = 29500;  // torchrun's default; the namespaces are the run's own
constexpr int kRdzvPort = 29400;    // torchrun's c10d rendezvous default
constexpr int kEtcdPort = 2379;     // etcd's client port (the peer port is the next one)
constexpr auto kProbeWindow = std::chrono::milliseconds(600);
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(1000);
constexpr auto kHeartbeatTimeout = std::chrono::milliseconds(10000);
constexpr auto kGrace = std::chrono::seconds(10);  // after a rank failed, for the others to end

std::atomic<int> stop_signal{0};
void on_signal(int sig) { stop_signal = sig; }

// Whether a TCP connection to address:port succeeds now (1 s at most).
bool tcp_connects(const std::string& address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval limit{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = inet_pton(AF_INET, address.c_str(), &to.sin_addr) == 1 &&
                  connect(fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) == 0;
  close(fd);
  return ok;
}

// The Python interpreter the torchrun script at `path` runs on: its #! line's program (the one
// after /usr/bin/env), "python3" when it has none.
std::string torchrun_python(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  if (!std::getline(f, line) || line.rfind("#!", 0) != 0) return "python3";
  std::istringstream words(line.substr(2));
  std::string program;
  words >> program;
  if (program.size() >= 4 && program.compare(program.size() - 4, 4, "/env") == 0) words >> program;
  return program.empty() ? "python3" : program;
}

// This program's path (torchrun starts it by path in every node).
std::string self_exe() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(fmt::format("/proc/self/exe: {}", ec.message()));
  return path.string();
}

std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

// The environment of a process on `node` (a rank, or a torchrun agent, whose ranks inherit it):
// this one's, less any launcher variables and DPBENCH_FAULT, plus what a rank of the cluster
// reads: its stage, the cluster's description, its node's interface and index.
std::vector<std::string> node_env(const std::vector<Node>& nodes, int node) {
  static const std::vector<std::string> dropped = {
      "RANK=",          "WORLD_SIZE=",          "LOCAL_RANK=",   "LOCAL_WORLD_SIZE=",    "GROUP_RANK=",
      "MASTER_ADDR=",   "MASTER_PORT=",         "TORCHELASTIC_", "DPBENCH_MASTER_PORT=", "GLOO_SOCKET_IFNAME=",
      "DPBENCH_FAULT=", "DPBENCH_CLUSTER_NODE="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    bool drop = v.rfind(std::string(kStageEnv) + "=", 0) == 0;
    for (const auto& d : dropped) drop = drop || v.rfind(d, 0) == 0;
    if (!drop) env.push_back(v);
  }
  env.push_back(fmt::format("{}=rank", kStageEnv));
  env.push_back(fmt::format("{}={}", kDescriptionEnv, kDescriptionPath));
  env.push_back("DPBENCH_NET_IFACE=" + nodes[static_cast<std::size_t>(node)].iface);
  env.push_back(fmt::format("DPBENCH_CLUSTER_NODE={}", node));
  return env;
}

// The node=N item of a DPBENCH_FAULT spec.
const std::regex& fault_node_key() {
  static const std::regex key(R"((^|,)node=([0-9]+)(,|$))");
  return key;
}

// $DPBENCH_FAULT's node=N, if it names a node: N, else -1.
int fault_node() {
  const char* fault = std::getenv("DPBENCH_FAULT");
  std::cmatch m;
  return fault != nullptr && std::regex_search(fault, m, fault_node_key()) ? std::stoi(m[2].str()) : -1;
}

// $DPBENCH_FAULT with node=N replaced by `by` ("rank=R", "local_rank=0").
std::string fault_with(const std::string& by) {
  return std::regex_replace(std::getenv("DPBENCH_FAULT"), fault_node_key(), "$1" + by + "$3");
}

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

// --launcher tcp's and file's --init-method: rank 0's address on node 0 and the rendezvous port,
// or a file in the cluster's private /run (a tmpfs every node sees, gone with the cluster) named
// after this job's process.
std::string explicit_init_method(const ClusterSpec& spec, const Cluster& c) {
  if (spec.launcher == ClusterLauncher::file) return fmt::format("file:///run/dpbench-{}.init", getpid());
  return fmt::format("tcp://{}:{}", c.nodes().front().hostname, kMasterPort);
}

// The environment of node `node`'s torchrun agent: node_env; DPBENCH_FAULT's node=N becomes
// local_rank=0 on node N alone (the rendezvous, not the node, decides global ranks), and is left
// out when `with_fault` is false (a node started again after its agent died).
std::vector<std::string> agent_env(const std::vector<Node>& nodes, int node, bool with_fault) {
  std::vector<std::string> env = node_env(nodes, node);
  if (const char* fault = std::getenv("DPBENCH_FAULT"); fault != nullptr && with_fault) {
    const int n = fault_node();
    if (n < 0) {
      env.push_back(std::string("DPBENCH_FAULT=") + fault);
    } else if (n == node) {
      env.push_back("DPBENCH_FAULT=" + fault_with("local_rank=0"));
    }
  }
  return env;
}

// Node `node`'s torchrun agent: `--nnodes N --nproc_per_node K` at the rendezvous `endpoint`, each
// worker this program with `args` (torchrun's --no_python).
std::vector<std::string> agent_argv(const ClusterSpec& spec, const std::string& torchrun, const std::string& endpoint,
                                    const std::string& run_id, int node, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {
      torchrun, "--nnodes", std::to_string(spec.nodes), "--nproc_per_node", std::to_string(spec.ranks_per_node),
      "--rdzv_backend", spec.rdzv_backend, "--rdzv_endpoint", endpoint, "--rdzv_id", run_id, "--max_restarts",
      std::to_string(spec.max_restarts), "--monitor_interval", "1",
      // Debian 12's torchrun (torch 1.13, Python 3.11) cannot parse its own default of 0 here.
      "--redirects", "1", "--tee", "1", "--log_dir", fmt::format("/run/dpbench-torchrun/node{}", node), "--no_python",
      self_exe()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

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

nlohmann::json describe(const ClusterSpec& spec, const Cluster& c, const std::vector<LinkProbe>& probes,
                        const std::string& how) {
  nlohmann::json links = nlohmann::json::array();
  for (const auto& n : c.nodes()) {
    const LinkProbe& p = probes[static_cast<std::size_t>(n.index)];
    links.push_back({{"node", n.index},
                     {"hostname", n.hostname},
                     {"address", n.address},
                     {"requested_rate", n.rate.text},
                     {"requested_bits_per_s", n.rate.bits_per_s},
                     {"probed_up_bytes_per_s", p.up_bytes_per_s},
                     {"probed_down_bytes_per_s", p.down_bytes_per_s},
                     {"rtt_s", p.rtt_s}});
  }
  nlohmann::json launcher = {{"name", spec.launcher}};
  if (explicit_init(spec.launcher)) launcher["init_method"] = explicit_init_method(spec, c);
  if (spec.launcher == ClusterLauncher::torchrun) {
    launcher["rdzv_backend"] = spec.rdzv_backend;
    launcher["max_restarts"] = spec.max_restarts;
  }
  if (spec.launcher == ClusterLauncher::mpirun) {
    nlohmann::json algorithms = nlohmann::json::object();
    for (const auto& a : kMpiAlgorithms) {
      if (a.collective == nullptr) continue;
      const char* own = std::getenv(a.variable);
      algorithms[a.collective] = own != nullptr ? fmt::format("{}={} (the user's)", a.variable, own) : a.name;
    }
    launcher["mpi_collectives"] = algorithms;
  }
  return {{"nodes", spec.nodes},
          {"ranks_per_node", spec.ranks_per_node},
          {"launcher", launcher},
          {"qdisc", c.qdisc()},
          {"kernel", kernel_release()},
          {"namespaces",
           how == "user" ? "private user + network namespace (unprivileged)" : "private network namespace (root)"},
          {"addresses", "198.18.0.0/24 (RFC 2544)"},
          {"probe",
           {{"method", "bulk TCP each way between the switch and the node, then 1-byte round trips"},
            {"window_s", std::chrono::duration<double>(kProbeWindow).count()}}},
          {"links", links}};
}

// A process the job waits for: a rank (env launcher) or a node's torchrun agent.
struct JobProcess {
  pid_t pid = -1;
  int node = 0;
  std::string what;  // "rank 3", "the torchrun agent"
};

// Says on stderr that node `lost` stopped answering, naming the job's processes on it.
void report_lost_node(const std::vector<JobProcess>& procs, const Cluster& c, int lost) {
  const Node& n = c.nodes()[static_cast<std::size_t>(lost)];
  std::string on_node;
  for (const auto& p : procs) {
    if (p.node == lost) on_node += (on_node.empty() ? "" : ", ") + p.what;
  }
  if (on_node.empty()) on_node = "its ranks";  // mpirun runs on the switch, its ranks in the nodes
  fmt::print(stderr,
             "dpbench: error: node {} ({}, {}; {}) stopped answering across its link for {} s "
             "(link down or node gone); stopping the job\n",
             n.index, n.hostname, n.address, on_node,
             std::chrono::duration_cast<std::chrono::seconds>(kHeartbeatTimeout).count());
}

// Waits for every process; stops them all when one fails, a node stops answering or a signal
// came. A torchrun agent killed by a signal is a node that died: restart_node(node) starts it
// again, up to `node_restarts` times in all (a scheduler bringing the node back), when given.
int wait_for_job(std::vector<JobProcess> procs, const Cluster& c, const std::atomic<int>& lost_node,
                 const std::function<pid_t(int)>& restart_node, int node_restarts) {
  std::map<pid_t, JobProcess> running;
  for (const auto& p : procs) running[p.pid] = p;
  int code = 0, restarts = 0;
  std::chrono::steady_clock::time_point deadline{};
  auto kill_all = [&](int sig) {
    for (const auto& [pid, p] : running) kill(pid, sig);
  };
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running.count(pid) != 0) {
      const JobProcess p = running[pid];
      running.erase(pid);
      const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      const Node& n = c.nodes()[static_cast<std::size_t>(p.node)];
      if (WIFSIGNALED(status) && restart_node && restarts < node_restarts && code == 0 && stop_signal == 0) {
        ++restarts;
        fmt::print(stderr,
                   "dpbench: {} of node {} ({}) was killed (signal {}); starting the node's agent again "
                   "({} of {})\n",
                   p.what, n.index, n.hostname, WTERMSIG(status), restarts, node_restarts);
        JobProcess again = p;
        again.pid = restart_node(p.node);
        running[again.pid] = again;
        continue;
      }
      if (rc != 0 && code == 0) {
        code = rc;
        fmt::print(stderr, "dpbench: {} on node {} ({}) exited with {}; stopping the job\n", p.what, n.index,
                   n.hostname,
                   WIFEXITED(status) ? fmt::format("code {}", rc) : fmt::format("signal {}", WTERMSIG(status)));
        deadline = std::chrono::steady_clock::now() + kGrace;
      }
      continue;
    }
    if (const int lost = lost_node.load(); lost >= 0 && code == 0) {
      report_lost_node(procs, c, lost);
      code = 1;
      kill_all(SIGKILL);
    }
    if (const int sig = stop_signal.load(); sig != 0 && code == 0) {
      code = 128 + sig;
      kill_all(SIGTERM);
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    }
    if (deadline != std::chrono::steady_clock::time_point{} && std::chrono::steady_clock::now() > deadline) {
      kill_all(SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return code;
}

// Starts etcd on node 0 for torchelastic's etcd rendezvous (v2 API on, as it needs), its data and
// log in the run's private /run, clients on port kEtcdPort of every address; waits until it takes
// connections. Returns its pid; throws Error when it does not within 20 s.
pid_t start_etcd(const Cluster& c) {
  const Node& n = c.nodes().front();
  const std::string etcd = find_tool("etcd");
  const std::string command = fmt::format(
      "exec {} --name {} --data-dir /run/dpbench-etcd --enable-v2 --listen-client-urls http://0.0.0.0:{} "
      "--advertise-client-urls http://{}:{} --listen-peer-urls http://127.0.0.1:{} "
      "--initial-advertise-peer-urls http://127.0.0.1:{} --initial-cluster {}=http://127.0.0.1:{} "
      ">/run/dpbench-etcd.log 2>&1",
      etcd, n.hostname, kEtcdPort, n.address, kEtcdPort, kEtcdPort + 1, kEtcdPort + 1, n.hostname, kEtcdPort + 1);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  const pid_t pid = c.spawn(0, {"/bin/sh", "-c", command}, env);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!tcp_connects(n.address, kEtcdPort)) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid || std::chrono::steady_clock::now() > deadline) {
      std::ifstream log("/run/dpbench-etcd.log");
      std::string last, line;
      while (std::getline(log, line)) last = line.empty() ? last : line;
      throw Error(fmt::format("etcd on node 0 did not start within 20 s: {}", last.empty() ? "no log" : last));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return pid;
}

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

// Starts the job with Open MPI's mpirun on the switch: its daemons go into the nodes through
// mpi_rsh_agent, K slots per node (ranks node-major, as the env launcher places them), TCP on
// the cluster's subnet only. Waits for it.
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

// The environment mpirun starts with: node 0's, without its node number, and the collective
// algorithms dpbench's schedule models (unless the caller pinned others).
std::vector<std::string> mpirun_env(const Cluster& c) {
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
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");  // root of the run's own user namespace
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  return env;
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
  std::vector<std::string> env = mpirun_env(c);
  for (const char* name : {kStageEnv, kDescriptionEnv, "DPBENCH_NET_IFACE"}) {
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

// Starts the job the torchrun way: etcd on node 0 for --rdzv-backend etcd, then one torchrun agent
// per node, and waits for them (restarting a killed node's agent up to --max-restarts times).
int run_torchrun_job(const ClusterSpec& spec, const Cluster& c, const std::vector<std::string>& args,
                     const std::atomic<int>& lost_node) {
  const std::string torchrun = find_tool("torchrun");
  std::string endpoint = fmt::format("{}:{}", c.nodes().front().hostname, kRdzvPort);
  pid_t etcd = -1;
  if (spec.rdzv_backend == "etcd") {
    etcd = start_etcd(c);
    endpoint = fmt::format("{}:{}", c.nodes().front().hostname, kEtcdPort);
  }
  const std::string run_id = c.nodes().front().hostname.substr(0, c.nodes().front().hostname.find('-'));
  auto start_agent = [&](int node, bool with_fault) {
    return c.spawn(node, agent_argv(spec, torchrun, endpoint, run_id, node, args),
                   agent_env(c.nodes(), node, with_fault));
  };
  std::vector<JobProcess> agents;
  for (int node = 0; node < spec.nodes; ++node) agents.push_back({start_agent(node, true), node, "the torchrun agent"});
  const int code = wait_for_job(
      agents, c, lost_node, [&](int node) { return start_agent(node, false); }, spec.max_restarts);
  if (etcd > 0) {
    kill(etcd, SIGTERM);
    waitpid(etcd, nullptr, 0);
  }
  return code;
}

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

// Starts the job with Slurm: the daemons (SlurmDaemons), then `srun -N nodes -n world` from node 0,
// each task in its node with Slurm's variables (launch/resolve.hpp reads them: no torchrun variables,
// no wrapper). Waits for srun; the daemons stop when it is done.
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

// Whether the job runs in a PID namespace of its own, whose processes all end with the inner
// stage (its PID 1). Slurm's slurmstepd detaches from its parent; Open MPI's daemons (orted) are
// children of mpirun's remote shell and outlive mpirun when it is killed before they have heard
// from it (under load, a SIGINT's 2 s grace can end before they exit), then retry the lost
// connection, for over a minute, on a network that is gone. The env and torchrun launchers' processes
// are the inner stage's own children, killed with it (PR_SET_PDEATHSIG); their ranks treat a
// parent of PID 1 as a dead one (die_with_parent), so they stay in the caller's PID namespace.
bool needs_pid_namespace(ClusterLauncher launcher) {
  return launcher == ClusterLauncher::srun || launcher == ClusterLauncher::mpirun;
}

}  // namespace

std::string stage() {
  const char* v = std::getenv(kStageEnv);
  return v != nullptr ? v : "";
}

int run_job(const ClusterSpec& spec, const std::vector<std::string>& args) {
  validate(spec);
  if (spec.launcher == ClusterLauncher::mpirun && find_tool("mpirun").empty()) {
    throw InputError("--launcher mpirun: mpirun is not installed (apt-get install openmpi-bin)");
  }
  if (spec.launcher == ClusterLauncher::mpirun && find_tool("unshare").empty()) {
    throw InputError("--launcher mpirun: unshare (util-linux) is not installed");
  }
  if (spec.launcher == ClusterLauncher::torchrun) {
    if (find_tool("torchrun").empty()) {
      throw InputError("--launcher torchrun: torchrun is not installed (apt-get install python3-torch)");
    }
    if (spec.rdzv_backend == "etcd" && find_tool("etcd").empty()) {
      throw InputError("--rdzv-backend etcd: etcd is not installed (apt-get install etcd-server)");
    }
    if (spec.rdzv_backend == "etcd" &&
        std::system(
            fmt::format("{} -c 'import etcd' >/dev/null 2>&1", torchrun_python(find_tool("torchrun"))).c_str()) != 0) {
      throw InputError("--rdzv-backend etcd: torchrun's Python cannot import etcd (apt-get install python3-etcd)");
    }
  }
  if (spec.launcher == ClusterLauncher::srun) {
    for (const char* tool : {"srun", "sinfo", "slurmctld", "slurmd", "munged"}) {
      if (find_tool(tool).empty()) {
        throw InputError(fmt::format("--launcher srun: {} is not installed (apt-get install slurmctld slurmd "
                                     "slurm-client munge)",
                                     tool));
      }
    }
  }
  const Capability cap = probe_capability(spec.launcher == ClusterLauncher::srun);
  if (cap.how.empty()) throw InputError("--nodes: this machine cannot host an emulated cluster: " + cap.missing);
  return run_in_private_namespaces(cap.how, args,
                                   {fmt::format("{}=inner", kStageEnv), fmt::format("DPBENCH_CLUSTER_HOW={}", cap.how)},
                                   needs_pid_namespace(spec.launcher));
}

int run_inner(const ClusterSpec& spec, const std::vector<std::string>& args) {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const char* how_env = std::getenv("DPBENCH_CLUSTER_HOW");
  const std::string how = how_env != nullptr ? how_env : "user";
  const Cluster c = Cluster::build(spec, fmt::format("dpb{}", getpid() % 10000000));
  fmt::print(stderr, "dpbench: emulated cluster: {} nodes x {} rank{} on one switch, links shaped with {} ({})\n",
             spec.nodes, spec.ranks_per_node, spec.ranks_per_node == 1 ? "" : "s", c.qdisc(),
             how == "user" ? "unprivileged namespaces" : "root");
  std::vector<LinkProbe> probes;
  for (const auto& n : c.nodes()) {
    probes.push_back(probe_link(n, kProbeWindow));
    const LinkProbe& p = probes.back();
    fmt::print(stderr, "dpbench:   node {} {} {}: link {}, probed {:.1f} MB/s up, {:.1f} MB/s down, RTT {:.3f} ms\n",
               n.index, n.hostname, n.address, n.rate.text, p.up_bytes_per_s / 1e6, p.down_bytes_per_s / 1e6,
               p.rtt_s * 1e3);
  }
  const std::string text = describe(spec, c, probes, how).dump(2);
  write_file_atomic(kDescriptionPath, text.data(), text.size(), "the cluster's description");

  std::atomic<int> lost_node{-1};
  Heartbeat heartbeat(c.nodes(), kHeartbeatInterval, kHeartbeatTimeout, [&](int node) {
    int expected = -1;
    lost_node.compare_exchange_strong(expected, node);
  });
  if (spec.launcher == ClusterLauncher::torchrun) return run_torchrun_job(spec, c, args, lost_node);
  if (spec.launcher == ClusterLauncher::mpirun) return run_mpirun_job(spec, c, args, lost_node);
  if (spec.launcher == ClusterLauncher::srun) return run_srun_job(spec, c, args, lost_node);
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

void die_with_parent() {
  const pid_t parent = getppid();
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent || parent == 1) raise(SIGKILL);  // it died before the request took
}

nlohmann::json cluster_description() {
  const char* path = std::getenv(kDescriptionEnv);
  if (path == nullptr || *path == '\0') return nullptr;
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("{}={}: cannot read the cluster's description", kDescriptionEnv, path));
  return nlohmann::json::parse(f);
}

}  // namespace dpbench::cluster
