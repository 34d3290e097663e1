#include "harness/harness.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "record/env_info.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "train/elastic.hpp"
#include "train/engine_probe.hpp"
#include "train/memory_model.hpp"
#include "train/models.hpp"
#include "core/error.hpp"
#include "core/mpi_comm.hpp"
#include "core/net_interface.hpp"
#include "workloads/click_logs.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/criteo.hpp"
#include "workloads/fashion_mnist.hpp"
#include "workloads/mlp.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {

namespace {

// A contiguous range [offset, offset + count) of another dataset: lets one synthetic generator
// provide disjoint train and test splits drawn from the same classes.
class DatasetRange final : public Dataset {
 public:
  DatasetRange(std::shared_ptr<const Dataset> base, std::int64_t offset, std::int64_t count, std::string name)
      : base_(std::move(base)), offset_(offset), count_(count), name_(std::move(name)) {}
  std::int64_t size() const override { return count_; }
  SampleShape shape() const override { return base_->shape(); }
  int num_classes() const override { return base_->num_classes(); }
  int load(std::int64_t index, float* out) const override { return base_->load(offset_ + index, out); }
  std::string name() const override { return name_; }

 private:
  std::shared_ptr<const Dataset> base_;
  std::int64_t offset_, count_;
  std::string name_;
};

unsigned cpu_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

}  // namespace

namespace {

// The train and test sets of --data.
LoadedData load_sets(const DataOptions& o, std::uint64_t seed) {
  if (o.data == "fashion-mnist") {
    const std::string dir = resolve_data_dir(o.data_dir);
    return {load_fashion_mnist(dir, true), load_fashion_mnist(dir, false), {}};
  }
  if (o.data == "click-logs") {
    if (o.synthetic_samples < 1) {
      throw InputError(fmt::format("--synthetic-samples {}: must be at least 1", o.synthetic_samples));
    }
    const std::int64_t test_n = std::max<std::int64_t>(1, o.synthetic_samples / 6);
    std::shared_ptr<const Dataset> all = make_click_logs(o.click_log_shape, o.click_logs, o.synthetic_samples + test_n,
                                                         seed + 1000003);
    const std::string name = all->name();
    return {std::make_shared<DatasetRange>(all, 0, o.synthetic_samples, name + "/train"),
            std::make_shared<DatasetRange>(all, o.synthetic_samples, test_n, name + "/test"),
            {}};
  }
  if (o.data == "criteo") {
    CriteoSplit split = read_criteo_split(o.raw_data_file, o.click_log_shape,
                                          "criteo " + std::filesystem::path(o.raw_data_file).filename().string());
    return {std::move(split.train), std::move(split.test), {}};
  }
  if (o.data == "synthetic") {
    const SampleShape shape = parse_sample_shape(o.input_shape);
    if (o.synthetic_samples < 1) {
      throw InputError(fmt::format("--synthetic-samples {}: must be at least 1", o.synthetic_samples));
    }
    const std::int64_t test_n = std::max<std::int64_t>(1, o.synthetic_samples / 6);
    std::shared_ptr<const Dataset> all = make_synthetic_dataset(shape, o.classes, o.synthetic_samples + test_n,
                                                                seed + 1000003);
    const std::string name = fmt::format("synthetic {}x{}x{}, {} classes", shape.channels, shape.height, shape.width,
                                         o.classes);
    return {std::make_shared<DatasetRange>(all, 0, o.synthetic_samples, name + "/train"),
            std::make_shared<DatasetRange>(all, o.synthetic_samples, test_n, name + "/test"),
            {}};
  }
  throw InputError(
      fmt::format("--data {}: unknown data source (choose fashion-mnist, synthetic, click-logs or criteo)", o.data));
}

}  // namespace

LoadedData load_data(const DataOptions& o, std::uint64_t seed) {
  LoadedData loaded = load_sets(o, seed);
  loaded.config["data"] = o.data;
  loaded.config["dataset"] = loaded.train->name();
  if (o.data == "criteo") loaded.config["raw_data_file"] = o.raw_data_file;
  if (o.data == "synthetic") {
    loaded.config["input"] = o.input_shape;
    loaded.config["classes"] = o.classes;
    loaded.config["synthetic_samples"] = o.synthetic_samples;
  }
  return loaded;
}

