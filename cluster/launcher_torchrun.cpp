// --launcher torchrun on the emulated cluster: one torchrun agent per node (torchrun's
// --no_python, each worker this program), meeting at a c10d rendezvous in node 0's agent or at etcd
// started on node 0 (--rdzv-backend etcd); a node whose agent was killed is started again.
// Not for: the env/tcp/file ranks, mpirun or Slurm (their own launcher_*.cpp).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "cluster/job_common.hpp"
#include "cluster/launchers.hpp"
#include "core/error.hpp"

extern char** environ;

namespace dpbench::cluster {

namespace {

constexpr int kRdzvPort = 29400;  // torchrun's c10d rendezvous default
constexpr int kEtcdPort = 2379;   // etcd's client port (the peer port is the next one)

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

}  // namespace

void check_torchrun_tools(const ClusterSpec& spec) {
  if (find_tool("torchrun").empty()) {
    throw InputError("--launcher torchrun: torchrun is not installed (apt-get install python3-torch)");
  }
  if (spec.rdzv_backend == "etcd" && find_tool("etcd").empty()) {
    throw InputError("--rdzv-backend etcd: etcd is not installed (apt-get install etcd-server)");
  }
  if (spec.rdzv_backend == "etcd" &&
      std::system(fmt::format("{} -c 'import etcd' >/dev/null 2>&1", torchrun_python(find_tool("torchrun"))).c_str()) !=
          0) {
    throw InputError("--rdzv-backend etcd: torchrun's Python cannot import etcd (apt-get install python3-etcd)");
  }
}

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

}  // namespace dpbench::cluster
