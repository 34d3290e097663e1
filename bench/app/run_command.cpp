#include "bench/app/run_command.hpp"

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "bench/app/env_info.hpp"
#include "bench/app/result_json.hpp"
#include "bench/app/strategies.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/fashion_mnist.hpp"
#include "workloads/mlp.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {

namespace {

// A contiguous range [offset, offset + count) of another dataset: lets one synthetic generator
// provide disjoint train and test splits drawn from the same classes.
class DatasetRange final : public Dataset {
 public:
  DatasetRange(std::shared_ptr<const Dataset> base, std::int64_t offset, std::int64_t count,
               std::string name)
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

struct LoadedData {
  std::shared_ptr<const Dataset> train, test;
};

LoadedData load_data(const RunOptions& o) {
  if (o.data == "fashion-mnist") {
    const std::string dir = resolve_data_dir(o.data_dir);
    return {load_fashion_mnist(dir, true), load_fashion_mnist(dir, false)};
  }
  if (o.data == "synthetic") {
    const SampleShape shape = parse_sample_shape(o.input_shape);
    if (o.synthetic_samples < 1) {
      throw InputError(fmt::format("--synthetic-samples {}: must be at least 1", o.synthetic_samples));
    }
    const std::int64_t test_n = std::max<std::int64_t>(1, o.synthetic_samples / 6);
    std::shared_ptr<const Dataset> all = make_synthetic_dataset(
        shape, o.classes, o.synthetic_samples + test_n, o.base.seed + 1000003);
    const std::string name = fmt::format("synthetic {}x{}x{}, {} classes", shape.channels,
                                         shape.height, shape.width, o.classes);
    return {std::make_shared<DatasetRange>(all, 0, o.synthetic_samples, name + "/train"),
            std::make_shared<DatasetRange>(all, o.synthetic_samples, test_n, name + "/test")};
  }
  throw InputError(fmt::format("--data {}: unknown data source (choose fashion-mnist or synthetic)", o.data));
}

std::string default_out_path() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "results/dpbench-run-%Y%m%d-%H%M%S.json", &tm);
  return buf;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string run_label(const RunResult& r) {
  return r.config.mode == "ps" ? fmt::format("ps ({})", r.config.transport)
                               : fmt::format("{} (ring)", r.config.mode);
}

void print_table(const std::vector<RunResult>& runs, const std::vector<nlohmann::json>& docs) {
  constexpr int kLabel = 34, kCol = 22;
  fmt::print("\n{:<{}}", "", kLabel);
  for (const auto& r : runs) fmt::print("{:>{}}", run_label(r), kCol);
  fmt::print("\n");
  auto row = [&](const std::string& label, auto cell) {
    fmt::print("{:<{}}", label, kLabel);
    for (std::size_t i = 0; i < runs.size(); ++i) fmt::print("{:>{}}", cell(i), kCol);
    fmt::print("\n");
  };
  row("throughput (samples/s, median)",
      [&](std::size_t i) { return fmt::format("{:.0f}", docs[i]["throughput_samples_per_s"].get<double>()); });
  row("step time p50 / p90 (ms)", [&](std::size_t i) {
    return fmt::format("{:.2f} / {:.2f}", 1e3 * docs[i]["step_time_s"]["p50"].get<double>(),
                       1e3 * docs[i]["step_time_s"]["p90"].get<double>());
  });
  row("  compute fwd+bwd+opt (ms, p50)", [&](std::size_t i) {
    const auto& ph = docs[i]["phases_s"];
    return fmt::format("{:.2f}", 1e3 * (ph["forward"].get<double>() + ph["backward"].get<double>() +
                                        ph["optimizer"].get<double>()));
  });
  row("  comm total / exposed (ms, p50)", [&](std::size_t i) {
    const auto& ph = docs[i]["phases_s"];
    return fmt::format("{:.2f} / {:.2f}", 1e3 * ph["comm"].get<double>(),
                       1e3 * ph["comm_exposed"].get<double>());
  });
  row("  data wait (ms, p50)", [&](std::size_t i) {
    return fmt::format("{:.2f}", 1e3 * docs[i]["phases_s"]["data_wait"].get<double>());
  });
  row("peak memory rank 0 (MiB)", [&](std::size_t i) {
    return fmt::format("{:.2f}", mib(static_cast<double>(runs[i].ranks.front().memory.peak_bytes)));
  });
  row("peak memory other ranks (MiB, max)", [&](std::size_t i) {
    std::int64_t m = 0;
    for (std::size_t r = 1; r < runs[i].ranks.size(); ++r) m = std::max(m, runs[i].ranks[r].memory.peak_bytes);
    return runs[i].ranks.size() > 1 ? fmt::format("{:.2f}", mib(static_cast<double>(m))) : std::string("-");
  });
  row("memory imbalance (max / mean)", [&](std::size_t i) {
    return fmt::format("{:.3f}", docs[i]["memory"]["imbalance_max_over_mean"].get<double>());
  });
  row("comm per step rank 0 sent/recv (MiB)", [&](std::size_t i) {
    const auto& c = runs[i].ranks.front().comm_per_step;
    return fmt::format("{:.2f} / {:.2f}", mib(static_cast<double>(c.bytes_sent)),
                       mib(static_cast<double>(c.bytes_received)));
  });
  row("comm per step rank 1 sent/recv (MiB)", [&](std::size_t i) {
    if (runs[i].ranks.size() < 2) return std::string("-");
    const auto& c = runs[i].ranks[1].comm_per_step;
    return fmt::format("{:.2f} / {:.2f}", mib(static_cast<double>(c.bytes_sent)),
                       mib(static_cast<double>(c.bytes_received)));
  });
  row("final train loss", [&](std::size_t i) { return fmt::format("{:.4f}", runs[i].final_train_loss); });
  row("test accuracy", [&](std::size_t i) {
    return runs[i].test_accuracy >= 0 ? fmt::format("{:.2f} %", 100.0 * runs[i].test_accuracy)
                                      : std::string("-");
  });

  // The verdict a reader wants first.
  const RunResult* ps = nullptr;
  const RunResult* ar = nullptr;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (runs[i].config.mode == "ps" && ps == nullptr) ps = &runs[i];
    if (runs[i].config.mode == "allreduce" && ar == nullptr) ar = &runs[i];
  }
  if (ps != nullptr && ar != nullptr) {
    const double ratio = median_throughput(*ar) / std::max(median_throughput(*ps), 1e-12);
    double sum = 0;
    for (const auto& r : ps->ranks) sum += static_cast<double>(r.memory.peak_bytes);
    const double reducer_share = static_cast<double>(ps->ranks.front().memory.peak_bytes) /
                                 (sum / static_cast<double>(ps->ranks.size()));
    fmt::print("\nAt {} ranks, allreduce runs at {:.2f}x the throughput of ps; the ps reducer holds "
               "{:.2f}x the mean per-rank memory.\n",
               ar->config.world_size, ratio, reducer_share);
  }
}

}  // namespace