void check_replay_fits(const TrainConfig& base, const std::vector<Mode>& modes, const DataOptions& data) {
  if (base.model.described.empty() && base.model.workload != "dlrm") return;
  const std::string what = base.model.described.empty() ? std::string("--workload dlrm")
                                                        : "--model " + base.model.described;
  const double machine = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  for (Mode mode : modes) {
    TrainConfig config = base;
    config.mode = mode;
    const Strategy& strategy = find_strategy(mode);
    if (strategy.memory == nullptr) continue;
    if (strategy.transports.empty()) config.transport = Transport::ring;
    const MemoryInputs in = builtin_memory_inputs(config, parse_sample_shape(data.input_shape),
                                                  static_cast<std::size_t>(data.classes));
    double total = 0;
    for (const RankMemory& m : strategy.memory(in)) total += m.total();
    if (total > machine) {
      throw InputError(fmt::format("{}: {} ranks of {} need {:.1f} GiB by the memory model, more than this "
                                   "machine's {:.1f} GiB (fewer ranks, a smaller --batch-size or smaller tables)",
                                   what, config.world_size, mode, total / (1 << 30), machine / (1 << 30)));
    }
  }
}

void check_point(const TrainConfig& config, const Dataset& train) {
  validate_point(config, train);
  make_model(config, train.shape(), static_cast<std::size_t>(train.num_classes()));  // a shape it cannot take
  const long steps = total_steps(config, train);
  if (config.run.warmup_steps >= steps) {
    throw InputError(fmt::format("--warmup-steps {}: leaves no timed step out of the run's {} steps",
                                 config.run.warmup_steps, steps));
  }
}

void check_points(const TrainConfig& base, const std::vector<Mode>& modes, const LoadedData& data) {
  for (const Mode mode : modes) {
    TrainConfig config = base;
    config.mode = mode;
    check_point(config, *data.train);
  }
  if (base.initial_params != nullptr) {
    (void)initial_parameters(*make_model(base, data.train->shape(),
                                         static_cast<std::size_t>(data.train->num_classes())),
                             base);  // --init-params of the wrong size fails here, before training
  }
}

int ranks_on_this_node(const TrainConfig& config) {
  if (cluster_node() >= 0) return config.world_size;  // an emulated cluster's nodes are this one host
  if (config.comm == Backend::mpi && MpiRuntime::active()) return MpiRuntime::local_size();
  if (config.comm == Backend::gloo && config.process.ranks_on_this_node > 0)
    return config.process.ranks_on_this_node;  // LOCAL_WORLD_SIZE
  return config.world_size;
}

int blas_threads_per_rank(unsigned cores, int local) {
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 4096) {
      throw InputError(fmt::format("OMP_NUM_THREADS={}: not a positive number of threads", v));
    }
    return static_cast<int>(n);
  }
  return static_cast<int>(std::max(1u, cores / static_cast<unsigned>(std::max(1, local))));
}

namespace {

// The warning of ranks sharing a GPU (virtual ranks) or `local` CPU ranks sharing `cores` cores.
void add_sharing_warning(const TrainConfig& config, unsigned local, unsigned cores, RunResult& r) {
  if (config.device != DeviceKind::cpu) {
    const bool shared = std::any_of(r.ranks.begin(), r.ranks.end(),
                                    [](const RankResult& k) { return k.device.virtual_rank; });
    if (shared) {
      r.warnings.push_back(
          fmt::format("virtual ranks: {} ranks share {} GPU(s) on this node; results check correctness, and step times "
                      "include the ranks contending for one device",
                      config.world_size, probe_cuda().gpus.size()));
      fmt::print(stderr, "dpbench: warning: {}\n", r.warnings.back());
    }
  } else if (local > cores) {
    r.warnings.push_back(fmt::format(
        "{} ranks share {} CPU cores: ranks are time-sliced, so step times include waiting for a core", local, cores));
  }
}

}  // namespace

