#include "bench/reference/reference_session.hpp"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/mpi_comm.hpp"
#include "train/models.hpp"

namespace dpbench {

ReferenceSession::ReferenceSession(ReferenceOptions options, LaunchInfo launch, bool output, bool quiet)
    : options_(std::move(options)), launch_(std::move(launch)), output_(output), quiet_(quiet) {}

ReferenceSession::~ReferenceSession() {
  if (!remove_start_dir_) return;
  std::error_code ec;
  std::filesystem::remove_all(start_dir_, ec);
}

std::vector<std::shared_ptr<const std::vector<float>>> ReferenceSession::start(const TrainConfig& base,
                                                                               const LoadedData& data) {
  std::vector<std::shared_ptr<const std::vector<float>>> starts;
  if (!active()) return starts;
  check_reference(options_, base);
  for (int k = 0; k < kSensitivityRuns; ++k) starts.push_back(perturbed_initial_params(base, *data.train, k));
  if (!output_) return starts;
  start_dir_ = options_.start_dir;
  if (start_dir_.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "dpbench-start-XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) {
      throw IoError(fmt::format("cannot create a temporary directory for the start bundle: {}", std::strerror(errno)));
    }
    start_dir_ = pattern;
    remove_start_dir_ = true;
  }
  write_start_bundle(start_dir_, base, data);
  return starts;
}

void ReferenceSession::finish(TrainedModes& trained) {
  if (!active()) return;
  nlohmann::json band;
  if (output_) {
    std::vector<std::vector<double>> mode_losses;
    for (const auto& reps : trained.by_mode) mode_losses.push_back(reps.front().step_train_loss);
    band = agreement_band(mode_losses, trained.by_mode.front().front().step_train_loss, trained.perturbed_losses);
  }
  for (RunResult& r : trained.runs) {
    if (output_) add_run(band, r);
    // The other processes wait without spinning while rank 0 runs the reference.
    if (launch_.multi_process) mpi_idle_barrier();
  }
}

// Runs PyTorch's counterpart of dpbench run `r` and adds its record to the runs, or, when the
// reference fails, {dpbench_mode, error} to the failures.
void ReferenceSession::add_run(const nlohmann::json& band, RunResult& r) {
  // PyTorch's processes share this machine's cores as dpbench's ranks do.
  const int threads = static_cast<int>(
      std::max(1u, std::thread::hardware_concurrency() / static_cast<unsigned>(r.config.world_size)));
  const auto t0 = std::chrono::steady_clock::now();
  nlohmann::json rec;
  try {
    rec = run_reference(options_, start_dir_, r, threads);
  } catch (const Error& e) {
    failures_.push_back({{"dpbench_mode", r.config.mode}, {"error", e.what()}});
    return;
  }
  if (rec.is_null()) {
    r.warnings.push_back(fmt::format("--reference pytorch: {} has no PyTorch counterpart", r.config.mode));
    return;
  }
  // A compression hook rounds every gradient to 16 bits, on both sides in their own order.
  judge_agreement(rec["loss_agreement"], r.step_train_loss,
                  rec["quality"]["step_train_loss"].get<std::vector<double>>(), band,
                  comm_hook_tolerance(r.config.allreduce.comm_hook));
  rec["launch"] = fmt::format("dpbench: {} ranks as {}; PyTorch: {} processes", r.config.world_size,
                              launch_.multi_process ? fmt::format("processes ({})", launch_.launcher)
                                                    : std::string("threads of one process"),
                              rec["processes"].get<int>());
  if (!quiet_) {
    fmt::print(stderr, "dpbench: pytorch {} done in {:.1f} s (step loss within {:.1e} of dpbench's)\n",
               rec["program"].get<std::string>(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
               rec["loss_agreement"]["max_rel_diff"].get<double>());
  }
  runs_.push_back(std::move(rec));
}

nlohmann::json ReferenceSession::to_json() const {
  if (!active()) return nullptr;
  return {{"framework", options_.framework},
          {"python", options_.python.empty() ? default_python() : options_.python},
          {"runs", runs_},
          {"failures", failures_}};
}

bool ReferenceSession::report_failures() const {
  for (const auto& f : failures_) {
    fmt::print(stderr, "dpbench: the PyTorch reference of {} failed: {}\n", f["dpbench_mode"].get<std::string>(),
               f["error"].get<std::string>());
  }
  bool disagree = false;
  for (const auto& rec : runs_) {
    const auto& a = rec["loss_agreement"];
    if (a["within"].get<bool>()) continue;
    disagree = true;
    fmt::print(stderr,
               "dpbench: pytorch {} disagrees with dpbench's {}: step loss differs by {:.1e} at step {}, "
               "beyond that step's band of {:.1e} (first beyond its band at step {})\n",
               rec["program"].get<std::string>(), rec["dpbench_mode"].get<std::string>(),
               a["worst_step_rel_diff"].get<double>(), a["worst_step"].get<long>(), a["tolerance"].get<double>(),
               a["first_step_outside"].get<long>());
  }
  return disagree || !failures_.empty();
}

}  // namespace dpbench
