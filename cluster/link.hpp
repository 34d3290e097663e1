// What an emulated cluster is made of, as data: its nodes, their links and the rates they are
// shaped to, and the tc commands a link's rate turns into (the way Mininet's TCIntf.bwCmds derives
// a link's commands from its parameters). Pure functions, no system calls: cluster/netns.hpp
// applies them. Not for: creating namespaces or measuring links (cluster/netns.hpp, probe.hpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/names.hpp"
#include "core/rate.hpp"

namespace dpbench::cluster {

using dpbench::LinkRate;    // core/rate.hpp
using dpbench::parse_rate;  // core/rate.hpp

// What `--nodes N --link RATE --link-of I=RATE --ranks-per-node K` ask for.
struct ClusterSpec {
  int nodes = 0;  // 0: no emulated cluster
  int ranks_per_node = 1;
  LinkRate link;                      // every node's link, both directions
  std::map<int, LinkRate> link_of;    // per-node overrides, node index -> rate
  Launcher launcher = Launcher::env;  // how ranks start (core/names.hpp)
  std::string rdzv_backend = "c10d";  // torchrun: c10d (its store in node 0's agent) or etcd (etcd on node 0)
  int max_restarts = 0;  // torchrun's --max_restarts; also how often a node whose agent died is started again

  // The rate of node i's link (its override, else `link`).
  const LinkRate& rate_of(int node) const;
  int world_size() const { return nodes * ranks_per_node; }
};

// Parses "--link-of I=RATE" values into spec.link_of. Throws InputError naming the value when it
// is not I=RATE or I is not a node of the cluster (0 <= I < nodes).
void parse_link_of(const std::vector<std::string>& values, ClusterSpec& spec);

// Time dilation by `factor` (> 0): every link's rate divided by it, its text "RATE/factor".
// Throws InputError when a dilated rate is above tc's 100 gbit/s or below 1 kbit/s.
void dilate(ClusterSpec& spec, double factor);

// Checks the spec: 2..64 nodes, 1..16 ranks per node, a link rate, rendezvous c10d or etcd (torchrun only), 0..10 restarts (torchrun only). Throws InputError naming
// the option.
void validate(const ClusterSpec& spec);

// The tc(8) arguments (after "tc") that shape egress of `dev` to `rate` with a token bucket (tbf):
// burst = max(rate x 1 ms, 64 KiB): enough for the kernel's high-resolution timers to keep the
// rate, small beside a step's messages (a bucket refilled while a rank computes lets that much
// through at memory speed),
// and a queue of 50 ms at that rate. The same on both ends of a link shapes both directions.
std::vector<std::string> tbf_args(const std::string& dev, const LinkRate& rate);

// Addresses of an emulated cluster, from 198.18.0.0/15 (RFC 2544, reserved for benchmarking):
// node i is 198.18.0.(i+1)/24, the switch's own address (the probe's and the heartbeat's end)
// 198.18.0.254.
std::string node_address(int node);
std::string switch_address();
inline constexpr int kPrefixLength = 24;

}  // namespace dpbench::cluster
