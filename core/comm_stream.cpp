#include "core/comm_stream.hpp"

namespace dpbench {

CommStream::CommStream() : thread_([this] { loop(); }) {}

CommStream::~CommStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CommStream::enqueue(std::function<void()> work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
  }
  cv_.notify_all();
}

void CommStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return queue_.empty() && !running_; });
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

void CommStream::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and drained
    auto work = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    const bool skip = static_cast<bool>(error_);  // after a failure, drop the rest
    lock.unlock();
    std::exception_ptr err;
    if (!skip) {
      try {
        work();
      } catch (...) {
        err = std::current_exception();
      }
    }
    lock.lock();
    if (err && !error_) error_ = err;
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace dpbench
