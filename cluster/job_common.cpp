#include "cluster/job_common.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "cluster/cluster_job.hpp"
#include "core/error.hpp"

extern char** environ;

namespace dpbench::cluster {

namespace {

constexpr auto kGrace = std::chrono::seconds(10);  // after a rank failed, for the others to end

std::atomic<int> stop_signal{0};

// The node=N item of a DPBENCH_FAULT spec.
const std::regex& fault_node_key() {
  static const std::regex key(R"((^|,)node=([0-9]+)(,|$))");
  return key;
}

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

}  // namespace

void on_signal(int sig) { stop_signal = sig; }

std::string self_exe() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error(fmt::format("/proc/self/exe: {}", ec.message()));
  return path.string();
}

std::vector<std::string> node_env(const std::vector<Node>& nodes, int node) {
  static const std::vector<std::string> dropped = {
      "RANK=",          "WORLD_SIZE=",          "LOCAL_RANK=",   "LOCAL_WORLD_SIZE=",    "GROUP_RANK=",
      "MASTER_ADDR=",   "MASTER_PORT=",         "TORCHELASTIC_", "DPBENCH_MASTER_PORT=", "GLOO_SOCKET_IFNAME=",
      "DPBENCH_FAULT=", "DPBENCH_CLUSTER_NODE="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    bool drop = false;
    for (const auto& d : dropped) drop = drop || v.rfind(d, 0) == 0;
    if (!drop) env.push_back(v);
  }
  env.push_back(fmt::format("{}={}", kDescriptionEnv, kDescriptionPath));
  env.push_back("DPBENCH_NET_IFACE=" + nodes[static_cast<std::size_t>(node)].iface);
  env.push_back(fmt::format("DPBENCH_CLUSTER_NODE={}", node));
  return env;
}

int fault_node() {
  const char* fault = std::getenv("DPBENCH_FAULT");
  std::cmatch m;
  return fault != nullptr && std::regex_search(fault, m, fault_node_key()) ? std::stoi(m[2].str()) : -1;
}

std::string fault_with(const std::string& by) {
  return std::regex_replace(std::getenv("DPBENCH_FAULT"), fault_node_key(), "$1" + by + "$3");
}

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

}  // namespace dpbench::cluster
