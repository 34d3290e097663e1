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

#include "bench/app/harness.hpp"
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
inline double comm_hook_tolerance(const std::string& hook) {
  return hook == "fp16" ? 1e-3 : hook == "bf16" ? 1e-2 : 0.0;
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

// How far the reference's per-step losses may be from dpbench's: float32 sums in another order
// drift apart over the steps (more at a large learning rate), and dpbench's own modes, which differ
// only in reduction order, show how far. The band is kAgreementMargin times the largest
// loss_agreement between any two of `mode_losses` (each mode's per-step losses, same run), and at
// least kReferenceLossTolerance. Returns {"band", "own_drift" (null with fewer than two modes),
// "margin", "floor"}.
inline constexpr double kAgreementMargin = 2.0;
nlohmann::json agreement_band(const std::vector<std::vector<double>>& mode_losses);

// "/usr/bin/python3" when it exists, else "python3" (looked up on PATH).
std::string default_python();

}  // namespace dpbench
