// The model a run names: config.model.workload with its widths, for samples of a given shape.
#pragma once

#include <cstddef>
#include <memory>

#include "train/training.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"
#include "workloads/model_description.hpp"

namespace dpbench {

// Builds config.model.workload ("mlp": hidden widths model.hidden; "cnn": channels model.channels
// and one hidden layer of model.hidden[0]) on the CPU for samples of `shape` and `num_classes`
// classes, activations not yet reserved. Throws InputError naming an unknown workload, a bad
// width or a shape the model cannot take.
// With model.described set, a ReplayModel of that description (loaded once per process and
// cached); the data must then have its input floats and output classes.
std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes);

// The description `name_or_file` names (a built-in name or a file), loaded once per process.
// Throws InputError as load_model_description.
std::shared_ptr<const ModelDescription> described_model(const std::string& name_or_file);

// The parameters a run starts from, [model.num_params()] floats: config.initial_params when
// given, else the model's initialisation from config.seed. Throws InputError when the given
// parameters are not num_params() floats.
std::vector<float> initial_parameters(const Model& model, const TrainConfig& config);

// The start's parameters (initial_parameters of the run's model for samples of `train`) with
// every one moved by one unit in the last place, up or down by a coin seeded with config.seed and
// `coin`: the start of a sensitivity run (the PyTorch reference's agreement band).
std::shared_ptr<const std::vector<float>> perturbed_initial_params(const TrainConfig& config, const Dataset& train,
                                                                   int coin);

}  // namespace dpbench