RunResult execute_point(const TrainConfig& config, const LoadedData& data, const DeviceChoice& device) {
  const unsigned cores = cpu_cores();
  const auto local = static_cast<unsigned>(std::max(1, ranks_on_this_node(config)));
  const int blas_threads = blas_threads_per_rank(cores, static_cast<int>(local));
  cpu::set_blas_threads(blas_threads);
  const RunTraits traits = run_traits(config);
  const Strategy& strategy = *traits.strategy;
  RunResult r = strategy.train(config, data.view());
  r.traits = traits;
  r.blas_threads = blas_threads;
  if (!device.note.empty()) r.warnings.push_back(device.note);
  // Records of other processes' ranks that this process was not sent have no steps.
  const auto idle = std::count_if(r.ranks.begin(), r.ranks.end(),
                                  [](const RankResult& k) { return k.local_batch == 0 && !k.steps.empty(); });
  if (idle > 0) {
    r.warnings.push_back(
        fmt::format("{}: {} of {} ranks get no samples of a global batch of {} (they only communicate)",
                    strategy.label(config), idle, config.world_size, config.global_batch));
    fmt::print(stderr, "dpbench: warning: {}\n", r.warnings.back());
  }
  if (!config.checkpoint.dir.empty()) {
    int attempt = 0;
    for (const auto& k : r.ranks) attempt = std::max(attempt, k.restart_count);
    r.elastic_restart = restart_cost(config.checkpoint.dir, r.resumed_from_step, attempt);
  }
  // What the record and the network analysis read of the run's model: the memory model's
  // figures where they hold to the byte, and the strategy's buckets.
  const std::shared_ptr<const Model> model = make_model(config, data.train->shape(),
                                                        static_cast<std::size_t>(data.train->num_classes()));
  if (!config.model.described.empty()) r.description = described_model(config.model.described);
  if (config.device == DeviceKind::cpu && config.comm == Backend::local && strategy.memory != nullptr) {
    r.modelled_memory = strategy.memory(model_memory_inputs(model, config, data.train->shape(), model->num_classes()));
  }
  if (strategy.schedule_buckets != nullptr) r.schedule_buckets = strategy.schedule_buckets(*model, config);
  if (strategy.warnings != nullptr) {
    for (std::string& warning : strategy.warnings(config)) {
      r.warnings.push_back(std::move(warning));
      fmt::print(stderr, "dpbench: warning: {}\n", r.warnings.back());
    }
  }
  if (r.resumed_from_step >= r.steps_total) {
    r.warnings.push_back(
        fmt::format("--resume: the checkpoint of step {} is the end of this {}-step run: nothing was trained",
                    r.resumed_from_step, r.steps_total));
    fmt::print(stderr, "dpbench: warning: {}\n", r.warnings.back());
  }
  add_sharing_warning(config, local, cores, r);
  return r;
}

std::string default_out_path(const std::string& kind) {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return fmt::format("results/dpbench-{}-{}.json", kind, buf);
}

namespace {

// One run of a plan: its config and, for a run the observer shows, its mode's index and
// repetition (mode -1: a sensitivity run).
struct PlannedRun {
  TrainConfig config;
  int mode = -1, rep = 0;
};

// The plan's runs in the order they train: every mode in each repetition, then the sensitivity
// runs of the first mode.
std::vector<PlannedRun> run_order(const ModesPlan& plan) {
  std::vector<PlannedRun> order;
  for (int rep = 0; rep < plan.repetitions; ++rep) {
    for (std::size_t m = 0; m < plan.modes.size(); ++m) {
      order.push_back({plan.base, static_cast<int>(m), rep});
      order.back().config.mode = plan.modes[m];
    }
  }
  for (const auto& start : plan.sensitivity_starts) {
    order.push_back({plan.base, -1, 0});
    order.back().config.mode = plan.modes.front();
    order.back().config.initial_params = start;
  }
  return order;
}

}  // namespace

std::vector<std::vector<StepRecord>> pool_steps(const std::vector<RunResult>& reps) {
  if (reps.empty()) return {};
  std::vector<std::vector<StepRecord>> steps(reps.front().ranks.size());
  for (const RunResult& r : reps) {
    if (r.ranks.size() != steps.size()) return {};
    for (std::size_t i = 0; i < steps.size(); ++i) {
      steps[i].insert(steps[i].end(), r.ranks[i].steps.begin(), r.ranks[i].steps.end());
    }
  }
  return steps;
}

TrainedModes train_modes(const ModesPlan& plan, const LoadedData& data, TrainingObserver& observer) {
  TrainedModes t;
  t.by_mode.resize(plan.modes.size());
  bool announced = false;
  for (PlannedRun& run : run_order(plan)) {
    const bool shown = run.mode >= 0;
    if (shown) observer.starting(run.config, run.rep, plan.repetitions);
    if (!shown && !announced) observer.perturbing(run.config.mode, static_cast<int>(plan.sensitivity_starts.size()));
    announced = announced || !shown;
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = execute_point(run.config, data, plan.device);
    if (!shown) {
      t.perturbed_losses.push_back(std::move(r.step_train_loss));
      continue;
    }
    observer.finished(r, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    t.by_mode[static_cast<std::size_t>(run.mode)].push_back(std::move(r));
  }
  for (const auto& reps : t.by_mode) {
    RunResult& chosen = t.runs.emplace_back(reps[median_run(reps)]);
    if (reps.size() < 2 || !chosen.engine_probe) continue;
    // The engine probes of every repetition pooled into the chosen run's (train/engine_probe.hpp);
    // its own intra-node link and reduction stay where the repetitions' do not pool.
    std::vector<const EngineProbe*> probes;
    for (const RunResult& r : reps) probes.push_back(r.engine_probe ? &*r.engine_probe : nullptr);
    if (auto pooled = pool_probes(probes)) {
      if (!pooled->intra_node) pooled->intra_node = chosen.engine_probe->intra_node;
      if (pooled->reduction.empty()) pooled->reduction = chosen.engine_probe->reduction;
      chosen.engine_probe = std::move(pooled);
      chosen.pooled_steps = pool_steps(reps);
    }
  }
  return t;
}

}  // namespace dpbench
