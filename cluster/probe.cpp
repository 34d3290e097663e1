#include "cluster/probe.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench::cluster {

namespace {

using Clock = std::chrono::steady_clock;

sockaddr_in ipv4(const std::string& address, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (inet_pton(AF_INET, address.c_str(), &a.sin_addr) != 1) throw Error(fmt::format("bad address {}", address));
  return a;
}

// A listening socket on address:0 in the calling thread's network namespace (run by in_netns).
int make_listener(const std::string& address) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in a = ipv4(address, 0);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 4) != 0) {
    const int err = errno;
    close(fd);
    throw Error(fmt::format("listening on {}: {}", address, std::strerror(err)));
  }
  return fd;
}

void no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Bytes `reader` receives from `writer` over `window` after window/4 of settling.
double bulk_rate(int writer, int reader, std::chrono::duration<double> window) {
  std::atomic<bool> stop{false};
  std::thread send_thread([&] {
    std::vector<char> chunk(64 * 1024, 'x');
    while (!stop.load()) {
      if (send(writer, chunk.data(), chunk.size(), MSG_NOSIGNAL) < 0 && errno != EINTR) break;
    }
    shutdown(writer, SHUT_WR);
  });
  std::vector<char> buf(256 * 1024);
  const auto settle = std::chrono::duration_cast<Clock::duration>(window / 4);
  const auto span = std::chrono::duration_cast<Clock::duration>(window);
  const auto t0 = Clock::now();
  Clock::time_point start{}, last{};
  double bytes = 0;
  bool failed = false;
  for (;;) {
    const ssize_t n = recv(reader, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed = !stop.load();
      break;
    }
    const auto now = Clock::now();
    if (stop.load()) continue;  // draining
    if (now - t0 < settle) continue;
    if (start == Clock::time_point{}) {
      start = now;
      continue;  // the first counted byte arrives after this read
    }
    bytes += static_cast<double>(n);
    last = now;
    if (now - start >= span) stop = true;
  }
  stop = true;
  send_thread.join();
  if (failed || last <= start) return 0;
  return bytes / std::chrono::duration<double>(last - start).count();
}

}  // namespace

LinkConnection::~LinkConnection() {
  if (node_end >= 0) close(node_end);
  if (switch_end >= 0) close(switch_end);
}

LinkConnection connect_link(const Node& node) {
  const int listener = in_netns(node.netns_fd, make_listener, node.address);
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  getsockname(listener, reinterpret_cast<sockaddr*>(&bound), &len);
  LinkConnection c;
  c.switch_end = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in from = ipv4(switch_address(), 0);
  sockaddr_in to = ipv4(node.address, ntohs(bound.sin_port));
  const bool ok = c.switch_end >= 0 && bind(c.switch_end, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
                  connect(c.switch_end, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0;
  const int err = errno;
  if (ok) c.node_end = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  close(listener);
  if (!ok || c.node_end < 0) {
    throw Error(fmt::format("node {} ({}): cannot connect across its link: {}", node.index, node.address,
                            std::strerror(ok ? errno : err)));
  }
  no_delay(c.node_end);
  no_delay(c.switch_end);
  return c;
}

LinkProbe probe_link(const Node& node, std::chrono::duration<double> window) {
  LinkProbe p;
  {
    LinkConnection c = connect_link(node);
    std::vector<double> rtts;
    char byte = 'p';
    for (int i = 0; i < 21; ++i) {
      const auto t0 = Clock::now();
      if (send(c.switch_end, &byte, 1, MSG_NOSIGNAL) != 1 || recv(c.node_end, &byte, 1, 0) != 1 ||
          send(c.node_end, &byte, 1, MSG_NOSIGNAL) != 1 || recv(c.switch_end, &byte, 1, 0) != 1) {
        throw Error(fmt::format("node {} ({}): round trip failed: {}", node.index, node.address, std::strerror(errno)));
      }
      rtts.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::nth_element(rtts.begin(), rtts.begin() + 10, rtts.end());
    p.rtt_s = rtts[10];
  }
  {
    LinkConnection c = connect_link(node);
    p.up_bytes_per_s = bulk_rate(c.node_end, c.switch_end, window);
  }
  {
    LinkConnection c = connect_link(node);
    p.down_bytes_per_s = bulk_rate(c.switch_end, c.node_end, window);
  }
  if (p.up_bytes_per_s <= 0 || p.down_bytes_per_s <= 0) {
    throw Error(fmt::format("node {} ({}): the bulk transfer across its link failed", node.index, node.address));
  }
  return p;
}

Heartbeat::Heartbeat(const std::vector<Node>& nodes, std::chrono::milliseconds interval,
                     std::chrono::milliseconds timeout, std::function<void(int node)> on_lost)
    : interval_(interval), timeout_(timeout), on_lost_(std::move(on_lost)) {
  for (const auto& n : nodes) {
    links_.push_back(connect_link(n));
    fcntl(links_.back().node_end, F_SETFL, O_NONBLOCK);
    fcntl(links_.back().switch_end, F_SETFL, O_NONBLOCK);
  }
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw Error(fmt::format("pipe: {}", std::strerror(errno)));
  thread_ = std::thread([this] { loop(); });
}

Heartbeat::~Heartbeat() {
  stop_ = true;
  (void)!write(wake_[1], "x", 1);
  thread_.join();
  close(wake_[0]);
  close(wake_[1]);
}

void Heartbeat::loop() {
  const std::size_t n = links_.size();
  std::vector<Clock::time_point> answered(n, Clock::now());
  std::vector<bool> lost(n, false), closed(n, false);
  auto next_beat = Clock::now();
  char buf[64];
  while (!stop_.load()) {
    const auto now = Clock::now();
    if (now >= next_beat) {
      for (auto& l : links_) (void)!send(l.switch_end, "h", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
      next_beat = now + interval_;
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (!lost[i] && now - answered[i] > timeout_) {
        lost[i] = true;
        on_lost_(static_cast<int>(i));
      }
    }
    std::vector<pollfd> fds;
    for (std::size_t i = 0; i < n; ++i) {  // a closed connection is no longer polled (poll skips fd -1)
      fds.push_back({closed[i] ? -1 : links_[i].node_end, POLLIN, 0});
      fds.push_back({closed[i] ? -1 : links_[i].switch_end, POLLIN, 0});
    }
    fds.push_back({wake_[0], POLLIN, 0});
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_beat - Clock::now()).count();
    poll(fds.data(), fds.size(), static_cast<int>(std::max<long>(1, wait)));
    for (std::size_t i = 0; i < n; ++i) {
      if (fds[2 * i].revents & (POLLIN | POLLHUP | POLLERR)) {  // the node's end echoes what it got
        const ssize_t got = recv(links_[i].node_end, buf, sizeof buf, MSG_DONTWAIT);
        if (got > 0) (void)!send(links_[i].node_end, buf, static_cast<std::size_t>(got), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (got == 0) closed[i] = true;
      }
      if (fds[2 * i + 1].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t got = recv(links_[i].switch_end, buf, sizeof buf, MSG_DONTWAIT);
        if (got > 0) answered[i] = Clock::now();
        if (got == 0) closed[i] = true;
      }
    }
  }
}

}  // namespace dpbench::cluster
