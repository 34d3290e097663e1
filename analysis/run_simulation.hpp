// The in-run simulation of a run on an emulated cluster: its step's schedule played by SimGrid
// (sim/simulate.hpp) on the cluster's probed links, with the run's own intra-node probe and the
// engine's calibration from its probe of the collectives (train/engine_probe.hpp). The simulated
// step beside the measured one is the check of the schedule and the platform; the network block
// (analysis/network_results.hpp) carries it.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/schedule.hpp"
#include "sim/simulate.hpp"
#include "train/training.hpp"

namespace dpbench {

// A measured run's step as its strategy's schedule: `mean`, one step with every rank's mean
// phases; `replay`, where the run has steps enough, `replayed_steps` of its steps back to back,
// each with every rank's phases of that step (analysis/network_results.cpp replay_schedule).
struct MeasuredSchedules {
  std::optional<StepSchedule> mean;
  std::optional<StepSchedule> replay;
  int replayed_steps = 0;
};

// Rank i's timed steps as the in-run simulation reads them: every repetition's where the harness
// pooled them (RunResult::pooled_steps), else the run's own. Throws std::out_of_range for a rank
// the run does not have.
const std::vector<StepRecord>& simulated_steps(const RunResult& r, std::size_t i);

// The step's collectives as its ranks timed them (StepRecord::collectives over simulated_steps),
// one CollectiveProbe per collective of the step in its order: `seconds` the mean over the steps
// of the time from its last rank's entry to its last rank's exit (what it cost once every rank was
// in it), `end_s` the mean time from the step's first collective's last entry to its last exit;
// an all-gather's or reduce-scatter's counts each rank's mean own segment (cleared when all are
// equal) and floats their sum, another collective's floats rank 0's mean. nullopt with fewer than 2 ranks, without
// timings, or unless every rank's every step timed the same kinds in the same order.
std::optional<std::vector<CollectiveProbe>> in_step_collectives(const RunResult& r);

// The least-squares line o = fixed + per_byte x bytes through `points` ({bytes, o}): {fixed,
// per_byte}, both kept at 0 or above (a falling line: the points' mean, flat; a negative
// intercept: the line through the origin). {0, 0} without points.
std::pair<double, double> overhead_line(const std::vector<std::pair<double, double>>& points);

// The "simulation" object of run `r`'s network block: its schedules (every message over
// `engine`'s collective algorithms) played on `platform`, the intra-node link replaced by the
// run's probe where it has one ("intra_node" says which), each collective's messages between
// nodes at the share of the link the engine's probe was fitted to ("calibration"; the link's rate
// without a probe, "uncalibrated" beside it), with its error against `measured` (seconds). The
// replay is the answer where there is one (its end over its steps; the trace replay of SMPI's
// offline simulation), the mean step's beside it ("mean_phases"); else the mean step's steady
// state. {"unavailable": why} when the strategy has no schedule or does not simulate the run,
// SimGrid is missing, or the simulation failed (the measured run stands). Needs
// r.traits.strategy.
nlohmann::json simulate_measured_run(const SimPlatform& platform, const RunResult& r,
                                     const MeasuredSchedules& schedules, Backend engine, double measured);

}  // namespace dpbench
