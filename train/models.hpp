// The model a run names: config.workload with its widths, for samples of a given shape.
#pragma once

#include <cstddef>
#include <memory>

#include "train/training.hpp"
#include "workloads/dataset.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// Builds config.workload ("mlp": hidden widths config.hidden; "cnn": channels config.channels and
// one hidden layer of config.hidden[0]) on the CPU for samples of `shape` and `num_classes`
// classes, activations not yet reserved. Throws InputError naming an unknown workload, a bad
// width or a shape the model cannot take.
std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes);

}  // namespace dpbench
