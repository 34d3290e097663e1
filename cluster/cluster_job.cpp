#include "cluster/cluster_job.hpp"

#include <signal.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <thread>

#include <fmt/format.h>

#include "cluster/netns.hpp"
#include "cluster/probe.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"

extern char** environ;

namespace dpbench::cluster {

namespace {

constexpr const char* kStageEnv = "DPBENCH_CLUSTER_STAGE";
constexpr const char* kDescriptionPath = "/run/dpbench-cluster.json";
constexpr int kMasterPort = 29500;  // torchrun's default; the namespaces are the run's own
constexpr auto kProbeWindow = std::chrono::milliseconds(600);
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(1000);
constexpr auto kHeartbeatTimeout = std::chrono::milliseconds(10000);
constexpr auto kGrace = std::chrono::seconds(10);  // after a rank failed, for the others to end

std::atomic<int> stop_signal{0};
void on_signal(int sig) { stop_signal = sig; }

std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

// The environment of rank `rank` on `node`: this one's, less any launcher variables, plus the
// torchrun-style ones. DPBENCH_FAULT's node=N becomes rank=<first rank of node N>.
std::vector<std::string> rank_env(const ClusterSpec& spec, const std::vector<Node>& nodes, int node, int local) {
  static const std::vector<std::string> dropped = {
      "RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "GROUP_RANK=", "MASTER_ADDR=", "MASTER_PORT=",
      "TORCHELASTIC_RUN_ID=", "DPBENCH_MASTER_PORT=", "GLOO_SOCKET_IFNAME=", "DPBENCH_FAULT="};
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    bool drop = v.rfind(std::string(kStageEnv) + "=", 0) == 0;
    for (const auto& d : dropped) drop = drop || v.rfind(d, 0) == 0;
    if (!drop) env.push_back(v);
  }
  const int rank = node * spec.ranks_per_node + local;
  env.push_back(fmt::format("RANK={}", rank));
  env.push_back(fmt::format("WORLD_SIZE={}", spec.world_size()));
  env.push_back(fmt::format("LOCAL_RANK={}", local));
  env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", spec.ranks_per_node));
  env.push_back(fmt::format("GROUP_RANK={}", node));
  env.push_back("MASTER_ADDR=" + nodes.front().hostname);
  env.push_back(fmt::format("MASTER_PORT={}", kMasterPort));
  env.push_back(fmt::format("{}=rank", kStageEnv));
  env.push_back(fmt::format("{}={}", kDescriptionEnv, kDescriptionPath));
  env.push_back("DPBENCH_NET_IFACE=" + nodes[static_cast<std::size_t>(node)].iface);
  if (const char* fault = std::getenv("DPBENCH_FAULT")) {
    std::smatch m;
    const std::string f = fault;
    static const std::regex node_key(R"((^|,)node=([0-9]+)(,|$))");
    if (std::regex_search(f, m, node_key)) {
      const int first = std::stoi(m[2].str()) * spec.ranks_per_node;
      env.push_back("DPBENCH_FAULT=" + std::regex_replace(f, node_key, fmt::format("$1rank={}$3", first)));
    } else {
      env.push_back("DPBENCH_FAULT=" + f);
    }
  }
  return env;
}

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
  return {{"nodes", spec.nodes},
          {"ranks_per_node", spec.ranks_per_node},
          {"qdisc", c.qdisc()},
          {"kernel", kernel_release()},
          {"namespaces", how == "user" ? "private user + network namespace (unprivileged)"
                                       : "private network namespace (root)"},
          {"addresses", "198.18.0.0/24 (RFC 2544)"},
          {"probe", {{"method", "bulk TCP each way between the switch and the node, then 1-byte round trips"},
                     {"window_s", std::chrono::duration<double>(kProbeWindow).count()}}},
          {"links", links}};
}

// Waits for every rank; stops them all when one fails, a node stops answering or a signal came.
int wait_for_ranks(const std::vector<pid_t>& pids, const std::vector<int>& node_of, const Cluster& c,
                   const std::atomic<int>& lost_node) {
  std::map<pid_t, int> running;
  for (std::size_t r = 0; r < pids.size(); ++r) running[pids[r]] = static_cast<int>(r);
  int code = 0;
  std::chrono::steady_clock::time_point deadline{};
  auto kill_all = [&](int sig) {
    for (const auto& [pid, rank] : running) kill(pid, sig);
  };
  while (!running.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running.count(pid) != 0) {
      const int rank = running[pid];
      running.erase(pid);
      const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (rc != 0 && code == 0) {
        code = rc;
        const Node& n = c.nodes()[static_cast<std::size_t>(node_of[static_cast<std::size_t>(rank)])];
        fmt::print(stderr, "dpbench: rank {} on node {} ({}) exited with {}; stopping the job\n", rank, n.index,
                   n.hostname, WIFEXITED(status) ? fmt::format("code {}", rc) : fmt::format("signal {}", WTERMSIG(status)));
        deadline = std::chrono::steady_clock::now() + kGrace;
      }
      continue;
    }
    if (const int lost = lost_node.load(); lost >= 0 && code == 0) {
      const Node& n = c.nodes()[static_cast<std::size_t>(lost)];
      std::string ranks;
      for (std::size_t r = 0; r < node_of.size(); ++r) {
        if (node_of[r] == lost) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      }
      fmt::print(stderr,
                 "dpbench: error: node {} ({}, {}; rank {}) stopped answering across its link for {} s "
                 "(link down or node gone); stopping the job\n",
                 n.index, n.hostname, n.address, ranks,
                 std::chrono::duration_cast<std::chrono::seconds>(kHeartbeatTimeout).count());
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

}  // namespace

std::string stage() {
  const char* v = std::getenv(kStageEnv);
  return v != nullptr ? v : "";
}

int run_job(const ClusterSpec& spec, const std::vector<std::string>& args) {
  validate(spec);
  const Capability cap = probe_capability();
  if (cap.how.empty()) throw InputError("--nodes: this machine cannot host an emulated cluster: " + cap.missing);
  return run_in_private_namespaces(cap.how, args, {fmt::format("{}=inner", kStageEnv),
                                                   fmt::format("DPBENCH_CLUSTER_HOW={}", cap.how)});
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
             spec.nodes, spec.ranks_per_node, spec.ranks_per_node == 1 ? "" : "s", c.qdisc(), how == "user" ? "unprivileged namespaces" : "root");
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
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<pid_t> pids;
  std::vector<int> node_of;
  for (int node = 0; node < spec.nodes; ++node) {
    for (int local = 0; local < spec.ranks_per_node; ++local) {
      pids.push_back(c.spawn(node, argv, rank_env(spec, c.nodes(), node, local)));
      node_of.push_back(node);
    }
  }
  return wait_for_ranks(pids, node_of, c, lost_node);
}

nlohmann::json cluster_description() {
  const char* path = std::getenv(kDescriptionEnv);
  if (path == nullptr || *path == '\0') return nullptr;
  std::ifstream f(path);
  if (!f) throw Error(fmt::format("{}={}: cannot read the cluster's description", kDescriptionEnv, path));
  return nlohmann::json::parse(f);
}

}  // namespace dpbench::cluster
