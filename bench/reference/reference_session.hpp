// One `dpbench run --reference pytorch`, from the start to the verdict: before training, the
// checks and the start bundle (in --reference-start-dir, or a temporary directory removed with
// the session); after dpbench's modes trained, the agreement band (agreement_band, from the
// modes' step losses and the sensitivity runs) and PyTorch's run of each mode judged against it
// (run_reference, judge_agreement). A run without --reference holds an inactive session that
// does nothing.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/reference/reference.hpp"
#include "harness/harness.hpp"
#include "launch/resolve.hpp"

namespace dpbench {

class ReferenceSession {
 public:
  // `output`: this process writes the bundle, runs PyTorch and reports (rank 0); `quiet`: no
  // progress lines on stderr.
  ReferenceSession(ReferenceOptions options, LaunchInfo launch, bool output, bool quiet);
  ~ReferenceSession();
  ReferenceSession(const ReferenceSession&) = delete;
  ReferenceSession& operator=(const ReferenceSession&) = delete;

  bool active() const { return !options_.framework.empty(); }

  // Checks that the reference can run `base` (check_reference), then writes the start bundle of
  // `base` on `data` (output process only). Returns the starts of the band's sensitivity runs
  // (ModesPlan::sensitivity_starts: kSensitivityRuns perturbed_initial_params; none when
  // inactive). Throws InputError, or IoError when a write fails.
  std::vector<std::shared_ptr<const std::vector<float>>> start(const TrainConfig& base, const LoadedData& data);

  // After training (every process calls it; the others wait at a barrier while rank 0 runs
  // PyTorch): measures the band and runs PyTorch's counterpart of each chosen run, judged against
  // it. A failed reference is recorded, dpbench's own runs are kept; a mode without a PyTorch
  // counterpart gets a warning in its run.
  void finish(TrainedModes& trained);

  // The result's "reference" block: framework, python, runs, failures (null when inactive).
  nlohmann::json to_json() const;

  // Says on stderr which references failed and which left the band; true if any did.
  bool report_failures() const;

  // The reference's runs, one per judged mode (their "program" and "loss_agreement").
  const nlohmann::json& runs() const { return runs_; }

 private:
  void add_run(const nlohmann::json& band, RunResult& r);

  ReferenceOptions options_;
  LaunchInfo launch_;
  bool output_, quiet_;
  std::string start_dir_;
  bool remove_start_dir_ = false;
  nlohmann::json runs_ = nlohmann::json::array(), failures_ = nlohmann::json::array();
};

}  // namespace dpbench
