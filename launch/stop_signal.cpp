#include "launch/stop_signal.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {

std::atomic<int> g_signal_fd{-1};
struct sigaction g_previous {};

// Async-signal-safe: one byte into the guard's pipe.
void on_sigterm(int) {
  const int saved = errno;
  const int fd = g_signal_fd.load();
  const char byte = 'T';
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

}  // namespace

OnStopSignal::OnStopSignal(std::function<void()> action) : action_(std::move(action)) {
  if (pipe(pipe_) != 0) throw Error(fmt::format("stop signal: pipe: {}", std::strerror(errno)));
  int expected = -1;
  if (!g_signal_fd.compare_exchange_strong(expected, pipe_[1])) {
    close(pipe_[0]);
    close(pipe_[1]);
    throw Error("stop signal: a guard is already installed in this process");
  }
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGTERM, &sa, &g_previous) != 0) {
    g_signal_fd.store(-1);
    close(pipe_[0]);
    close(pipe_[1]);
    throw Error(fmt::format("stop signal: sigaction: {}", std::strerror(errno)));
  }
  waiter_ = std::thread([this] {
    char byte = 0;
    ssize_t n = 0;
    do {
      n = read(pipe_[0], &byte, 1);
    } while (n < 0 && errno == EINTR);
    if (n != 1 || byte != 'T') return;  // the guard's destructor: no signal came
    action_();
    // End as SIGTERM would have: the default disposition, delivered to this thread.
    signal(SIGTERM, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    raise(SIGTERM);
    _exit(128 + SIGTERM);
  });
}

OnStopSignal::~OnStopSignal() {
  sigaction(SIGTERM, &g_previous, nullptr);
  g_signal_fd.store(-1);
  const char byte = 'Q';
  (void)!write(pipe_[1], &byte, 1);
  waiter_.join();
  close(pipe_[0]);
  close(pipe_[1]);
}

}  // namespace dpbench
