// What a rank does when its launcher stops it: torchrun's elastic agent, on a rank's death, stops
// the group's other ranks with SIGTERM (torch/distributed/elastic/multiprocessing/api.py, close()),
// possibly before a survivor has seen the failure on its own sockets; the survivor's record of
// the failure must still be written.
#pragma once

#include <functional>
#include <thread>

namespace dpbench {

// While it lives, a SIGTERM to this process runs `action` once on a thread of its own (not in the
// signal handler), then ends the process as SIGTERM would (exit status 128 + 15 seen by the
// parent). One guard at a time per process; the previous disposition of SIGTERM is restored when
// it is destroyed. Throws Error when the pipe or the handler cannot be set up.
class OnStopSignal {
 public:
  explicit OnStopSignal(std::function<void()> action);
  ~OnStopSignal();
  OnStopSignal(const OnStopSignal&) = delete;
  OnStopSignal& operator=(const OnStopSignal&) = delete;

 private:
  std::function<void()> action_;
  int pipe_[2] = {-1, -1};
  std::thread waiter_;
};

}  // namespace dpbench
