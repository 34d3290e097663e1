#include "core/comm_stream.hpp"

#include <chrono>

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

double CommStream::take_busy_seconds() {
  std::lock_guard<std::mutex> lock(mutex_);
  const double s = busy_seconds_;
  busy_seconds_ = 0;
  return s;
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
    const auto t0 = std::chrono::steady_clock::now();
    std::exception_ptr err;
    if (!skip) {
      try {
        work();
      } catch (...) {
        err = std::current_exception();
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lock.lock();
    busy_seconds_ += s;
    if (err && !error_) error_ = err;
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace dpbench
