// Helpers for tests that run ranks as child processes of the test binary: the child runs one
// named test (a gtest filter) with extra environment variables, and the parent waits for it
// with a deadline. Also the hex form in which an ncclUniqueId travels to a child.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/nccl_comm.hpp"

extern char** environ;

namespace dpbench::testing {

inline std::string to_hex(const NcclUniqueIdBytes& id) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (char c : id) {
    const auto b = static_cast<unsigned char>(c);
    hex += digits[b >> 4];
    hex += digits[b & 15];
  }
  return hex;
}

// Throws std::invalid_argument unless hex holds exactly the id's bytes.
inline NcclUniqueIdBytes from_hex(const std::string& hex) {
  NcclUniqueIdBytes id{};
  if (hex.size() != 2 * id.size()) throw std::invalid_argument("bad NCCL id: " + hex);
  for (std::size_t i = 0; i < id.size(); ++i) {
    id[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return id;
}

// Starts this test binary again running only `gtest_filter`, with this process's environment
// minus the variables whose entries start with one of `drop` (and GTEST_OUTPUT and gtest's
// sharding variables), plus `add`
// ("NAME=value" entries). Returns the child's pid; throws std::runtime_error if it cannot start.
inline pid_t spawn_self(const std::string& gtest_filter, const std::vector<std::string>& add,
                        const std::vector<std::string>& drop) {
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    // A child runs exactly its filter: no result file of the parent's, and no sharding (under
    // which it could run no test at all and leave its peer waiting).
    bool keep = entry.rfind("GTEST_OUTPUT=", 0) != 0 && entry.rfind("GTEST_SHARD_INDEX=", 0) != 0 &&
                entry.rfind("GTEST_TOTAL_SHARDS=", 0) != 0;
    for (const auto& prefix : drop) keep = keep && entry.rfind(prefix, 0) != 0;
    if (keep) env.push_back(entry);
  }
  env.insert(env.end(), add.begin(), add.end());
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string filter = "--gtest_filter=" + gtest_filter;
  std::string program = exe;
  std::vector<char*> argv = {program.data(), filter.data(), nullptr};
  pid_t pid = 0;
  const int err = posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data());
  if (err != 0) throw std::runtime_error("posix_spawn " + exe + ": " + std::strerror(err));
  return pid;
}

// Waits for a child until the deadline, then kills it. Returns its wait status, or -1 if killed.
inline int wait_child(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

// True when a wait_child status is a normal exit with code 0.
inline bool exited_ok(int status) { return status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0; }

}  // namespace dpbench::testing
