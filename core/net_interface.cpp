#include "core/net_interface.hpp"

#include <arpa/inet.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

std::optional<CommStats> interface_counters(const std::string& iface) {
  std::ifstream f("/proc/self/net/dev");
  std::string line;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != iface) continue;
    // rx: bytes packets errs drop fifo frame compressed multicast; tx: bytes ...
    std::istringstream fields(line.substr(colon + 1));
    long long v[9] = {};
    for (auto& x : v) fields >> x;
    if (!fields) return std::nullopt;
    return CommStats{v[8], v[0]};
  }
  return std::nullopt;
}

std::string cluster_interface() {
  const char* v = std::getenv("DPBENCH_NET_IFACE");
  return v != nullptr ? v : "";
}

int cluster_node() {
  const char* v = std::getenv("DPBENCH_CLUSTER_NODE");
  if (v != nullptr && *v != '\0') return std::atoi(v);
  // Under the cluster's srun, every task has srun's environment: its node is Slurm's node index
  // (the nodes are in slurm.conf in their order).
  const char* slurm = std::getenv("SLURM_NODEID");
  return !cluster_interface().empty() && slurm != nullptr && *slurm != '\0' ? std::atoi(slurm) : -1;
}

std::string address_toward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw Error(fmt::format("MASTER_ADDR {}: cannot resolve it: {}", host, gai_strerror(rc)));
  }
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  freeaddrinfo(found);
  if (fd >= 0) close(fd);
  if (!ok) throw Error(fmt::format("MASTER_ADDR {}: no route to it: {}", host, std::strerror(err)));
  char text[INET_ADDRSTRLEN] = {0};
  inet_ntop(AF_INET, &local.sin_addr, text, sizeof text);
  return text;
}

void set_interface_down(const std::string& iface) {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(fmt::format("{}: socket: {}", iface, std::strerror(errno)));
  ifreq req{};
  std::strncpy(req.ifr_name, iface.c_str(), IFNAMSIZ - 1);
  bool ok = ioctl(fd, SIOCGIFFLAGS, &req) == 0;
  if (ok) {
    req.ifr_flags = static_cast<short>(req.ifr_flags & ~IFF_UP);
    ok = ioctl(fd, SIOCSIFFLAGS, &req) == 0;
  }
  const int err = errno;
  close(fd);
  if (!ok) throw Error(fmt::format("setting {} down: {}", iface, std::strerror(err)));
}

}  // namespace dpbench
