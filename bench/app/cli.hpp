// The `dpbench` command: CLI11 subcommands, turning library errors into one-line messages and
// exit codes (0 success, 1 runtime failure, 2 bad input). `run` is the main job.
#pragma once

#include "bench/app/run_command.hpp"

namespace CLI {
class App;
}

namespace dpbench {

// The whole command: parses argv, runs the subcommand, returns the exit code (0 success,
// 1 runtime failure, 2 bad input, 3 I/O failure). Never throws.
int dpbench_main(int argc, char** argv);

// Adds `dpbench run`'s options to `run`, which parsing writes into `o` (exposed for the option
// parser fuzz target, fuzz/run_options.cpp).
void add_run_options(CLI::App& run, RunOptions& o);

// What `dpbench run` derives once `run` has parsed into `o`: the cnn's defaults for options not
// given, the global batch (their sum) and world size (their count) from --rank-batch unless given.
void finish_run_options(const CLI::App& run, RunOptions& o);

// --model NAME|FILE on `app` (run or sweep): checks it against --workload, --data, --input and
// --classes, then sets the synthetic data to the description's input shape and outputs, turns the
// evaluation off, caps the run at 20 steps unless --max-steps was given, one sample per rank
// unless --batch-size or --rank-batch was, and the replay's time scale to --device-profile's
// rescaling times --time-scale. Throws InputError.
void apply_described_model(const CLI::App& app, TrainConfig& config, DataOptions& data);

// --workload dlrm on `app` (run or sweep): checks its sizes (check_dlrm_shape; run's --zipf-alpha
// is checked as it is read), refuses --input, --classes, --hidden, --channels and a --data other than
// click-logs, then sets the data to the click logs of its shape. For another workload, refuses the
// dlrm options. Throws InputError.
void apply_dlrm_options(const CLI::App& app, TrainConfig& config, DataOptions& data);

}  // namespace dpbench
