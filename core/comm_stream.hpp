// A rank's communication "stream" on CPU: one background thread that runs communication work
// in the order it was enqueued, so that a bucket's all-reduce overlaps the rest of backward, as
// DDP's separate NCCL stream does on GPUs.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace dpbench {

class CommStream {
 public:
  CommStream();
  ~CommStream();  // finishes queued work, then joins
  CommStream(const CommStream&) = delete;
  CommStream& operator=(const CommStream&) = delete;

  void enqueue(std::function<void()> work);
  // Blocks until all enqueued work has run; rethrows the first exception a work item threw.
  void synchronize();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace dpbench
