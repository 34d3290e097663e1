// The three stages of `dpbench run --nodes` (cluster/cluster_job.hpp) and the dispatch to the
// launcher that starts the job's processes (cluster/launchers.hpp, one launcher_*.cpp each).
#include "cluster/cluster_job.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "cluster/job_common.hpp"
#include "cluster/launchers.hpp"
#include "cluster/netns.hpp"
#include "cluster/probe.hpp"
#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "launch/resolve.hpp"

namespace dpbench::cluster {

namespace {

constexpr auto kProbeWindow = std::chrono::milliseconds(600);
constexpr auto kHeartbeatInterval = std::chrono::milliseconds(1000);

std::string kernel_release() {
  utsname u{};
  return uname(&u) == 0 ? u.release : "unknown";
}

// The cluster's description run_inner writes for its ranks (cluster_description): nodes, ranks per
// node, the launcher, every link's requested and probed rates and RTT, qdisc, kernel, namespaces.
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
  if (spec.launcher == Launcher::torchrun) {
    launcher["rdzv_backend"] = spec.rdzv_backend;
    launcher["max_restarts"] = spec.max_restarts;
  }
  if (spec.launcher == Launcher::mpirun) {
    launcher["mpi_collectives"] = mpi_collectives_description();
    launcher["mpi_yield_when_idle"] = mpi_yields_when_idle(spec);
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

// Whether the job runs in a PID namespace of its own, whose processes all end with the inner
// stage (its PID 1). Slurm's slurmstepd detaches from its parent; Open MPI's daemons (orted) are
// children of mpirun's remote shell and outlive mpirun when it is killed before they have heard
// from it (under load, a SIGINT's 2 s grace can end before they exit), then retry the lost
// connection, for over a minute, on a network that is gone. The env and torchrun launchers' processes
// are the inner stage's own children, killed with it (PR_SET_PDEATHSIG); their ranks treat a
// parent of PID 1 as a dead one (die_with_parent), so they stay in the caller's PID namespace.
bool needs_pid_namespace(Launcher launcher) { return launcher == Launcher::srun || launcher == Launcher::mpirun; }

}  // namespace

int run_job(const ClusterSpec& spec, const std::vector<std::string>& options) {
  validate(spec);
  if (spec.launcher == Launcher::mpirun) check_mpirun_tools();
  if (spec.launcher == Launcher::torchrun) check_torchrun_tools(spec);
  if (spec.launcher == Launcher::srun) check_srun_tools();
  const Capability cap = probe_capability(spec.launcher == Launcher::srun);
  if (cap.how.empty()) throw InputError("--nodes: this machine cannot host an emulated cluster: " + cap.missing);
  std::vector<std::string> args = {kInnerCommand};
  args.insert(args.end(), options.begin(), options.end());
  return run_in_private_namespaces(cap.how, args, {fmt::format("DPBENCH_CLUSTER_HOW={}", cap.how)},
                                   needs_pid_namespace(spec.launcher));
}

int run_inner(const ClusterSpec& spec, const std::vector<std::string>& options) {
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
  std::vector<std::string> args = {kRankCommand};
  args.insert(args.end(), options.begin(), options.end());
  if (spec.launcher == Launcher::torchrun) return run_torchrun_job(spec, c, args, lost_node);
  if (spec.launcher == Launcher::mpirun) return run_mpirun_job(spec, c, args, lost_node);
  if (spec.launcher == Launcher::srun) return run_srun_job(spec, c, args, lost_node);
  return run_direct_job(spec, c, args, lost_node);
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
