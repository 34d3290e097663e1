// The registry of synchronisation strategies (training modes) by name. Each strategy defines its
// trainer and traits in its own folder (train/strategy.hpp: label, transport, bus bandwidth,
// alpha-beta terms, overlap, the baseline the others are compared with); `run`, `sweep`,
// `project` and the result file read these traits, and no command compares mode names. A new
// strategy is one folder plus one line in strategies.cpp.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/strategy.hpp"

namespace dpbench {

// Every registered strategy, in registry order.
const std::vector<Strategy>& strategies();
// Their modes, in registry order: the modes `run` and `sweep` compare by default.
std::vector<Mode> strategy_modes();
// The strategy of `mode`; Error when no strategy of this build registers it.
const Strategy& find_strategy(Mode mode);
// Checks a point before training: no other strategy's own option set (Strategy::own_option_given:
// "--comm-hook fp16: only allreduce has communication hooks, not ps (give --mode allreduce)"),
// then config.mode's strategy's validate against `train`. Throws InputError; Error as
// find_strategy.
void validate_point(const TrainConfig& config, const Dataset& train);
// The strategy whose own option `config` sets (Strategy::own_option_given, first in registry
// order) with that option, or nullopt when none does: the one mode a sweep's point of that option
// (a --comm-hooks hook, a --stalenesses bound) can run.
struct OptionOwner {
  const Strategy* strategy;
  OwnOption option;
};
std::optional<OptionOwner> option_owner(const TrainConfig& config);
// The one strategy marked `baseline`.
const Strategy& baseline_strategy();

// The projection key of a run of `strategy` with `config` (its transport's curve). Throws Error
// when the strategy projects no curve for that transport.
const std::string& projected_key(const Strategy& strategy, const TrainConfig& config);
// The projection curve of such a run (its key and overlapped share). Throws as projected_key.
const ProjectionCurve& projection_curve(const Strategy& strategy, const TrainConfig& config);
// True when some of such a run's communication runs while backward does.
bool overlaps_backward(const Strategy& strategy, const TrainConfig& config);

// The traits of a run with `config` under its mode's strategy, as every result's run entry
// carries them under "strategy": name, label, transport, baseline, overlaps_backward, has_root,
// projection, busbw_factor (null when the strategy reports no bus bandwidth). Throws as
// find_strategy.
nlohmann::json strategy_to_json(const TrainConfig& config);
// The run's traits (train/training.hpp RunTraits): its mode's strategy, strategy_to_json, and its
// projection curve's overlapped share. Throws as projection_curve.
RunTraits run_traits(const TrainConfig& config);

// One projection curve with its strategy.
struct ProjectedCurve {
  const Strategy* strategy;
  ProjectionCurve curve;
  std::string label;  // strategy.label for the curve's transport
};

// Every strategy's projection curves, registry order ("allreduce", "ps_collective", "ps_p2p").
const std::vector<ProjectedCurve>& projected_curves();

// Step time of projection curve `key` at world size p where every rank computes
// `per_rank_batch` samples on its own device. compute_share: the fraction of the calibration
// device each rank gets (1 for separate devices; 1/p for p ranks sharing it). Of the curve's
// overlapped share of its communication, model.exposed_fraction stays exposed; the rest of it is
// exposed in full.
// Throws Error on an unknown key or p < 1.
StepPrediction predict_step(const StepModel& model, const LinkModel& link, const std::string& key, int p,
                            double per_rank_batch, double compute_share = 1.0);

}  // namespace dpbench
