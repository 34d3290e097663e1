// `dpbench run`: trains one workload under each requested mode with the same seed, data and
// global batch, prints a side-by-side comparison table and writes one result file.
#pragma once

#include <string>
#include <vector>

#include "core/training.hpp"

namespace dpbench {

struct RunOptions {
  TrainConfig base;                               // mode is filled in per run
  std::vector<std::string> modes = {"ps", "allreduce"};
  std::string data = "fashion-mnist";             // or "synthetic"
  std::string data_dir;                           // "" -> $DPBENCH_DATA_DIR -> Debian's path
  std::string input_shape = "1x28x28";            // synthetic only
  int classes = 10;                               // synthetic only
  long synthetic_samples = 60000;                 // synthetic only (train; test is 1/6 of it)
  double timeout_s = 300;                         // sets base.timeout
  std::string out;                                // "" -> results/dpbench-run-<time>.json
  bool quiet = false;
};

// Returns the process exit code. Throws InputError / Error for main() to report.
int run_command(const RunOptions& options);

}  // namespace dpbench
