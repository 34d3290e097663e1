// The emulated cluster's plumbing on one Linux machine: a private user + network + mount + UTS
// namespace for the whole run (the way rootless containers start), and inside it one network
// namespace per node, each with one veth link into a bridge (the switch), addresses from
// 198.18.0.0/15 and both directions of every link shaped with tc. Everything is made with
// iproute2 (`ip`, `tc`) with checked exit codes; nothing outside the private namespace is
// touched, and the kernel removes every node and link when the run's last process ends (success,
// error, a signal, even SIGKILL), so there is nothing to clean up on the host.
// Not for: measuring links (cluster/probe.hpp) or running the job (cluster/cluster_job.hpp).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "cluster/link.hpp"

namespace dpbench::cluster {

// How this machine can host a cluster: "user" (unprivileged user namespaces), "root" (no user
// namespaces, but CAP_SYS_ADMIN and CAP_NET_ADMIN: a private network + mount namespace without a
// user namespace), or "" with `missing` naming what is missing (ip, tc, both namespace kinds).
struct Capability {
  std::string how;
  std::string missing;
};
// Tries both in a short-lived child process; creates nothing that outlives it. root_only: "root"
// or nothing (Slurm's daemons drop their supplementary groups, which a user namespace made by an
// unprivileged process forbids).
Capability probe_capability(bool root_only = false);

// The path of program `name` on PATH, then in /usr/sbin, /sbin, /usr/bin and /bin (where iproute2
// lives; a user's PATH may lack them); "" when it is in none of them.
std::string find_tool(const std::string& name);

// Runs `argv` (argv[0] looked up on PATH, /usr/sbin and /sbin) and waits. Throws Error naming the
// command and the first line of its stderr when it cannot start or exits non-zero.
void run_tool(const std::vector<std::string>& argv);

// Starts this program again (/proc/self/exe with `args`) in a child process that is alone in new
// user (when how == "user"), network, mount and UTS namespaces, with `env_add` ("NAME=value")
// added to the environment; the child dies with this process (PR_SET_PDEATHSIG). Waits for it,
// passing SIGINT and SIGTERM on, and returns its exit code (128 + signal when killed). With
// pid_namespace, the program is the first process (PID 1) of a new PID namespace with its own
// /proc, so that every process of the job ends with it, including daemons that detach from their
// parent (Slurm's). Throws Error when the namespaces cannot be made.
int run_in_private_namespaces(const std::string& how, const std::vector<std::string>& args,
                              const std::vector<std::string>& env_add, bool pid_namespace = false);

// One node of a built cluster.
struct Node {
  int index = 0;
  std::string hostname;        // "<prefix>-node<i>", in every node's hosts file
  std::string address;         // node_address(index)
  std::string netns;           // the network namespace's name (ip netns)
  std::string switch_port;     // the veth end on the bridge
  std::string iface = "eth0";  // the node's own end
  LinkRate rate;
  int netns_fd = -1;  // /run/netns/<netns>, open (O_CLOEXEC) for setns
};

// The cluster, built inside the private namespaces by build(); the kernel takes it down with the
// namespaces. Not copyable.
class Cluster {
 public:
  // Builds spec's nodes under names that start with `prefix` (<= 6 characters): mounts a private
  // tmpfs on /run (for `ip netns`), a hosts file naming every node over /etc/hosts, the bridge, one
  // namespace, veth pair and address per node, tbf on both ends of every link. Throws Error naming
  // the command that failed. Must run inside run_in_private_namespaces' child.
  static Cluster build(const ClusterSpec& spec, const std::string& prefix);
  Cluster(Cluster&&) noexcept;
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  ~Cluster();

  const std::vector<Node>& nodes() const { return nodes_; }
  const std::string& bridge() const { return bridge_; }
  const std::string& qdisc() const { return qdisc_; }

  // Starts argv in node `node`: its network namespace, a UTS namespace of its own with the node's
  // hostname, the environment `env` ("NAME=value", complete). The process is killed when this
  // thread's process dies (PR_SET_PDEATHSIG). Returns its pid; throws Error when fork fails.
  pid_t spawn(int node, const std::vector<std::string>& argv, const std::vector<std::string>& env) const;

 private:
  Cluster() = default;
  std::vector<Node> nodes_;
  std::string bridge_;
  std::string qdisc_ = "tbf";
};

// Starts argv here (the process's own namespaces) with the environment `env` ("NAME=value",
// complete); it is killed when this process dies (PR_SET_PDEATHSIG). Returns its pid; throws
// Error when fork fails.
pid_t spawn_here(const std::vector<std::string>& argv, const std::vector<std::string>& env);

// Runs fn() on a new thread that has entered the network namespace open at netns_fd, and returns
// its result: how a socket is made inside a node (a socket keeps the namespace it was made in).
// Throws Error when setns fails.
int in_netns(int netns_fd, int (*fn)(const std::string& address), const std::string& address);

}  // namespace dpbench::cluster
