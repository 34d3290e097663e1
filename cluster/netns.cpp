#include "cluster/netns.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <future>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"

extern char** environ;

namespace dpbench::cluster {

std::string find_tool(const std::string& name) {
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/sbin:/sbin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= path.size()) {
    const std::size_t end = path.find(':', start);
    const std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) {
      const std::string candidate = dir + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return "";
}

namespace {

// Null-terminated pointer arrays over strings that outlive them (for execve after fork).
std::vector<char*> c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

std::string join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

// Writes `text` to `path` with raw system calls (safe after fork). Returns false on failure.
bool write_file_raw(const char* path, const char* text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const auto n = static_cast<ssize_t>(std::strlen(text));
  const bool ok = write(fd, text, static_cast<std::size_t>(n)) == n;
  close(fd);
  return ok;
}

// In a child: enters new namespaces as `how` says. Returns 0 or the errno of the failing call.
int enter_namespaces(const std::string& how, const std::string& uid_map, const std::string& gid_map) {
  const int flags = CLONE_NEWNET | CLONE_NEWNS | CLONE_NEWUTS | (how == "user" ? CLONE_NEWUSER : 0);
  if (unshare(flags) != 0) return errno;
  if (how == "user") {
    if (!write_file_raw("/proc/self/setgroups", "deny")) return errno;
    if (!write_file_raw("/proc/self/uid_map", uid_map.c_str())) return errno;
    if (!write_file_raw("/proc/self/gid_map", gid_map.c_str())) return errno;
  }
  // Nothing mounted in here may reach the host's mount namespace.
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return errno;
  return 0;
}

std::atomic<pid_t> forward_to{0};
void forward_signal(int sig) {
  const pid_t pid = forward_to.load();
  if (pid > 0) kill(pid, sig);
}

// Waits for child `pid`, passing SIGINT and SIGTERM on to it; its exit code (128 + signal when
// killed).
int wait_passing_signals(pid_t pid) {
  forward_to = pid;
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  forward_to = 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// In a child that entered the run's namespaces: a new PID namespace, whose first process (PID 1,
// with its own /proc) returns 0 from here to exec the stage. This process stays outside as its
// parent: it closes `close_fd`, passes SIGINT and SIGTERM on, and exits with PID 1's status
// (never returns). When PID 1 ends, the kernel kills every process left in the namespace, however
// it was started (slurmd's slurmstepd daemonizes away from its parent). Returns an errno on failure.
int enter_pid_namespace(int close_fd) {
  if (unshare(CLONE_NEWPID) != 0) return errno;
  const pid_t init = fork();
  if (init < 0) return errno;
  if (init == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // (getppid() is 0 here: the parent is outside the namespace)
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) return errno;
    return 0;
  }
  close(close_fd);
  _exit(wait_passing_signals(init));
}

// Whether a child can enter the namespaces of `how` (and make a bridge there, for "root").
bool can_enter(const std::string& how) {
  const std::string uid_map = fmt::format("0 {} 1", getuid());
  const std::string gid_map = fmt::format("0 {} 1", getgid());
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) _exit(enter_namespaces(how, uid_map, gid_map) == 0 ? 0 : 1);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

Capability probe_capability(bool root_only) {
  Capability c;
  std::vector<std::string> missing;
  for (const char* tool : {"ip", "tc"}) {
    if (find_tool(tool).empty()) missing.push_back(fmt::format("`{}` (iproute2) is not installed", tool));
  }
  if (missing.empty() && root_only) {
    if (can_enter("root")) {
      c.how = "root";
    } else {
      missing.push_back("--launcher srun needs root (CAP_SYS_ADMIN + CAP_NET_ADMIN): Slurm's daemons drop their "
                        "supplementary groups, which an unprivileged user namespace forbids");
    }
  } else if (missing.empty()) {
    if (can_enter("user")) {
      c.how = "user";
    } else if (can_enter("root")) {
      c.how = "root";
    } else {
      missing.push_back("neither unprivileged user namespaces (kernel.unprivileged_userns_clone, "
                        "user.max_user_namespaces) nor root / CAP_SYS_ADMIN + CAP_NET_ADMIN are available");
    }
  }
  for (const auto& m : missing) c.missing += (c.missing.empty() ? "" : "; ") + m;
  return c;
}

void run_tool(const std::vector<std::string>& argv) {
  const std::string tool = find_tool(argv.at(0));
  if (tool.empty()) throw Error(fmt::format("{}: `{}` not found", join(argv), argv[0]));
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) throw Error(fmt::format("{}: pipe: {}", join(argv), std::strerror(errno)));
  std::vector<std::string> args = argv;
  args[0] = tool;
  auto cargs = c_array(args);
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("{}: fork: {}", join(argv), std::strerror(errno)));
  if (pid == 0) {
    dup2(err_pipe[1], STDERR_FILENO);
    const int devnull = open("/dev/null", O_WRONLY);
    if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
    execve(cargs[0], cargs.data(), environ);
    _exit(127);
  }
  close(err_pipe[1]);
  std::string err;
  char buf[512];
  ssize_t n;
  while ((n = read(err_pipe[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) err.append(buf, static_cast<std::size_t>(n));
  }
  close(err_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    const std::string first = err.substr(0, err.find('\n'));
    throw Error(fmt::format("`{}` failed: {}", join(argv),
                            first.empty() ? "exit " + std::to_string(WEXITSTATUS(status)) : first));
  }
}

int run_in_private_namespaces(const std::string& how, const std::vector<std::string>& args,
                              const std::vector<std::string>& env_add, bool pid_namespace) {
  std::vector<std::string> argv = {"/proc/self/exe"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.insert(env.end(), env_add.begin(), env_add.end());
  auto cargv = c_array(argv);
  auto cenv = c_array(env);
  const std::string uid_map = fmt::format("0 {} 1", getuid());
  const std::string gid_map = fmt::format("0 {} 1", getgid());
  int status_pipe[2];
  if (pipe2(status_pipe, O_CLOEXEC) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("fork: {}", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int err = enter_namespaces(how, uid_map, gid_map);
    if (err == 0 && pid_namespace) err = enter_pid_namespace(status_pipe[1]);
    if (err == 0) {
      execve(cargv[0], cargv.data(), cenv.data());
      err = errno;
    }
    (void)!write(status_pipe[1], &err, sizeof err);
    _exit(1);
  }
  close(status_pipe[1]);
  int err = 0;
  const bool failed = read(status_pipe[0], &err, sizeof err) == static_cast<ssize_t>(sizeof err);
  close(status_pipe[0]);
  if (failed) {
    waitpid(pid, nullptr, 0);
    throw Error(fmt::format("cannot enter the emulated cluster's namespaces ({}): {}", how, std::strerror(err)));
  }
  return wait_passing_signals(pid);
}

Cluster::Cluster(Cluster&& other) noexcept
    : nodes_(std::move(other.nodes_)), bridge_(std::move(other.bridge_)), qdisc_(std::move(other.qdisc_)) {
  other.nodes_.clear();
}

Cluster::~Cluster() {
  for (auto& n : nodes_) {
    if (n.netns_fd >= 0) close(n.netns_fd);
  }
}

Cluster Cluster::build(const ClusterSpec& spec, const std::string& prefix) {
  // A private /run for `ip netns` (its files live in /run/netns), then the hosts file.
  if (mount("dpbench", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) {
    throw Error(fmt::format("mounting a private /run for the cluster: {}", std::strerror(errno)));
  }
  Cluster c;
  c.bridge_ = prefix + "-br";
  for (int i = 0; i < spec.nodes; ++i) {
    Node n;
    n.index = i;
    n.hostname = fmt::format("{}-node{}", prefix, i);
    n.address = node_address(i);
    n.netns = fmt::format("{}-n{}", prefix, i);
    n.switch_port = fmt::format("{}-v{}", prefix, i);
    n.rate = spec.rate_of(i);
    c.nodes_.push_back(n);
  }
  {
    std::ofstream hosts("/run/dpbench-hosts");
    hosts << "127.0.0.1\tlocalhost\n" << switch_address() << '\t' << prefix << "-switch\n";
    for (const auto& n : c.nodes_) hosts << n.address << '\t' << n.hostname << '\n';
    if (!hosts) throw Error("cannot write the cluster's hosts file /run/dpbench-hosts");
  }
  if (mount("/run/dpbench-hosts", "/etc/hosts", nullptr, MS_BIND, nullptr) != 0) {
    throw Error(fmt::format("bind-mounting the cluster's hosts file on /etc/hosts: {}", std::strerror(errno)));
  }
  run_tool({"ip", "link", "set", "lo", "up"});
  run_tool({"ip", "link", "add", c.bridge_, "type", "bridge"});
  run_tool({"ip", "addr", "add", fmt::format("{}/{}", switch_address(), kPrefixLength), "dev", c.bridge_});
  run_tool({"ip", "link", "set", c.bridge_, "up"});
  for (auto& n : c.nodes_) {
    run_tool({"ip", "netns", "add", n.netns});
    run_tool({"ip", "link", "add", n.switch_port, "type", "veth", "peer", "name", n.iface, "netns", n.netns});
    run_tool({"ip", "link", "set", n.switch_port, "master", c.bridge_, "up"});
    run_tool({"ip", "-n", n.netns, "addr", "add", fmt::format("{}/{}", n.address, kPrefixLength), "dev", n.iface});
    run_tool({"ip", "-n", n.netns, "link", "set", n.iface, "up"});
    run_tool({"ip", "-n", n.netns, "link", "set", "lo", "up"});
    // Downlink: the switch's port sends into the node; uplink: the node's end sends out.
    std::vector<std::string> down = {"tc"}, up = {"tc", "-n", n.netns};
    for (const auto& a : tbf_args(n.switch_port, n.rate)) down.push_back(a);
    for (const auto& a : tbf_args(n.iface, n.rate)) up.push_back(a);
    run_tool(down);
    run_tool(up);
    n.netns_fd = open(("/run/netns/" + n.netns).c_str(), O_RDONLY | O_CLOEXEC);
    if (n.netns_fd < 0) throw Error(fmt::format("opening /run/netns/{}: {}", n.netns, std::strerror(errno)));
  }
  return c;
}

namespace {

// Forks argv with the environment `env`, killed when this process dies (PR_SET_PDEATHSIG);
// inside node `n`'s network namespace and a UTS namespace with its hostname when n is given.
pid_t spawn_dying_with_parent(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                              const Node* n) {
  auto cargv = c_array(argv);
  auto cenv = c_array(env);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) throw Error(fmt::format("starting {}: fork: {}", argv.front(), std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    if (n != nullptr && (setns(n->netns_fd, CLONE_NEWNET) != 0 || unshare(CLONE_NEWUTS) != 0 ||
                         sethostname(n->hostname.c_str(), n->hostname.size()) != 0)) {
      _exit(126);
    }
    execve(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

pid_t Cluster::spawn(int node, const std::vector<std::string>& argv, const std::vector<std::string>& env) const {
  return spawn_dying_with_parent(argv, env, &nodes_.at(static_cast<std::size_t>(node)));
}

pid_t spawn_here(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  return spawn_dying_with_parent(argv, env, nullptr);
}

int in_netns(int netns_fd, int (*fn)(const std::string& address), const std::string& address) {
  std::promise<int> result;
  std::thread t([&] {
    if (setns(netns_fd, CLONE_NEWNET) != 0) {
      result.set_exception(std::make_exception_ptr(Error(fmt::format("setns: {}", std::strerror(errno)))));
      return;
    }
    try {
      result.set_value(fn(address));
    } catch (...) {
      result.set_exception(std::current_exception());
    }
  });
  t.join();
  return result.get_future().get();
}

}  // namespace dpbench::cluster
