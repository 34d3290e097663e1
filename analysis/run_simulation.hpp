// The in-run simulation of a run on an emulated cluster: its step's schedule played by SimGrid
// (sim/simulate.hpp) on the cluster's probed links, with the run's own intra-node probe and the
// engine's calibration from its probe of the collectives (train/engine_probe.hpp). The simulated
// step beside the measured one is the check of the schedule and the platform; the network block
// (analysis/network_results.hpp) carries it.
#pragma once

#include <optional>

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
