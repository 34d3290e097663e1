// `dpbench run --reference pytorch`: PyTorch trains what dpbench just trained, from the same
// start. dpbench writes a start bundle (initial parameters and BatchNorm buffers, the training
// and test sets as the models see them, and every epoch's sample order), then runs
// bench/reference/pytorch_reference.py on it with the PyTorch program that trains as each
// dpbench mode does (the strategy's pytorch_counterpart trait: DataParallel's data flow, DDP,
// the RPC parameter server; plain PyTorch for one rank). The bundle's format is documented in
// bench/reference/README.md.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/harness.hpp"
#include "train/training.hpp"

namespace dpbench {

struct ReferenceOptions {
  std::string framework;  // "" (no reference) or "pytorch"
  std::string python;     // interpreter; "" -> /usr/bin/python3 when present, else python3 on PATH
  std::string start_dir;  // keep the start bundle here; "" -> a temporary directory, removed
};

// Relative tolerance of the per-step training loss between dpbench and its reference.
inline constexpr double kReferenceLossTolerance = 1e-4;
// The band of a run under a compression hook (--comm-hook): fp16 1e-3, bf16 (7 bits of mantissa)
// 1e-2; 0 for the uncompressed allreduce hook.
inline double comm_hook_tolerance(const CommHook& hook) {
  return hook.kind == CommHook::Kind::fp16 ? 1e-3 : hook.kind == CommHook::Kind::bf16 ? 1e-2 : 0.0;
}

// Checks, before any training, that the reference can run this configuration: a known framework,
// a python that imports torch, and no option the reference does not reproduce (--rank-batch,
// augmentation, --sync-bn, --init-params). Throws InputError naming the option or the missing piece.
void check_reference(const ReferenceOptions& options, const TrainConfig& base);

// Writes the start of a run of `config` on `data` into `dir` (created if missing): start.json and
// little-endian raw files (params.f32, buffers.f32, train_x.f32, train_y.i64, test_x.f32,
// test_y.i64, order.i64). The parameters are the ones a run of `config` starts from
// (initial_parameters), the order holds the DistributedSampler permutation (seed + epoch) of every
// epoch the run reaches. Throws IoError naming the file when a write fails.
void write_start_bundle(const std::string& dir, const TrainConfig& config, const LoadedData& data);

// The reference run of `dpbench_run` (trained from the bundle in `start_dir`): runs the script
// with the strategy's PyTorch counterpart on run.config.world_size processes of `threads` BLAS
// threads each, and returns its run record with `dpbench_mode`, `dpbench_label` and
// `loss_agreement` (largest relative per-step loss difference) added. Returns null when the
// strategy has no PyTorch counterpart. Throws Error with the script's last error line when it fails.
nlohmann::json run_reference(const ReferenceOptions& options, const std::string& start_dir,
                             const RunResult& dpbench_run, int threads);

// The largest relative difference |a - b| / max(|b|, tiny) over the first min(len) steps, with
// the step where it occurs, as {"steps", "max_rel_diff", "at_step", "tolerance", "within"}.
// Throws Error when either list is empty or a loss is not finite.
nlohmann::json loss_agreement(const std::vector<double>& dpbench, const std::vector<double>& reference);

// How far the reference's per-step losses may be from dpbench's, step by step. Two float32
// trainings that differ only in rounding (another BLAS kernel, another reduction order) stay
// together while the trajectory is calm and part when it amplifies (a loss spike): how far is a
// property of the trajectory, not of the framework, and differs from one CPU's kernels to the
// next. The band measures it on this machine: `base` is a dpbench run's per-step losses and
// `perturbed` the same run's, each from initial parameters one unit in the last place away
// (train/models.hpp's perturbed_initial_params, kSensitivityRuns coins: one perturbation may miss where the
// trajectory is sensitive; the drift of four of them after 90 steps ranged from 4e-7 to 6e-2);
// their largest drift up to a step, with the largest drift between
// dpbench's own modes (`mode_losses`, which differ only in reduction order) up to it, times
// kAgreementMargin and at least kReferenceLossTolerance, is the step's band. Returns
// {"per_step" [steps], "band" (the last step's, the widest), "own_drift" (null with fewer than
// two modes), "sensitivity_drift" (null without a perturbed run), "margin", "floor"}.
inline constexpr double kAgreementMargin = 3.0;
inline constexpr int kSensitivityRuns = 3;
nlohmann::json agreement_band(const std::vector<std::vector<double>>& mode_losses, const std::vector<double>& base = {},
                              const std::vector<std::vector<double>>& perturbed = {});

// Judges a reference's loss_agreement record against a band's per-step tolerances, none below
// `floor` (a compression hook's): sets "worst_step" (the step whose difference comes nearest its
// tolerance, or exceeds it most), "worst_step_rel_diff", "tolerance" (that step's),
// "first_step_outside" (null when none is), "within" and "band". Throws Error when the band has no
// steps.
void judge_agreement(nlohmann::json& agreement, const std::vector<double>& dpbench,
                     const std::vector<double>& reference, const nlohmann::json& band, double floor);

// "/usr/bin/python3" when it exists, else "python3" (looked up on PATH).
std::string default_python();

}  // namespace dpbench
