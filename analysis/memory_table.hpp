// The memory model's table (`dpbench memory`'s document): for each mode, world size and rank role
// (root, worker, replica, server) the bytes by category of the largest rank of that role
// (train/memory_model.hpp, through each strategy's memory trait), for a built-in model, a model
// described by its size (parameters, bytes per sample) or a model description, fp32 as dpbench
// trains or, labelled as a projection, mixed precision; and the largest parameter count each mode
// fits in a capacity.
#pragma once

#include <string>
#include <vector>

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
  bool mixed_precision = false;  // --mixed-precision: a projection (dpbench trains fp32)
  double capacity_gb = 0;        // > 0: the largest parameter count each mode fits
  std::string out;
};

// The "dpbench-memory" document: per mode, world size and role, the bytes by category and the
// total; with capacity_gb, each mode's largest parameter count. Throws InputError naming the
// option on bad input.
nlohmann::json memory_document(const MemoryOptions& options);

// Options `given` with a --model's sizes in place of --params and the bytes per sample. Throws
// InputError when both are given or the description cannot be had.
MemoryOptions with_described_sizes(const MemoryOptions& given);

}  // namespace dpbench