int run_command(const RunOptions& o) {
  // Validate everything cheap before loading data or training.
  for (const auto& m : o.modes) find_strategy(m);
  if (o.modes.empty()) throw InputError("--mode: give at least one mode");
  const DeviceChoice device = choose_device(o.base.device);
  if (o.base.world_size < 1) throw InputError(fmt::format("--ranks {}: must be at least 1", o.base.world_size));
  if (o.base.global_batch < 1) throw InputError("--batch-size 0: must be at least 1");
  if (o.base.loader.num_workers < 0) {
    throw InputError(fmt::format("--num-workers {}: must be >= 0", o.base.loader.num_workers));
  }
  if (o.base.loader.prefetch_factor < 1) {
    throw InputError(fmt::format("--prefetch-factor {}: must be >= 1", o.base.loader.prefetch_factor));
  }
  if (o.base.max_steps == 0 || o.base.max_steps < -1) {
    throw InputError(fmt::format("--max-steps {}: must be -1 (no cap) or at least 1", o.base.max_steps));
  }
  if (!(o.timeout_s > 0)) throw InputError(fmt::format("--timeout {}: must be positive", o.timeout_s));
  make_model(o.base.workload, 1, o.base.hidden, 2);  // unknown workload / bad widths
  const std::string out = o.out.empty() ? default_out_path() : o.out;

  const LoadedData data = load_data(o);
  const TrainData train_data{data.train.get(), data.test.get()};
  TrainConfig base = o.base;
  base.device = device.device;
  base.timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000.0));
  for (const auto& mode : o.modes) {
    TrainConfig cfg = base;
    cfg.mode = mode;
    find_strategy(mode).validate(cfg, *data.train);
  }
  const long steps = total_steps(base, *data.train);
  if (base.warmup_steps >= steps) {
    throw InputError(fmt::format("--warmup-steps {}: leaves no timed step out of the run's {} steps",
                                 base.warmup_steps, steps));
  }
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  // Bad input has been ruled out by now (errors stay one line); say what device was picked.
  if (!device.note.empty() && !o.quiet) fmt::print(stderr, "{}\n", device.note);

  std::vector<RunResult> runs;
  std::vector<nlohmann::json> docs;
  for (const auto& mode : o.modes) {
    TrainConfig cfg = base;
    cfg.mode = mode;
    // Give each rank an equal share of the cores for its GEMMs.
    cpu::set_blas_threads(static_cast<int>(std::max(1u, cores / static_cast<unsigned>(cfg.world_size))));
    if (!o.quiet) {
      fmt::print(stderr, "dpbench: training {} on {} with {} {} ranks, mode {} ...\n", cfg.workload,
                 data.train->name(), cfg.world_size, cfg.device, mode);
    }
    const auto t0 = std::chrono::steady_clock::now();
    RunResult r = find_strategy(mode).train(cfg, train_data);
    if (!device.note.empty()) r.warnings.push_back(device.note);
    if (static_cast<unsigned>(cfg.world_size) > cores) {
      r.warnings.push_back(fmt::format(
          "{} ranks share {} CPU cores: ranks are time-sliced, so step times include waiting for a core",
          cfg.world_size, cores));
    }
    if (!o.quiet) {
      fmt::print(stderr, "dpbench: {} done in {:.1f} s ({} steps, test accuracy {:.2f} %)\n", mode,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                 r.steps_total, 100.0 * r.test_accuracy);
    }
    docs.push_back(run_to_json(r));
    runs.push_back(std::move(r));
  }

  nlohmann::json doc;
  doc["schema"] = {{"name", kSchemaName}, {"version", kSchemaVersion}};
  doc["created"] = utc_timestamp();
  doc["env"] = collect_env();
  nlohmann::json config = config_to_json(base);
  config.erase("mode");
  config["modes"] = o.modes;
  config["data"] = o.data;
  config["dataset"] = data.train->name();
  config["blas_threads_per_rank"] = std::max(1u, cores / static_cast<unsigned>(o.base.world_size));
  doc["config"] = config;
  doc["runs"] = docs;

  print_table(runs, docs);
  write_json_atomic(out, doc);
  fmt::print("\nresults written to {}\n", out);
  return 0;
}

}  // namespace dpbench
