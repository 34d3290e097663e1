// The failure order of a GPU rank: when the rank throws, its communicators are aborted before
// any resource whose destruction synchronises the device (cuBLAS's handle, page-locked staging)
// is destroyed. Otherwise cublasDestroy or cudaFreeHost waits for the device, where a peer's
// collective kernel waits for this rank, and the failing rank blocks instead of failing (threads
// until a peer times out, processes for ever). Device-independent, so the CPU tests pin it down.
#pragma once

#include <functional>
#include <mutex>

namespace dpbench {

// Built first in a rank's body with the action that aborts the rank's communicators. Every
// resource that synchronises on destruction calls before_sync_destroy() at the top of its
// destructor; if an exception is unwinding the rank (more uncaught exceptions than when the
// guard was built), the abort runs there, once, before the resource goes. The guard's own
// destructor does the same for whatever else unwinds. A rank that returns normally never aborts.
class FailureGuard {
 public:
  explicit FailureGuard(std::function<void()> abort);
  FailureGuard(const FailureGuard&) = delete;
  FailureGuard& operator=(const FailureGuard&) = delete;
  ~FailureGuard();

  // Aborts (once) when called while an exception unwinds past the guard's construction point.
  // noexcept: an abort that throws is swallowed, the original error being the one to report.
  void before_sync_destroy() noexcept;
  // Whether the abort has run.
  bool aborted() const;

 private:
  std::function<void()> abort_;
  int uncaught_at_construction_;
  mutable std::mutex mutex_;
  bool aborted_ = false;
};

}  // namespace dpbench
