// core/abortable_calls.hpp: the abort state machine and the polled, timed wait.
#include "core/abortable_calls.hpp"

#include <thread>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

AbortableCalls::AbortableCalls(std::string who, std::chrono::milliseconds timeout, std::function<void()> abort_backend)
    : who_(std::move(who)), timeout_(timeout), abort_backend_fn_(std::move(abort_backend)) {}

std::string AbortableCalls::abort_reason() {
  std::lock_guard<std::mutex> lock(reason_mutex_);
  return abort_reason_;
}

void AbortableCalls::abort_backend() {
  if (!backend_aborted_) {
    abort_backend_fn_();
    backend_aborted_ = true;
  }
}

void AbortableCalls::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (!abort_requested_.load()) {
      abort_reason_ = reason;
      abort_requested_.store(true);
    }
  }
  // Idle: abort now. Busy: the call in progress polls abort_requested_ and aborts itself.
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (lock.owns_lock()) abort_backend();
}

void AbortableCalls::fail(const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(reason_mutex_);
    if (!abort_requested_.load()) {
      abort_reason_ = message;
      abort_requested_.store(true);
    }
  }
  abort_backend();
  throw Error(message);
}

void AbortableCalls::throw_if_aborted() {
  if (abort_requested_.load()) {
    abort_backend();
    throw Aborted(abort_reason());
  }
}

std::unique_lock<std::mutex> AbortableCalls::enter() {
  std::unique_lock<std::mutex> lock(mutex_);
  throw_if_aborted();
  return lock;
}

void AbortableCalls::back_off(const std::string& op, Clock::time_point start) {
  const auto waited = Clock::now() - start;
  if (waited >= timeout_) {
    fail(fmt::format("{}: {}: no progress for {:g} s (a peer stopped answering); communicator aborted", who_, op,
                     static_cast<double>(timeout_.count()) / 1000.0));
  }
  if (waited < std::chrono::milliseconds(10)) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void AbortableCalls::wait(const std::string& op, const std::function<bool()>& finished) {
  const Clock::time_point start = Clock::now();
  while (!finished()) {
    throw_if_aborted();
    back_off(op, start);
  }
}

}  // namespace dpbench
