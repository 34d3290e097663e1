// Measuring an emulated cluster's links before timing anything: bulk TCP throughput in each
// direction and the round-trip time between the switch (the bridge's own address) and each node,
// so that exactly one link is crossed. Sockets are made inside a node's namespace by a thread
// that entered it (cluster/netns.hpp in_netns); no process is started. Also the heartbeat that
// tells a node whose link went away from a slow one.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "cluster/netns.hpp"

namespace dpbench::cluster {

// A TCP connection across node's link: `node_end` lives in the node's namespace, `switch_end` in
// the switch's. Both close with the pair.
struct LinkConnection {
  int node_end = -1;
  int switch_end = -1;
  LinkConnection() = default;
  LinkConnection(LinkConnection&& o) noexcept : node_end(o.node_end), switch_end(o.switch_end) {
    o.node_end = o.switch_end = -1;
  }
  LinkConnection(const LinkConnection&) = delete;
  LinkConnection& operator=(const LinkConnection&) = delete;
  ~LinkConnection();
};
// Connects the switch to `node` over its link (TCP_NODELAY on both ends). Throws Error naming the
// node when it cannot.
LinkConnection connect_link(const Node& node);

// What the probe measured on one link.
struct LinkProbe {
  double up_bytes_per_s = 0;    // node -> switch, bulk TCP payload
  double down_bytes_per_s = 0;  // switch -> node
  double rtt_s = 0;             // median of 1-byte TCP round trips on the idle link
};
// Probes `node`'s link: 1-byte round trips (median of 21), then bulk TCP each way, counting the
// payload received over `window` after a settling time of window / 4 (tbf's burst, slow start).
// Throws Error naming the node when a transfer fails.
LinkProbe probe_link(const Node& node, std::chrono::duration<double> window);

// Sends one byte across every node's link every `interval` and expects it back; a node that
// does not answer for `timeout` is reported once through on_lost(node index), from the
// heartbeat's thread. Stops when destroyed. Throws Error when a connection cannot be made.
class Heartbeat {
 public:
  Heartbeat(const std::vector<Node>& nodes, std::chrono::milliseconds interval, std::chrono::milliseconds timeout,
            std::function<void(int node)> on_lost);
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  ~Heartbeat();

 private:
  void loop();
  std::vector<LinkConnection> links_;
  std::chrono::milliseconds interval_, timeout_;
  std::function<void(int)> on_lost_;
  std::atomic<bool> stop_{false};
  int wake_[2] = {-1, -1};
  std::thread thread_;
};

}  // namespace dpbench::cluster
