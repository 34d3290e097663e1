// Running this program again as a child process (`dpbench sweep --nodes`'s points, `dpbench
// profile`'s cluster run): each child builds its own emulated cluster, which one process can
// build only once.
#pragma once

#include <string>
#include <vector>

namespace dpbench {

struct ChildRun {
  int exit_code = 0;       // the child's, 128 + signal when one killed it
  std::string last_error;  // the last line the child wrote to stderr
};

// Runs this program (/proc/self/exe) with `args` and waits for it: stdout discarded, stderr kept
// in `err_path`. Throws Error when the child cannot be started.
ChildRun run_child(const std::vector<std::string>& args, const std::string& err_path);

}  // namespace dpbench
