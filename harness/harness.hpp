// What `dpbench run` and `dpbench sweep` share: loading the data a run names, checking points
// against it before any training starts, executing one (mode, config) point, and training the
// modes of a run with its repetitions. Not for: printing tables or progress (the commands do
// that, a run's through TrainingObserver), or the result document (record/).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/device.hpp"
#include "train/training.hpp"
#include "workloads/click_logs.hpp"

namespace dpbench {

struct DataOptions {
  std::string data = "fashion-mnist";   // or "synthetic", or "click-logs" / "criteo" (--workload dlrm)
  std::string raw_data_file;            // criteo: Criteo's raw click logs (workloads/criteo.hpp)
  std::string data_dir;                 // "" -> $DPBENCH_DATA_DIR -> Debian's path
  std::string input_shape = "1x28x28";  // synthetic only
  int classes = 10;                     // synthetic only
  long synthetic_samples = 60000;       // synthetic and click-logs (train; test is 1/6 of it)
  ClickLogOptions click_logs;           // click-logs: --zipf-alpha
  DlrmShape click_log_shape;            // click-logs: the dlrm workload's shape (apply_dlrm_options)
  int pin_memory = -1;                  // --pin-memory 1 / --no-pin-memory 0; -1: on when training on CUDA
};

struct LoadedData {
  std::shared_ptr<const Dataset> train, test;
  // The data's part of a result's config block: "data", "dataset" and, for synthetic data,
  // "input", "classes" and "synthetic_samples".
  nlohmann::json config;
  TrainData view() const { return {train.get(), test.get()}; }
};

// Throws InputError naming the file, directory or option when the data cannot be had.
LoadedData load_data(const DataOptions& options, std::uint64_t seed);

// A replayed model (config.model.described) under each of `modes`: throws InputError saying the
// figure when the memory model's bytes of all world_size ranks (every rank on this machine, as
// threads or emulated nodes) exceed this machine's physical memory. No-op for other runs.
void check_replay_fits(const TrainConfig& config, const std::vector<Mode>& modes, const DataOptions& data);

// Checks one point against the data with its strategy's validator, and that warm-up leaves
// timed steps. Throws InputError.
void check_point(const TrainConfig& config, const Dataset& train);

// check_point of `base` under each of `modes`, and base.initial_params (--init-params) against the
// model's parameter count. Throws InputError.
void check_points(const TrainConfig& base, const std::vector<Mode>& modes, const LoadedData& data);

// How many ranks share this machine's cores: world_size for in-process ranks and on an emulated
// cluster (its nodes are network namespaces of one host, whatever the launcher says of them; an
// idle BLAS thread of one node would spin on a core another node's rank needs),
// LOCAL_WORLD_SIZE under torchrun (gloo), the node-local process count under mpirun.
int ranks_on_this_node(const TrainConfig& config);

// BLAS threads for each of `local` ranks on `cores` cores: $OMP_NUM_THREADS when set (PyTorch's
// default for torch.get_num_threads(); torchrun sets it to 1 with several processes per node),
// else max(1, cores / local). Throws InputError when OMP_NUM_THREADS is not a positive integer.
int blas_threads_per_rank(unsigned cores, int local);

// Trains one point: sets the BLAS threads per rank, runs the strategy, adds the warnings every
// result carries (device fallback, ranks time-sliced on fewer cores).
RunResult execute_point(const TrainConfig& config, const LoadedData& data, const DeviceChoice& device);

// "results/dpbench-<kind>-<local time>.json"
std::string default_out_path(const std::string& kind);

// What a command shows while train_modes trains (the harness trains, the command prints). Called
// on every process of a job, from the thread that trains.
class TrainingObserver {
 public:
  virtual ~TrainingObserver() = default;
  // A run of `config` starts: repetition `rep` (0-based) of `reps`. May set config.progress and
  // config.progress_interval_s.
  virtual void starting(TrainConfig& config, int rep, int reps) = 0;
  // That run ended after `seconds` of wall time.
  virtual void finished(const RunResult& run, double seconds) = 0;
  // `runs` more runs of `mode` start, each from perturbed initial parameters (not shown one by one).
  virtual void perturbing(Mode mode, int runs) = 0;
};

// A `dpbench run` of several modes on one data set.
struct ModesPlan {
  TrainConfig base;         // every mode starts from it (its mode is set per run)
  std::vector<Mode> modes;  // at least one
  int repetitions = 1;      // runs of every mode, the modes alternating within a repetition
  // Starts of the sensitivity runs (train/models.hpp: perturbed_initial_params): the first mode
  // once more from each, quietly. Empty: none.
  std::vector<std::shared_ptr<const std::vector<float>>> sensitivity_starts;
  DeviceChoice device;
};

struct TrainedModes {
  std::vector<std::vector<RunResult>> by_mode;  // [mode][repetition]
  // [mode]: its repetition of median wall throughput, with every repetition's engine probe pooled
  // into its own (train/engine_probe.hpp pool_probes) and, where they pool, every repetition's
  // steps (pool_steps, RunResult::pooled_steps).
  std::vector<RunResult> runs;
  std::vector<std::vector<double>> perturbed_losses;  // [sensitivity run][step]: step training losses
};

// Trains every mode of `plan` plan.repetitions times, the modes alternating within each
// repetition (so that load that comes and goes hits them alike), then the sensitivity runs.
// The chosen run of a mode is its median repetition (record/result_json.hpp: median_run).
// Throws what execute_point throws.
TrainedModes train_modes(const ModesPlan& plan, const LoadedData& data, TrainingObserver& observer);

// Each rank's timed steps of every run in `reps` (one configuration's repetitions), in run order:
// [world_size]; empty where `reps` is empty or the runs do not have the same ranks.
std::vector<std::vector<StepRecord>> pool_steps(const std::vector<RunResult>& reps);

}  // namespace dpbench
