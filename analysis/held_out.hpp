// Held-out validation of `dpbench project --simulate`: the projection calibrated on some result
// files (a 1-rank run and small emulated runs a user can afford) predicts emulated-cluster runs it
// was not given, each on its own cluster's setting (nodes, ranks per node, each node's link rate,
// a straggler's), and each prediction is compared with the measured step. The same code path as
// `project --simulate`: for each held-out setting the whole projection is made with that topology
// and read at the run's world size.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/projection.hpp"

namespace dpbench {

// One held-out result document and the file it came from.
struct HeldOutFile {
  std::string path;
  nlohmann::json doc;
};

// The "held_out" block: every multi-rank run of the held-out files with its setting
// ("nodes", "ranks_per_node", "node_link", "node_link_of"), "measured_step_s" (its step p50),
// "predicted_step_s" (the simulated point of its mode and transport at its world size and global
// batch, calibrated on `calibration`; weak scaling at the run's per-rank batch) and "relative_error" (predicted / measured - 1); then "max_abs_error",
// "median_abs_error" and "beyond" (the runs whose |error| exceeds max_error). A run the projection
// has no simulated figure for keeps "unavailable" with the reason and counts as beyond.
// Throws InputError naming the file when a held-out file holds no emulated-cluster run (its
// "network" block with each node's requested rate), when a run's world size is not a power of
// two (the projection's points), or when max_error is not positive; and what project() throws.
nlohmann::json validate_held_out(const ProjectOptions& options, const std::vector<nlohmann::json>& calibration,
                                 const std::vector<HeldOutFile>& held_out, double max_error);

}  // namespace dpbench
