// The model a run names: config.model.workload with its widths, for samples of a given shape.
#pragma once

#include <cstddef>
#include <memory>

#include "train/training.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// Builds config.model.workload ("mlp": hidden widths model.hidden; "cnn": channels model.channels
// and one hidden layer of model.hidden[0]) on the CPU for samples of `shape` and `num_classes`
// classes, activations not yet reserved. Throws InputError naming an unknown workload, a bad
// width or a shape the model cannot take.
std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes);

// The parameters a run starts from, [model.num_params()] floats: config.initial_params when
// given, else the model's initialisation from config.seed. Throws InputError when the given
// parameters are not num_params() floats.
std::vector<float> initial_parameters(const Model& model, const TrainConfig& config);

}  // namespace dpbench
