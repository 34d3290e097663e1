// What a run on an emulated cluster adds to its result: per node, the bytes its link's interface
// counted beside the bytes dpbench's communicators counted and the bytes the run's schedule says
// cross the link; per run, the measured step time beside the simulated one (the schedule played
// by SimGrid on the probed links) and the alpha-beta projection, and the communication time beside
// the per-link bandwidth bound. Read by `dpbench run` on rank 0 of a cluster job.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "train/training.hpp"

namespace dpbench {

// Bounds of wire bytes over the bytes that cross the node's link (the schedule's; with one rank per
// node, the communicators' counts) per node and direction. Above: the payload with the
// headers of full 1448-byte TCP segments (66 bytes: Ethernet 14, IPv4 20, TCP 32 with timestamps;
// 4.6 %; less where the kernel counts segmentation-offloaded super-packets) plus the ACKs of the
// other direction's data (one per two segments, 2.3 % of it) and gloo's own small messages.
// Below: the counters are read on the rank's clock when timing starts and ends, and up to a
// socket buffer of the last step's data may not have left yet (a few % of the timed bytes).
// 0.95 to 1.10.
inline constexpr double kWireOverCountedMin = 0.95;
inline constexpr double kWireOverCountedMax = 1.10;
// Beyond that share, per message crossing the node's link (either way) where the schedule says
// which do: a message costs its own headers (a partly filled last segment, gloo's preamble) and
// the control messages and ACKs that go with it (gloo's pair notifies its peer that a receive or
// send is ready; each such notice and ACK is a 66-byte-headed packet of its own). Measured on
// the emulated cluster, 2 nodes, gloo, PowerSGD's 148-512-byte ring chunks: 405 bytes on the
// wire per message sent beyond its payload (1,912 counted bytes per step came to 4,343). Small
// messages carry more than their 10 % in headers, so each adds this to the allowance.
inline constexpr double kWirePerMessageBytes = 400.0;

// Adds a "network" object to every run document in runs_json (parallel to `runs`), from the
// cluster's description `network` (cluster/cluster_job.hpp): the link the model used (slowest
// probed rate, alpha = the largest RTT / 2), per-node wire and counted bytes per step with their
// ratios, the projection (compute as measured in the run: mean of rank 0's step time less its
// exposed communication; communication from the strategy's alpha-beta terms, of which the share
// the strategy overlaps with backward is exposed in the proportion the run measured) with its
// error, the simulation (sim/simulate.hpp) with its error, and the bandwidth bound (per link: the
// busiest link direction's crossing bytes at its probed rate; for a strategy without a schedule,
// the alpha-beta terms with alpha = 0) with the fraction of it the run achieved.
void add_network_results(const nlohmann::json& network, const std::vector<RunResult>& runs, nlohmann::json& runs_json);

// The emulated cluster's rows under the comparison table: probed links, measured and projected
// step time, comm against its bandwidth bound, wire against counted bytes.
void print_network_table(const std::vector<RunResult>& runs, const nlohmann::json& document);

}  // namespace dpbench
