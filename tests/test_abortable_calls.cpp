// Tests of core/abortable_calls.hpp, the failure handling the NCCL backend runs around every
// call: abort() from another thread while idle or during a polled wait, the timeout, the first
// reason winning, and every call after a failure throwing Aborted. The backend here is a counter.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "core/abortable_calls.hpp"
#include "core/error.hpp"

namespace dpbench {
namespace {

using namespace std::chrono_literals;

struct Counted {
  std::atomic<int> aborts{0};
  AbortableCalls calls;
  explicit Counted(std::chrono::milliseconds timeout = 10s) : calls("rank 3", timeout, [this] { ++aborts; }) {}
};

// The message a call throws, and whether it was Aborted rather than a plain Error.
template <typename F>
std::pair<std::string, bool> thrown(F&& f) {
  try {
    f();
  } catch (const Aborted& e) {
    return {e.what(), true};
  } catch (const Error& e) {
    return {e.what(), false};
  }
  return {"", false};
}

TEST(AbortableCalls, WaitReturnsOnceFinishedWithoutAborting) {
  Counted c;
  const auto lock = c.calls.enter();
  int polls = 0;
  c.calls.wait("allreduce", [&] { return ++polls == 3; });
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(c.aborts.load(), 0);
  EXPECT_FALSE(c.calls.abort_requested());
}

TEST(AbortableCalls, AbortWhileIdleAbortsTheBackendAtOnceAndEveryLaterCallThrowsAborted) {
  Counted c;
  c.calls.abort("rank 1: out of memory");
  EXPECT_EQ(c.aborts.load(), 1);
  for (int i = 0; i < 2; ++i) {
    const auto [what, aborted] = thrown([&] { c.calls.enter(); });
    EXPECT_TRUE(aborted);
    EXPECT_EQ(what, "rank 1: out of memory");
  }
  EXPECT_EQ(c.aborts.load(), 1);  // the backend is aborted once
}

TEST(AbortableCalls, AbortDuringAWaitIsNoticedByTheWaitingCallWhichAbortsTheBackend) {
  Counted c;
  std::atomic<bool> waiting{false}, checked{false};
  std::pair<std::string, bool> result;
  std::thread rank([&] {
    result = thrown([&] {
      const auto lock = c.calls.enter();
      c.calls.wait("broadcast", [&] {
        waiting = true;
        while (!checked) std::this_thread::yield();  // hold the poll until the test has looked
        return false;                                // a peer never arrives
      });
    });
  });
  while (!waiting) std::this_thread::yield();
  c.calls.abort("rank 0: failed");
  EXPECT_EQ(c.aborts.load(), 0);  // busy: abort() only asks
  checked = true;
  rank.join();
  EXPECT_TRUE(result.second);
  EXPECT_EQ(result.first, "rank 0: failed");
  EXPECT_EQ(c.aborts.load(), 1);  // the waiting call aborted the backend
}

TEST(AbortableCalls, TimeoutFailsNamingTheOpAndLaterCallsThrowAbortedWithThatReason) {
  Counted c(50ms);
  const auto start = std::chrono::steady_clock::now();
  const auto [what, aborted] = thrown([&] {
    const auto lock = c.calls.enter();
    c.calls.wait("allreduce", [] { return false; });
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(aborted);  // the rank that timed out reports an Error, not Aborted
  EXPECT_EQ(what, "rank 3: allreduce: no progress for 0.05 s (a peer stopped answering); communicator aborted");
  EXPECT_GE(waited, 50ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(c.aborts.load(), 1);
  const auto [later, later_aborted] = thrown([&] { c.calls.enter(); });
  EXPECT_TRUE(later_aborted);
  EXPECT_EQ(later, what);
}

TEST(AbortableCalls, FirstReasonWinsAndAFailureInsideAPollPropagates) {
  Counted c;
  const auto [what, aborted] = thrown([&] {
    const auto lock = c.calls.enter();
    c.calls.wait("gather", [&]() -> bool { c.calls.fail("rank 3: gather: NCCL async error"); });
  });
  EXPECT_FALSE(aborted);
  EXPECT_EQ(what, "rank 3: gather: NCCL async error");
  c.calls.abort("a later reason");
  EXPECT_EQ(c.calls.abort_reason(), "rank 3: gather: NCCL async error");
  EXPECT_EQ(c.aborts.load(), 1);
}

}  // namespace
}  // namespace dpbench
