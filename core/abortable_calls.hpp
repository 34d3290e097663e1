// The failure handling of a communicator whose operations the host can only poll (NCCL's
// documented fault-tolerance pattern, nccl-tests' testStreamSynchronize): one call at a time,
// an abort() from any thread that the call in progress notices within a poll interval, a
// polled wait with back-off and a timeout, and after any failure every later call throws
// Aborted. Written once here so that the CPU tests run it; cuda/nccl_comm.cu supplies the NCCL
// parts (what "finished" and "aborting the backend" mean). Not for: backends that block in the
// library (MPI has a watchdog thread) or wait on condition variables (`local`).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>

namespace dpbench {

class AbortableCalls {
 public:
  using Clock = std::chrono::steady_clock;

  // who: prefixes the timeout message ("rank 3"). timeout: how long one wait may go without
  // finishing. abort_backend: aborts the library's communicator (ncclCommAbort); called at most
  // once, with the call lock held, and must not throw.
  AbortableCalls(std::string who, std::chrono::milliseconds timeout, std::function<void()> abort_backend);

  // Starts a call: returns the lock held for its whole duration. After abort() or a failure,
  // aborts the backend (once) and throws Aborted(reason) instead.
  std::unique_lock<std::mutex> enter();
  // The call lock, for teardown (no abort check).
  std::unique_lock<std::mutex> lock() { return std::unique_lock<std::mutex>(mutex_); }

  // From any thread. Records the reason (the first one wins). No call in progress: aborts the
  // backend now. Otherwise the call in progress notices at its next poll, aborts the backend and
  // throws Aborted(reason).
  void abort(const std::string& reason);
  bool abort_requested() const { return abort_requested_.load(); }
  std::string abort_reason();
  // Whether abort_backend has run. Caller holds the call lock.
  bool backend_aborted() const { return backend_aborted_; }

  // Records `message` as the reason, aborts the backend and throws Error(message). Caller holds
  // the call lock.
  [[noreturn]] void fail(const std::string& message);
  // After abort(): aborts the backend and throws Aborted(reason). Caller holds the call lock.
  void throw_if_aborted();
  // Aborts the backend (once) without throwing. Caller holds the call lock.
  void abort_backend();

  // Polls until finished() returns true. finished() may itself fail(); after each unfinished
  // poll, an abort() is honoured (throw_if_aborted) and then back_off(op, start). Caller holds
  // the call lock.
  void wait(const std::string& op, const std::function<bool()>& finished);
  // One pause of a wait begun at `start`: past the timeout, fail("<who>: <op>: no progress for
  // <s> s (a peer stopped answering); communicator aborted"); otherwise yields for the first
  // 10 ms (a collective that short is seen finishing within microseconds, as nccl-tests'
  // spinning wait sees it), then sleeps 100 us between polls (at most 1% late on anything
  // longer).
  void back_off(const std::string& op, Clock::time_point start);

 private:
  const std::string who_;
  const std::chrono::milliseconds timeout_;
  const std::function<void()> abort_backend_fn_;
  std::mutex mutex_;              // held for the whole of every call, and by abort() when idle
  bool backend_aborted_ = false;  // guarded by mutex_
  std::atomic<bool> abort_requested_{false};
  std::mutex reason_mutex_;
  std::string abort_reason_;  // guarded by reason_mutex_
};

}  // namespace dpbench
