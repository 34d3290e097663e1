#include "train/elastic.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include <fmt/format.h>

namespace dpbench {

namespace {

std::atomic<long> g_last_step{-1};
std::mutex g_first_mutex;
std::optional<std::chrono::system_clock::time_point> g_first_step;  // guarded by g_first_mutex

double to_seconds(std::chrono::system_clock::time_point t) {
  return std::chrono::duration<double>(t.time_since_epoch()).count();
}

// torchrun's run id ($TORCHELASTIC_RUN_ID, --rdzv_id), "" outside torchrun.
std::string run_id() {
  const char* v = std::getenv("TORCHELASTIC_RUN_ID");
  return v != nullptr ? v : "";
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
                                   {"run_id", run_id()},
                                   {"step", last_step_started()},
                                   {"time_s", to_seconds(std::chrono::system_clock::now())},
                                   {"error", error}};
    // The first view wins: a rank that saw the failure and is then stopped keeps its own record.
    static std::mutex mutex;
    static std::set<int> recorded;  // ranks of this process that have written their record
    std::lock_guard<std::mutex> lock(mutex);
    if (!recorded.insert(rank).second) return;
    std::ofstream(std::filesystem::path(dir) / fmt::format("failure-{}-rank{}.json", restart_count(), rank))
        << record.dump() << "\n";
  } catch (...) {
    // A failure record is a measurement; the failure itself is what gets reported.
  }
}

nlohmann::json restart_cost(const std::string& dir, long resumed_from_step, int attempt) {
  const auto first = first_step_time();
  // At attempt 0 the job may still have restarted: torchrun counts a node that joined again (its
  // agent started anew) as a membership change, not a restart. Then this job's own records (its
  // run id, unique to the job: "none" is torchrun's default) from before this attempt's first step
  // tell.
  const std::string job = run_id();
  if (!first || (attempt == 0 && (job.empty() || job == "none"))) return nullptr;
  // The lowest rank that recorded the previous attempt's failure.
  const std::string prefix = fmt::format("failure-{}-rank", std::max(attempt - 1, 0));
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
    if (attempt == 0 && (r.value("run_id", "") != job || r.at("time_s").get<double>() >= to_seconds(*first))) {
      return nullptr;
    }
    const long step = r.at("step").get<long>();
    return {{"restart_count", std::max(attempt, 1)},
            {"counted_by",
             attempt > 0 ? "torchrun (TORCHELASTIC_RESTART_COUNT)" : "the job's failure record (a node rejoined)"},
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
