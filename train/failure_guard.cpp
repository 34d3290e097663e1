#include "train/failure_guard.hpp"

#include <exception>

namespace dpbench {

FailureGuard::FailureGuard(std::function<void()> abort)
    : abort_(std::move(abort)), uncaught_at_construction_(std::uncaught_exceptions()) {}

FailureGuard::~FailureGuard() { before_sync_destroy(); }

void FailureGuard::before_sync_destroy() noexcept {
  if (std::uncaught_exceptions() <= uncaught_at_construction_) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (aborted_) return;
  aborted_ = true;
  try {
    if (abort_) abort_();
  } catch (...) {
    // The error being unwound is the one to report.
  }
}

bool FailureGuard::aborted() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return aborted_;
}

}  // namespace dpbench
