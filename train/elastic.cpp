#include "train/elastic.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

namespace dpbench {

namespace {

std::atomic<long> g_last_step{-1};
std::mutex g_first_mutex;
std::optional<std::chrono::system_clock::time_point> g_first_step;  // guarded by g_first_mutex

double to_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

}  // namespace

int restart_count() {
  const char* v = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (v == nullptr || *v == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  return *end == '\0' && n > 0 ? static_cast<int>(n) : 0;
}

void note_step_start(long step) {
  g_last_step.store(step);
  std::lock_guard<std::mutex> lock(g_first_mutex);
  if (!g_first_step) g_first_step = std::chrono::system_clock::now();
}

long last_step_started() { return g_last_step.load(); }

std::optional<std::chrono::system_clock::time_point> first_step_time() {
  std::lock_guard<std::mutex> lock(g_first_mutex);
  return g_first_step;
}

void record_failure(const std::string& dir, int rank, const std::string& error) noexcept {
  try {
    const nlohmann::json record = {{"rank", rank},
                                   {"step", last_step_started()},
                                   {"time_s", to_seconds(std::chrono::system_clock::now())},
                                   {"error", error}};
    std::ofstream(std::filesystem::path(dir) / fmt::format("failure-{}-rank{}.json", restart_count(), rank))
        << record.dump() << "\n";
  } catch (...) {
    // A failure record is a measurement; the failure itself is what gets reported.
  }
}

nlohmann::json restart_cost(const std::string& dir, long resumed_from_step) {
  const int attempt = restart_count();
  const auto first = first_step_time();
  if (attempt == 0 || !first) return nullptr;
  // The lowest rank that recorded the previous attempt's failure.
  const std::string prefix = fmt::format("failure-{}-rank", attempt - 1);
  std::optional<int> lowest;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const int rank = std::atoi(name.c_str() + prefix.size());
    if (!lowest || rank < *lowest) lowest = rank;
  }
  if (!lowest) return nullptr;
  try {
    std::ifstream f(std::filesystem::path(dir) / fmt::format("{}{}.json", prefix, *lowest));
    const nlohmann::json r = nlohmann::json::parse(f);
    const long step = r.at("step").get<long>();
    return {{"restart_count", attempt},
            {"failed_step", step},
            {"error", r.at("error")},
            {"observed_by_rank", *lowest},
            {"recovery_s", to_seconds(*first) - r.at("time_s").get<double>()},
            {"steps_redone", step - std::max(0L, resumed_from_step)}};
  } catch (const std::exception&) {
    return nullptr;  // a record cut short by the failure
  }
  return nullptr;
}

}  // namespace dpbench
