#include "train/models.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/cnn.hpp"
#include "workloads/dlrm.hpp"
#include "workloads/mlp.hpp"
#include "workloads/replay_model.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <random>

namespace dpbench {

std::shared_ptr<const ModelDescription> described_model(const std::string& name_or_file) {
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const ModelDescription>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto& d = cache[name_or_file];
  if (d == nullptr) d = std::make_shared<const ModelDescription>(load_model_description(name_or_file));
  return d;
}

std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes) {
  if (!config.model.described.empty()) {
    auto model = std::make_unique<ReplayModel>(described_model(config.model.described), config.model.replay_time_scale);
    if (shape.features() != model->input_features() || num_classes != model->num_classes()) {
      throw InputError(fmt::format(
          "--model {}: takes {} input floats and {} outputs per sample, the data has {} and {}", config.model.described,
          model->input_features(), model->num_classes(), shape.features(), num_classes));
    }
    return model;
  }
  if (config.model.workload == "cnn") return make_cnn(config.model.channels, config.model.hidden, shape, num_classes);
  if (config.model.workload == "dlrm") {
    auto model = std::make_unique<Dlrm<float>>(config.model.dlrm);
    if (shape.features() != model->input_features() || num_classes != 2) {
      throw InputError(fmt::format("--workload dlrm: takes {} input floats and 2 classes per sample (click logs), the "
                                   "data has {} and {}",
                                   model->input_features(), shape.features(), num_classes));
    }
    return model;
  }
  if (config.model.workload != "mlp") {
    throw InputError(fmt::format("--workload {}: unknown workload (available: mlp, cnn, dlrm)", config.model.workload));
  }
  std::vector<std::size_t> dims{shape.features()};
  for (int h : config.model.hidden) {
    if (h <= 0) throw InputError(fmt::format("--hidden {}: layer widths must be positive", h));
    dims.push_back(static_cast<std::size_t>(h));
  }
  dims.push_back(num_classes);
  return std::make_unique<Mlp<float>>(std::move(dims));
}

std::vector<float> initial_parameters(const Model& model, const TrainConfig& config) {
  if (config.initial_params == nullptr) {
    std::vector<float> params(model.num_params());
    model.init_params(params.data(), config.seed);
    return params;
  }
  if (config.initial_params->size() != model.num_params()) {
    throw InputError(fmt::format("--init-params: {} floats, but the {} has {} parameters",
                                 config.initial_params->size(), model.name(), model.num_params()));
  }
  return *config.initial_params;
}

std::shared_ptr<const std::vector<float>> perturbed_initial_params(const TrainConfig& config, const Dataset& train,
                                                                   int coin_seed) {
  const auto model = make_model(config, train.shape(), static_cast<std::size_t>(train.num_classes()));
  std::vector<float> params = initial_parameters(*model, config);
  std::seed_seq seeds{static_cast<unsigned>(config.seed), static_cast<unsigned>(coin_seed), 0x51e5u};
  std::mt19937 coin(seeds);
  for (float& v : params) {
    v = std::nextafter(v, (coin() & 1U) != 0 ? std::numeric_limits<float>::infinity()
                                             : -std::numeric_limits<float>::infinity());
  }
  return std::make_shared<const std::vector<float>>(std::move(params));
}

}  // namespace dpbench
