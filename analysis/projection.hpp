// The projection (`dpbench project`'s document): calibrates the alpha-beta model
// (train/alpha_beta_model.hpp) on measured result files, or takes a described model on a device
// profile, and projects step time, throughput, speedup and scaling efficiency of each strategy's
// curves for world sizes 1, 2, 4, ... up to max_ranks, the world size where each strategy
// overtakes the baseline strategy, and the model against every measured multi-rank run with its
// error there; with a topology, each point simulated too (analysis/simulated_projection.hpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "analysis/host_profile.hpp"
#include "analysis/simulated_projection.hpp"
#include "train/alpha_beta_model.hpp"
#include "workloads/model_description.hpp"

namespace dpbench {

struct ProjectOptions {
  std::vector<std::string> results;     // dpbench result / sweep files
  std::string model;                    // --model: a described model instead of result files
  std::string device_profile;           // --model: the device its times are rescaled to ("" -> by topology)
  std::string link_model = "measured";  // or "memory", or a preset: pcie4, pcie5, nvlink4, ib-ndr
  std::string collectives;              // Google Benchmark JSON of dpbench_collectives (measured link)
  int max_ranks = 1024;
  std::string scaling;        // "" or "strong": fixed global batch; "weak": fixed per-rank batch
  double per_rank_batch = 0;  // > 0: weak scaling at this many samples per rank
  std::string out;            // "" -> results/dpbench-projection-<time>.json
  bool quiet = false;
  TopologyOptions topology;  // --simulate and its topology
  // --held-out: emulated-cluster result files the projection is judged on, not calibrated on
  // (analysis/held_out.hpp), and the largest |relative error| they may show (a fraction).
  std::vector<std::string> held_out;
  double max_error = 0.15;
  // --host-profile: the file's path and, read by the command (read_host_profile), this machine's
  // profile: where the calibration files probed no node's local ranks (or no emulated link's
  // share), a projection on their emulated link plays the profile's.
  std::string host_profile_path;
  std::optional<HostProfile> host_profile;
};

// The projection document for already-loaded result documents. Throws InputError naming the
// file or option when the model cannot be calibrated (no 1-rank run, no link of the asked kind
// measured, an unknown --scaling or a --per-rank-batch with --scaling strong).
nlohmann::json project(const ProjectOptions& options, const std::vector<nlohmann::json>& results,
                       const nlohmann::json* collectives);

// The step model of a described model on a device profile at `per_rank_batch`: compute from its
// layer times (rescaled), the optimizer as one pass over parameters, gradients and momentum at the
// profile's memory bandwidth, its parameter, input and output bytes. Throws InputError.
StepModel described_step_model(const ModelDescription& d, const DeviceProfile& profile);

}  // namespace dpbench
