// The registry of synchronisation strategies (training modes) by name. A new strategy is one new
// file under ps/ or allreduce/ (or a new folder) plus one line in strategies.cpp.
#pragma once

#include <string>
#include <vector>

#include "train/training.hpp"

namespace dpbench {

struct Strategy {
  std::string name;         // the --mode value
  std::string description;  // one line for --help
  void (*validate)(const TrainConfig&, const Dataset&);  // throws InputError; runs before any training
  StrategyFn train;  // on config.device, through run_rank_contexts (train/rank_context.hpp)
};

const std::vector<Strategy>& strategies();
// Throws InputError naming the mode and the available ones.
const Strategy& find_strategy(const std::string& name);

}  // namespace dpbench
