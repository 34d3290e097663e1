#include "registry/strategies.hpp"

#include <fmt/format.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "ps/data_parallel.hpp"
#include "sharded_ps/sharded_ps.hpp"

namespace dpbench {

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> list = {
      data_parallel_strategy(),
      sharded_ps_strategy(),
      allreduce_strategy(),
  };
  return list;
}

std::vector<Mode> strategy_modes() {
  std::vector<Mode> modes;
  for (const auto& s : strategies()) modes.push_back(s.mode);
  return modes;
}

const Strategy& find_strategy(Mode mode) {
  for (const auto& s : strategies()) {
    if (s.mode == mode) return s;
  }
  throw Error(fmt::format("strategy registry: no strategy for mode {}", name(mode)));
}

std::optional<OptionOwner> option_owner(const TrainConfig& config) {
  for (const Strategy& s : strategies()) {
    if (s.own_option_given == nullptr) continue;
    if (std::optional<OwnOption> own = s.own_option_given(config)) return OptionOwner{&s, std::move(*own)};
  }
  return std::nullopt;
}

void validate_point(const TrainConfig& config, const Dataset& train) {
  const Strategy& strategy = find_strategy(config.mode);
  for (const Strategy& other : strategies()) {
    if (other.mode == config.mode || other.own_option_given == nullptr) continue;
    if (const std::optional<OwnOption> own = other.own_option_given(config)) {
      throw InputError(fmt::format("{}: only {} has {}, not {} (give --mode {})", own->option, name(other.mode),
                                   own->what, name(config.mode), name(other.mode)));
    }
  }
  strategy.validate(config, train);
}

const Strategy& baseline_strategy() {
  for (const auto& s : strategies()) {
    if (s.baseline) return s;
  }
  throw Error("strategy registry: no strategy is marked as the baseline");
}

const ProjectionCurve& projection_curve(const Strategy& s, const TrainConfig& config) {
  const Transport transport = s.transport(config);
  for (const auto& m : s.projected) {
    if (m.transport == transport) return m;
  }
  throw Error(fmt::format("mode {}: no projection for transport {}", name(s.mode), name(transport)));
}

const std::string& projected_key(const Strategy& s, const TrainConfig& config) {
  return projection_curve(s, config).key;
}

bool overlaps_backward(const Strategy& s, const TrainConfig& config) {
  return projection_curve(s, config).overlapped_share > 0;
}

const std::vector<ProjectedCurve>& projected_curves() {
  static const std::vector<ProjectedCurve> curves = [] {
    std::vector<ProjectedCurve> out;
    // The other strategies first, as the projection table has always listed allreduce first.
    for (const bool baseline : {false, true}) {
      for (const auto& s : strategies()) {
        if (s.baseline != baseline) continue;
        for (const auto& m : s.projected) {
          TrainConfig config;
          config.mode = s.mode;
          config.transport = m.transport;
          out.push_back({&s, m, s.label(config)});
        }
      }
    }
    return out;
  }();
  return curves;
}

StepPrediction predict_step(const StepModel& model, const LinkModel& link, const std::string& key, int p,
                            double per_rank_batch, double compute_share) {
  for (const auto& curve : projected_curves()) {
    if (curve.curve.key != key) continue;
    const Strategy& s = *curve.strategy;
    const double comm = p >= 2 ? s.comm_time(model, link, curve.curve.transport, p, per_rank_batch) : 0.0;
    const double share = curve.curve.overlapped_share;
    return combine_step(model, p, per_rank_batch, compute_share, comm, 1.0 - share * (1.0 - model.exposed_fraction));
  }
  throw Error(fmt::format("projection mode {}: unknown", key));
}

nlohmann::json strategy_to_json(const TrainConfig& config) {
  const Strategy& s = find_strategy(config.mode);
  const auto bus = s.bus_bandwidth(config, 0.0);
  return {{"name", s.mode},
          {"label", s.label(config)},
          {"transport", s.transport(config)},
          {"baseline", s.baseline},
          {"overlaps_backward", overlaps_backward(s, config)},
          {"has_root", s.has_root},
          {"projection", projected_key(s, config)},
          {"busbw_factor", bus ? nlohmann::json(bus->factor) : nlohmann::json()}};
}

RunTraits run_traits(const TrainConfig& config) {
  const Strategy& s = find_strategy(config.mode);
  return {&s, strategy_to_json(config), projection_curve(s, config).overlapped_share};
}

}  // namespace dpbench
