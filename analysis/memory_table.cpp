#include "analysis/memory_table.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "train/memory_model.hpp"
#include "train/models.hpp"
#include "train/optimizer.hpp"

namespace dpbench {

namespace {

// The model's inputs for options `o` at world size p under `mode`, with `params` parameters for
// a described model.
MemoryInputs inputs_for(const MemoryOptions& o, Mode mode, int p, double params) {
  TrainConfig config = o.base;
  config.mode = mode;
  config.world_size = p;
  if (find_strategy(mode).transports.empty()) config.transport = Transport::ring;
  if (o.params <= 0 && config.model.workload == "dlrm") {
    return builtin_memory_inputs(config, SampleShape{1, 1, static_cast<int>(config.model.dlrm.input_features())}, 2);
  }
  if (o.params <= 0) return builtin_memory_inputs(config, SampleShape{1, 28, 28}, 10);
  MemoryInputs in;
  in.num_params = params;
  in.input_floats = (o.input_bytes_per_sample - sizeof(std::int32_t)) / sizeof(float);
  in.classes = o.output_bytes_per_sample / sizeof(float);
  const double per_sample = o.activation_bytes_per_sample;
  in.activation_bytes = [per_sample](double rows) { return rows * per_sample; };
  in.config = config;
  return in;
}

// Mixed precision (a projection; dpbench trains in fp32): fp16 parameters, gradients and
// activations, and an fp32 master copy of the parameters beside the optimizer state of every
// range a rank steps, as ZeRO's accounting has it (2 + 2 + K bytes per parameter; K = 12 for
// Adam). `stepped` is the parameter count the rank's optimizer covers.
void to_mixed_precision(RankMemory& m, double stepped) {
  m[MemoryCategory::parameters] /= 2;
  m[MemoryCategory::gradients] /= 2;
  m[MemoryCategory::activations] /= 2;
  m[MemoryCategory::optimizer_state] += stepped * sizeof(float);
}

// Every rank's memory for `mode` at p ranks (mixed precision applied when asked).
std::vector<RankMemory> ranks_for(const MemoryOptions& o, Mode mode, int p, double params) {
  const MemoryInputs in = inputs_for(o, mode, p, params);
  std::vector<RankMemory> ranks = find_strategy(mode).memory(in);
  if (o.mixed_precision) {
    const double per_state = optimizer_slots(o.base.optimizer.name) * sizeof(float);
    for (auto& m : ranks) to_mixed_precision(m, m[MemoryCategory::optimizer_state] / per_state);
  }
  return ranks;
}

// The largest rank of each role, in role order of first appearance.
std::vector<RankMemory> largest_per_role(const std::vector<RankMemory>& ranks) {
  std::vector<RankMemory> roles;
  for (const auto& m : ranks) {
    auto it = std::find_if(roles.begin(), roles.end(), [&](const RankMemory& r) { return r.role == m.role; });
    if (it == roles.end()) {
      roles.push_back(m);
    } else if (m.total() > it->total()) {
      *it = m;
    }
  }
  return roles;
}

// The largest parameter count (to 0.1%) whose largest rank fits `capacity` bytes at p ranks.
double largest_fitting(const MemoryOptions& o, Mode mode, int p, double capacity) {
  auto peak = [&](double n) {
    double most = 0;
    for (const auto& m : ranks_for(o, mode, p, n)) most = std::max(most, m.total());
    return most;
  };
  double lo = 0, hi = 1e6;
  while (peak(hi) <= capacity && hi < 1e15) hi *= 2;
  while (hi - lo > 1e-3 * hi) {
    const double mid = (lo + hi) / 2;
    (peak(mid) <= capacity ? lo : hi) = mid;
  }
  return lo;
}

// The "model" block of a built-in workload: its name and widths (dlrm: result_json's dlrm block).
nlohmann::json builtin_model_json(const TrainConfig& base) {
  if (base.model.workload != "dlrm") return {{"workload", base.model.workload}, {"hidden", base.model.hidden}};
  nlohmann::json j = dlrm_to_json(base);
  j["workload"] = "dlrm";
  return j;
}

void check_options(const MemoryOptions& o) {
  if (o.mixed_precision && o.params <= 0) {
    throw InputError("--mixed-precision: a projection for a model described by --params (dpbench trains fp32)");
  }
  if (o.capacity_gb > 0 && o.params <= 0) throw InputError("--capacity-gb: needs a model described by --params");
  if (o.params > 0 && o.activation_bytes_per_sample < 0) {
    throw InputError(fmt::format("--activation-bytes-per-sample {}: must be >= 0", o.activation_bytes_per_sample));
  }
  if (o.input_bytes_per_sample < sizeof(std::int32_t) || o.output_bytes_per_sample < 0) {
    throw InputError("--input-bytes-per-sample: at least the 4-byte label; --output-bytes-per-sample: >= 0");
  }
  optimizer_slots(o.base.optimizer.name);
  for (int p : o.ranks) {
    if (p < 1) throw InputError(fmt::format("--ranks {}: must be at least 1", p));
    if (o.base.global_batch < static_cast<std::size_t>(p)) {
      throw InputError(fmt::format("--batch-size {}: fewer samples than --ranks {}", o.base.global_batch, p));
    }
  }
}

nlohmann::json role_json(const RankMemory& m) {
  nlohmann::json j = {{"role", m.role}, {"total_bytes", m.total()}};
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    j[std::string(category_name(static_cast<MemoryCategory>(c)))] = m.bytes[static_cast<std::size_t>(c)];
  }
  return j;
}

}  // namespace

