// `dpbench memory`: the memory model (train/memory_model.hpp) without training. For each mode,
// world size and rank role (root, worker, replica, server) it prints the bytes by category of
// the largest rank of that role, for a built-in model (--workload, --hidden, --channels, on
// Fashion-MNIST-shaped samples) or a model described by its size (--params with bytes per
// sample) or by a model description (--model resnet50, bert-large, a describer's file), fp32 as dpbench trains or, labelled as a projection, mixed precision; and with
// --capacity-gb the largest parameter count each mode fits. Writes a "dpbench-memory" JSON
// with --out.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "train/training.hpp"

namespace dpbench {

struct MemoryOptions {
  TrainConfig base;  // workload, widths, batch, optimizer, transport, servers
  std::vector<int> ranks = {1, 2, 4, 8};
  std::vector<Mode> modes;  // default: every registered strategy
  std::string model;        // --model: a described model (built-in name or file), sizes from its description
  double params = 0;        // > 0: a model described by its size
  double activation_bytes_per_sample = 0;
  double input_bytes_per_sample = 784 * 4;
  double output_bytes_per_sample = 10 * 4;
  std::string precision = "fp32";  // or "mixed" (a projection)
  double capacity_gb = 0;          // > 0: the largest parameter count each mode fits
  std::string out;
};

void add_memory_options(CLI::App& app, MemoryOptions& options);

// The "dpbench-memory" document: per mode, world size and role, the bytes by category and the
// total; with capacity_gb, each mode's largest parameter count. Throws InputError naming the
// option on bad input.
nlohmann::json memory_document(const MemoryOptions& options);

int memory_command(const MemoryOptions& options);

}  // namespace dpbench
