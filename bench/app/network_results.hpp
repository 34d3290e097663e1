// What a run on an emulated cluster adds to its result: per node, the bytes its link's interface
// counted beside the bytes dpbench's communicators counted; per run, the measured step time beside
// the alpha-beta projection fed with the probed link, and the communication time beside the
// strategy's bandwidth bound. Read by `dpbench run` on rank 0 of a cluster job.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "train/training.hpp"

namespace dpbench {

// Bounds of wire bytes over counted bytes per node and direction: at least the payload, at most
// the payload with the headers of full 1448-byte TCP segments (66 bytes: Ethernet 14, IPv4 20,
// TCP 32 with timestamps; 4.6 %) plus the ACKs of the other direction's data (one per two
// segments, 2.3 % of it) and gloo's own small messages: 1.00 to 1.10 for even traffic.
inline constexpr double kWireOverCountedMin = 1.00;
inline constexpr double kWireOverCountedMax = 1.10;

// Adds a "network" object to every run document in runs_json (parallel to `runs`), from the
// cluster's description `network` (cluster/cluster_job.hpp): the link the model used (slowest
// probed rate, alpha = the largest RTT / 2), per-node wire and counted bytes per step with their
// ratios, the projection (compute as measured in the run: mean of rank 0's step time less its
// exposed communication; communication from the strategy's alpha-beta terms) with its error, and
// the bandwidth bound (the same terms with alpha = 0) with the fraction of it the run achieved.
void add_network_results(const nlohmann::json& network, const std::vector<RunResult>& runs, nlohmann::json& runs_json);

// The emulated cluster's rows under the comparison table: probed links, measured and projected
// step time, comm against its bandwidth bound, wire against counted bytes.
void print_network_table(const std::vector<RunResult>& runs, const nlohmann::json& document);

}  // namespace dpbench