// Options `given` with a --model's sizes in place of --params and the bytes per sample. Throws
// InputError when both are given or the description cannot be had.
MemoryOptions with_described_sizes(const MemoryOptions& given) {
  if (given.model.empty()) return given;
  if (given.params > 0) throw InputError(fmt::format("--model {} and --params: give one", given.model));
  const std::shared_ptr<const ModelDescription> d = described_model(given.model);
  MemoryOptions o = given;
  o.params = static_cast<double>(d->num_params());
  o.activation_bytes_per_sample = static_cast<double>(d->activation_bytes);
  // as dpbench stages a sample: its input as floats and an int32 label
  o.input_bytes_per_sample = static_cast<double>((d->input_bytes + 3) / 4 * 4 + sizeof(std::int32_t));
  o.output_bytes_per_sample = static_cast<double>(d->output_features() * sizeof(float));
  return o;
}

nlohmann::json memory_document(const MemoryOptions& given) {
  const MemoryOptions o = with_described_sizes(given);
  check_options(o);
  const std::vector<Mode> modes = o.modes.empty() ? strategy_modes() : o.modes;
  for (Mode mode : modes) {
    if (find_strategy(mode).memory == nullptr) {
      throw InputError(fmt::format("--modes {}: the {} strategy has no memory model", mode, mode));
    }
  }
  nlohmann::json rows = nlohmann::json::array(), fits = nlohmann::json::array();
  for (const auto& mode : modes) {
    for (int p : o.ranks) {
      for (const auto& m : largest_per_role(ranks_for(o, mode, p, o.params))) {
        nlohmann::json row = role_json(m);
        row["mode"] = mode;
        row["world_size"] = p;
        rows.push_back(row);
      }
      if (o.capacity_gb > 0) {
        fits.push_back(
            {{"mode", mode}, {"world_size", p}, {"largest_params", largest_fitting(o, mode, p, o.capacity_gb * 1e9)}});
      }
    }
  }
  return {{"schema", {{"name", "dpbench-memory"}, {"version", 2}}},
          {"model", o.params > 0
                        ? nlohmann::json{{"described", o.model.empty() ? nlohmann::json() : nlohmann::json(o.model)},
                                         {"params", o.params},
                                         {"activation_bytes_per_sample", o.activation_bytes_per_sample},
                                         {"input_bytes_per_sample", o.input_bytes_per_sample},
                                         {"output_bytes_per_sample", o.output_bytes_per_sample}}
                        : builtin_model_json(o.base)},
          {"global_batch", o.base.global_batch},
          {"optimizer", o.base.optimizer.name},
          {"precision", o.mixed_precision ? "mixed (projection)" : "fp32"},
          {"rows", rows},
          {"largest_fitting", fits}};
}

}  // namespace dpbench
