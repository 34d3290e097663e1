// The `dpbench` command: CLI11 subcommands, turning library errors into one-line messages and
// exit codes (0 success, 1 runtime failure, 2 bad input). `run` is the main job.
#pragma once

namespace dpbench {

int dpbench_main(int argc, char** argv);

}  // namespace dpbench
