#include "launch/file_init.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace {
// The files this process published, removed when it exits.
std::mutex published_mutex;
std::vector<std::string>& published() {
  static std::vector<std::string> paths;
  return paths;
}
void remove_published() {
  std::lock_guard<std::mutex> lock(published_mutex);
  for (const std::string& p : published()) std::remove(p.c_str());
}
}  // namespace

std::string file_init_local_address() {
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') return addr;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "127.0.0.1";
  std::string found = "127.0.0.1";
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_UP) == 0 || (a->ifa_flags & IFF_LOOPBACK) != 0) continue;
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) {
      found = text;
      break;
    }
  }
  freeifaddrs(list);
  return found;
}

void publish_file_init_address(const std::string& path, const FileInitAddress& where) {
  const std::string text = fmt::format("{} {}\n", where.address, where.port);
  try {
    write_file_atomic(path, text.data(), text.size(), "--init-method file://" + path);
  } catch (const std::exception& e) {
    throw Error(e.what());
  }
  std::lock_guard<std::mutex> lock(published_mutex);
  if (published().empty()) std::atexit(remove_published);
  published().push_back(path);
}

FileInitAddress wait_for_file_init_address(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line)) {
      std::istringstream fields(line);
      FileInitAddress where;
      std::string rest;
      if (!(fields >> where.address >> where.port) || (fields >> rest) || where.port < 1 || where.port > 65535) {
        throw Error(fmt::format("--init-method file://{}: the file holds '{}', not rank 0's 'ADDRESS PORT' "
                                "(a file of another kind, or of an older job: remove it)",
                                path, line));
      }
      return where;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error(fmt::format("--init-method file://{}: rank 0 did not write its address there within {} s "
                              "(is rank 0 running, and does it see the same file?)",
                              path, std::chrono::duration_cast<std::chrono::seconds>(timeout).count()));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace dpbench
