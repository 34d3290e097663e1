// What `dpbench run` and `dpbench sweep` share: loading the data a run names, checking options
// before any training starts, executing one (mode, config) point, and assembling the result
// document. Not for: printing tables or progress (the commands do that).
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
  std::string data = "fashion-mnist";   // or "synthetic", or "click-logs" (--workload dlrm)
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
  TrainData view() const { return {train.get(), test.get()}; }
};

// Throws InputError naming the file, directory or option when the data cannot be had.
LoadedData load_data(const DataOptions& options, std::uint64_t seed);

// Checks the options every point shares (before data is loaded): positive sizes, a known
// workload, sane step counts and a timeout in (0, 1e9] s. Throws InputError naming the option.
void check_common_options(const TrainConfig& base, double timeout_s);

// A replayed model (config.model.described) under each of `modes`: throws InputError saying the
// figure when the memory model's bytes of all world_size ranks (every rank on this machine, as
// threads or emulated nodes) exceed this machine's physical memory. No-op for other runs.
void check_replay_fits(const TrainConfig& config, const std::vector<Mode>& modes, const DataOptions& data);

// Checks one point against the data with its strategy's validator, and that warm-up leaves
// timed steps. Throws InputError.
void check_point(const TrainConfig& config, const Dataset& train);

// How many ranks share this machine's cores: world_size for in-process ranks, LOCAL_WORLD_SIZE
// under torchrun (gloo), the node-local process count under mpirun.
int ranks_on_this_node(const TrainConfig& config);

// BLAS threads for each of `local` ranks on `cores` cores: $OMP_NUM_THREADS when set (PyTorch's
// default for torch.get_num_threads(); torchrun sets it to 1 with several processes per node),
// else max(1, cores / local). Throws InputError when OMP_NUM_THREADS is not a positive integer.
int blas_threads_per_rank(unsigned cores, int local);

// Trains one point: sets the BLAS threads per rank, runs the strategy, adds the warnings every
// result carries (device fallback, ranks time-sliced on fewer cores).
RunResult execute_point(const TrainConfig& config, const LoadedData& data, const DeviceChoice& device);

// The full result document: schema, created, env, the given config block and runs.
nlohmann::json make_document(nlohmann::json config, nlohmann::json runs);

// "results/dpbench-<kind>-<local time>.json"
std::string default_out_path(const std::string& kind);

// Data options as they appear in a result's config block.
void add_data_config(nlohmann::json& config, const DataOptions& data, const LoadedData& loaded);

}  // namespace dpbench
