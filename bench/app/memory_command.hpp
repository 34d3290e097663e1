// `dpbench memory`: the memory model (train/memory_model.hpp) without training. For each mode,
// world size and rank role (root, worker, replica, server) it prints the bytes by category of
// the largest rank of that role, for a built-in model (--workload, --hidden, --channels, on
// Fashion-MNIST-shaped samples) or a model described by its size (--params with bytes per
// sample) or by a model description (--model resnet50, bert-large, a describer's file), fp32 as dpbench trains or, labelled as a projection, mixed precision; and with
// --capacity-gb the largest parameter count each mode fits. Writes a "dpbench-memory" JSON
// with --out.
#pragma once

#include <CLI/CLI.hpp>
#include "analysis/memory_table.hpp"

namespace dpbench {

void add_memory_options(CLI::App& app, MemoryOptions& options);

int memory_command(const MemoryOptions& options);

}  // namespace dpbench
