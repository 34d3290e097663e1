// A network interface of this process's network namespace, as the kernel counts it: for checking
// the bytes a communicator says it moved against the bytes that crossed a node's link in an
// emulated cluster, and for the link-down fault. Not for: building interfaces (cluster/).
#pragma once

#include <optional>
#include <string>

#include "core/comm.hpp"

namespace dpbench {

// Bytes the kernel counted on `iface` since it came up (/proc/self/net/dev: tx as bytes_sent, rx
// as bytes_received, whole frames with their Ethernet, IP and TCP headers). nullopt when there is
// no such interface in this namespace.
std::optional<CommStats> interface_counters(const std::string& iface);

// The interface an emulated cluster's node reaches the others by ($DPBENCH_NET_IFACE), or "" when
// this process is not a rank of an emulated cluster.
std::string cluster_interface();

// The index of the emulated cluster's node this process runs on ($DPBENCH_CLUSTER_NODE), or -1.
int cluster_node();

// The address of this host's interface that reaches `host` (a name or an IPv4 address): the source
// address the kernel's routing picks for it (a UDP socket connected to it; nothing is sent).
// "127.0.0.1" for a loopback host. Throws Error naming the host when it cannot be resolved or
// reached. How gloo picks its own address for a remote MASTER_ADDR, so that a hostname that
// /etc/hosts maps to 127.0.1.1 is never advertised to other nodes.
std::string address_toward(const std::string& host);

// Sets `iface` down (SIOCSIFFLAGS). Throws Error naming the interface when the kernel refuses.
void set_interface_down(const std::string& iface);

}  // namespace dpbench
