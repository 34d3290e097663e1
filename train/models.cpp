#include "train/models.hpp"

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/cnn.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {

std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes) {
  if (config.model.workload == "cnn") return make_cnn(config.model.channels, config.model.hidden, shape, num_classes);
  if (config.model.workload != "mlp") {
    throw InputError(fmt::format("--workload {}: unknown workload (available: mlp, cnn)", config.model.workload));
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

}  // namespace dpbench
