#include "bench/app/run_command.hpp"

#include <algorithm>
#include <chrono>
#include <string>

#include <unistd.h>

#include <fmt/format.h>

#include "bench/reference/reference_session.hpp"
#include "harness/harness.hpp"
#include "analysis/host_profile.hpp"
#include "analysis/network_results.hpp"
#include "launch/resolve.hpp"
#include "record/params_file.hpp"
#include "record/result_file.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "cluster/cluster_job.hpp"
#include "workloads/synthetic.hpp"
#include "core/device.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace {

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// A run's column heading: its strategy's label, as its document records it (strategy_to_json).
std::string run_label(const nlohmann::json& doc) { return doc.at("strategy").at("label").get<std::string>(); }

// Mean of the ranks' peak bytes.
double mean_peak(const RunResult& r) {
  double sum = 0;
  for (const auto& rank : r.ranks) sum += static_cast<double>(rank.memory.peak_bytes);
  return sum / static_cast<double>(r.ranks.size());
}

// "allreduce runs at 1.52x (1.47-1.60 over 3 repetitions)", or, when the repetitions' ratios
// straddle 1, "sharded_ps does not differ beyond noise (0.91-1.12x over 3 repetitions)".
std::string verdict_clause(Mode mode, const nlohmann::json& doc) {
  const auto& ratio = doc.at("ratio_to_baseline");
  const double lo = ratio.at("min").get<double>(), hi = ratio.at("max").get<double>();
  const std::size_t n = ratio.at("by_repetition").size();
  if (n < 2) return fmt::format("{} runs at {:.2f}x (1 repetition: no spread)", mode, ratio.at("median").get<double>());
  if (lo <= 1.0 && hi >= 1.0) {
    return fmt::format("{} does not differ beyond noise ({:.2f}-{:.2f}x over {} repetitions)", mode, lo, hi, n);
  }
  return fmt::format("{} runs at {:.2f}x ({:.2f}-{:.2f} over {} repetitions)", mode, ratio.at("median").get<double>(),
                     lo, hi, n);
}

void print_verdict(const std::vector<RunResult>& runs, const std::vector<nlohmann::json>& docs);

// One row of the run table at a time: the label, then cell(i) for each of `runs` columns.
class TableRows {
 public:
  static constexpr int kLabel = 34;
  TableRows(std::size_t runs, std::size_t column) : runs_(runs), column_(column) {}
  template <typename Cell>
  void operator()(const std::string& label, Cell cell) const {
    fmt::print("{:<{}}", label, kLabel);
    for (std::size_t i = 0; i < runs_; ++i) fmt::print("{:>{}}", cell(i), column_);
    fmt::print("\n");
  }

 private:
  std::size_t runs_, column_;
};

// The table's throughput, step time and phase rows.
void print_timing_rows(const TableRows& row, const std::vector<RunResult>& runs,
                       const std::vector<nlohmann::json>& docs) {
  row("throughput (samples/s, wall time)",
      [&](std::size_t i) { return fmt::format("{:.0f}", docs[i]["throughput_samples_per_s"].get<double>()); });
  row("  at the median step (samples/s)", [&](std::size_t i) {
    return fmt::format("{:.0f}", docs[i]["throughput_median_step_samples_per_s"].get<double>());
  });
  row("step time p50 / p90 (ms)", [&](std::size_t i) {
    return fmt::format("{:.2f} / {:.2f}", 1e3 * docs[i]["step_time_s"]["p50"].get<double>(),
                       1e3 * docs[i]["step_time_s"]["p90"].get<double>());
  });
  row("  stall ratio p90 / p50",
      [&](std::size_t i) { return fmt::format("{:.2f}", docs[i]["stall_ratio_p90_p50"].get<double>()); });
  if (docs.front().contains("time_dilation")) {  // --time-scale D on an emulated cluster
    row("  undilated: step p50 (ms) / samples/s", [&](std::size_t i) {
      const auto& t = docs[i]["time_dilation"];
      return fmt::format("{:.2f} / {:.0f}", 1e3 * t["step_time_s_p50"].get<double>(),
                         t["throughput_samples_per_s"].get<double>());
    });
  }
  row("  compute fwd+bwd+opt (ms, p50)", [&](std::size_t i) {
    const auto& ph = docs[i]["phases_s"];
    return fmt::format("{:.2f}", 1e3 * (ph["forward"].get<double>() + ph["backward"].get<double>() +
                                        ph["optimizer"].get<double>()));
  });
  row("  comm total / exposed (ms, p50)", [&](std::size_t i) {
    const auto& ph = docs[i]["phases_s"];
    return fmt::format("{:.2f} / {:.2f}", 1e3 * ph["comm"].get<double>(), 1e3 * ph["comm_exposed"].get<double>());
  });
  row("  data wait (ms, p50)",
      [&](std::size_t i) { return fmt::format("{:.2f}", 1e3 * docs[i]["phases_s"]["data_wait"].get<double>()); });
  if (runs.front().config.device == DeviceKind::cuda) {
    row("  host-to-device copy (ms, p50)",
        [&](std::size_t i) { return fmt::format("{:.2f}", 1e3 * docs[i]["phases_s"]["h2d"].get<double>()); });
  }
}

// The table's memory and communication rows.
void print_memory_and_comm_rows(const TableRows& row, const std::vector<RunResult>& runs,
                                const std::vector<nlohmann::json>& docs) {
  row("peak memory rank 0 (MiB)", [&](std::size_t i) {
    return fmt::format("{:.2f}", mib(static_cast<double>(runs[i].ranks.front().memory.peak_bytes)));
  });
  row("peak memory other ranks (MiB, max)", [&](std::size_t i) {
    std::int64_t m = 0;
    for (std::size_t r = 1; r < runs[i].ranks.size(); ++r) m = std::max(m, runs[i].ranks[r].memory.peak_bytes);
    return runs[i].ranks.size() > 1 ? fmt::format("{:.2f}", mib(static_cast<double>(m))) : std::string("-");
  });
  row("memory imbalance (max / mean)",
      [&](std::size_t i) { return fmt::format("{:.3f}", docs[i]["memory"]["imbalance_max_over_mean"].get<double>()); });
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
}

// The table's loss, accuracy, AUC and --target-loss rows.
void print_quality_rows(const TableRows& row, const std::vector<RunResult>& runs) {
  row("final train loss", [&](std::size_t i) {
    // a replay's loss is not the model's
    return runs[i].config.model.described.empty() ? fmt::format("{:.4f}", runs[i].final_train_loss) : "- (replay)";
  });
  row("test accuracy", [&](std::size_t i) {
    return runs[i].test_accuracy >= 0 ? fmt::format("{:.2f} %", 100.0 * runs[i].test_accuracy) : std::string("-");
  });
  if (std::any_of(runs.begin(), runs.end(), [](const RunResult& r) { return r.test_auc >= 0; })) {
    row("test AUC", [&](std::size_t i) {
      return runs[i].test_auc >= 0 ? fmt::format("{:.4f}", runs[i].test_auc) : std::string("-");
    });
  }
  if (const double target = runs.front().config.run.target_loss; target > 0) {
    row(fmt::format("time to loss {:g} (s, at step)", target), [&](std::size_t i) {
      const TimeToTarget t = runs[i].reached_target_loss.value_or(TimeToTarget{});
      if (t.step < 0) return std::string("not reached");
      return t.seconds >= 0 ? fmt::format("{:.2f} ({})", t.seconds, t.step) : fmt::format("- ({})", t.step);
    });
  }
  if (const double target = runs.front().config.run.target_auc; target > 0) {
    row(fmt::format("time to AUC {:g} (s, at step)", target), [&](std::size_t i) {
      const TimeToTarget t = runs[i].reached_target_auc.value_or(TimeToTarget{});
      return t.step < 0 ? std::string("not reached") : fmt::format("{:.2f} ({})", t.seconds, t.step);
    });
  }
}

void print_table(const std::vector<RunResult>& runs, const std::vector<nlohmann::json>& docs) {
  // Columns as wide as the longest run label, with two spaces between them.
  std::size_t column = 22;
  for (const auto& doc : docs) column = std::max(column, run_label(doc).size() + 2);
  fmt::print("\n{:<{}}", "", TableRows::kLabel);
  for (const auto& doc : docs) fmt::print("{:>{}}", run_label(doc), column);
  fmt::print("\n");
  const TableRows row(runs.size(), column);
  print_timing_rows(row, runs, docs);
  print_memory_and_comm_rows(row, runs, docs);
  print_quality_rows(row, runs);
  print_verdict(runs, docs);
}

// The verdict a reader wants first: every other strategy against the baseline, with spreads.
void print_verdict(const std::vector<RunResult>& runs, const std::vector<nlohmann::json>& docs) {
  auto is_baseline = [&](std::size_t i) { return docs[i].at("strategy").at("baseline").get<bool>(); };
  const RunResult* base = nullptr;
  const nlohmann::json* base_doc = nullptr;
  for (std::size_t i = 0; i < runs.size() && base == nullptr; ++i) {
    if (is_baseline(i)) base = &runs[i], base_doc = &docs[i];
  }
  if (base == nullptr) return;
  std::string clauses;
  std::size_t others = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (is_baseline(i)) continue;
    clauses += (others++ == 0 ? "" : ", ") + verdict_clause(runs[i].config.mode, docs[i]);
  }
  if (others == 0) return;
  std::string memory;
  if (base_doc->at("strategy").at("has_root").get<bool>()) {
    const double share = static_cast<double>(base->ranks.front().memory.peak_bytes) / mean_peak(*base);
    memory = fmt::format("; the {} root holds {:.2f}x the mean per-rank memory", base->config.mode, share);
  }
  fmt::print("\nAt {} rank{}, against {}'s throughput: {}{}.\n", base->config.world_size,
             base->config.world_size == 1 ? "" : "s", base->config.mode, clauses, memory);
}

// What qualifies the table and its verdict (ranks time-sliced on fewer cores, idle ranks, the
// device auto picked, ...): every run's warnings, once each.
void print_notes(const std::vector<RunResult>& runs) {
  std::vector<std::string> notes;
  for (const auto& r : runs) {
    for (const auto& w : r.warnings) {
      if (std::find(notes.begin(), notes.end(), w) == notes.end()) notes.push_back(w);
    }
  }
  for (const auto& n : notes) fmt::print("Note: {}.\n", n);
}

// Says which runs were judged at a compression hook's wider band than `band`.
void print_hook_tolerances(const std::vector<nlohmann::json>& reference, double band) {
  for (const auto& r : reference) {
    const double tolerance = r["loss_agreement"]["tolerance"].get<double>();
    if (tolerance > band) {
      fmt::print("{} rounds its gradients to 16 bits on both sides: judged at {:.0e}.\n",
                 r["dpbench_label"].get<std::string>(), tolerance);
    }
  }
}

// The reference table's notes: what memory each side measures, the loss-agreement band and the
// hooks' tolerances.
void print_reference_footer(const nlohmann::json& reference) {
  fmt::print("dpbench's memory is its allocator's peak per rank; PyTorch's is the process's peak RSS.\n");
  const auto& band = reference.front()["loss_agreement"]["band"];
  const std::string own = band["own_drift"].is_number()
                              ? fmt::format("dpbench's own modes, which differ only in reduction order, up to {:.1e}",
                                            band["own_drift"].get<double>())
                              : std::string("one mode, no drift between modes");
  const std::string sensitivity = band["sensitivity_drift"].is_number()
                                      ? fmt::format("; the same run from parameters 1 ulp away, up to {:.1e}",
                                                    band["sensitivity_drift"].get<double>())
                                      : std::string();
  fmt::print("Agreement band, step by step: {:g} x the largest float32 drift up to the step ({}{}), at least {:.0e}; "
             "{:.1e} at the last step; (!) marks a run outside it.\n",
             band["margin"].get<double>(), own, sensitivity, band["floor"].get<double>(), band["band"].get<double>());
  print_hook_tolerances(reference, band["band"].get<double>());
}

// One column of the reference table: a dpbench run or PyTorch's record.
struct ReferenceColumn {
  std::string label;
  const RunResult* run;       // a dpbench run, or null
  const nlohmann::json* doc;  // its document, or the reference record
};

// For every reference record, the dpbench runs of its mode, then the record.
std::vector<ReferenceColumn> reference_columns(const std::vector<RunResult>& runs,
                                               const std::vector<nlohmann::json>& docs,
                                               const nlohmann::json& reference) {
  std::vector<ReferenceColumn> columns;
  for (const auto& rec : reference) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].config.mode != rec["dpbench_mode"].get<Mode>()) continue;
      columns.push_back({run_label(docs[i]), &runs[i], &docs[i]});
    }
    columns.push_back({fmt::format("pytorch {} ({} proc, {} thr)", rec["program"].get<std::string>(),
                                   rec["processes"].get<int>(), rec["threads_per_process"].get<int>()),
                       nullptr, &rec});
  }
  return columns;
}

// PyTorch's runs beside the dpbench runs they reproduce: one pair of columns per pair.
void print_reference_table(const std::vector<RunResult>& runs, const std::vector<nlohmann::json>& docs,
                           const nlohmann::json& reference) {
  if (reference.empty()) return;
  const std::vector<ReferenceColumn> columns = reference_columns(runs, docs, reference);
  using Column = ReferenceColumn;
  std::size_t width = 22;
  for (const auto& c : columns) width = std::max(width, c.label.size() + 2);
  constexpr int kLabel = 34;
  fmt::print("\nPyTorch {} on the same work (same initial parameters, samples and order):\n{:<{}}",
             reference.front().value("torch_version", ""), "", kLabel);
  for (const auto& c : columns) fmt::print("{:>{}}", c.label, width);
  fmt::print("\n");
  auto row = [&](const std::string& label, auto cell) {
    fmt::print("{:<{}}", label, kLabel);
    for (const auto& c : columns) fmt::print("{:>{}}", cell(c), width);
    fmt::print("\n");
  };
  auto number = [](const nlohmann::json& v, const char* format, double scale) {
    return v.is_number() ? fmt::format(fmt::runtime(format), scale * v.get<double>()) : std::string("-");
  };
  // Both throughputs on both sides: over the timed steps' wall time (dpbench's DataLoader and
  // whatever runs between steps included, as the reference's loop includes its own), and at the
  // median step.
  row("throughput (samples/s, wall time)", [&](const Column& c) {
    return number((*c.doc)[c.run != nullptr ? "throughput_samples_per_s" : "throughput_wall_samples_per_s"], "{:.0f}",
                  1.0);
  });
  row("throughput (samples/s, median step)", [&](const Column& c) {
    return number((*c.doc)[c.run != nullptr ? "throughput_median_step_samples_per_s" : "throughput_samples_per_s"],
                  "{:.0f}", 1.0);
  });
  row("step time p50 / p90 (ms)", [&](const Column& c) {
    const auto& t = (*c.doc)["step_time_s"];
    return number(t["p50"], "{:.2f}", 1e3) + " / " + number(t["p90"], "{:.2f}", 1e3);
  });
  row("peak memory rank 0 (MiB)", [&](const Column& c) {
    if (c.run != nullptr)
      return fmt::format("{:.2f}", mib(static_cast<double>(c.run->ranks.front().memory.peak_bytes)));
    const auto& m = (*c.doc)["memory"]["per_rank"];
    return m.empty() ? std::string("-")
                     : number(m[0].value("peak_rss_bytes", nlohmann::json()), "{:.1f} RSS", 1.0 / (1024.0 * 1024.0));
  });
  row("final train loss",
      [&](const Column& c) { return number((*c.doc)["quality"]["final_train_loss"], "{:.4f}", 1.0); });
  row("test accuracy", [&](const Column& c) {
    return number((*c.doc)["quality"].value("test_accuracy", nlohmann::json()), "{:.2f} %", 100.0);
  });
  row("step loss vs dpbench (max rel.)", [&](const Column& c) {
    if (c.run != nullptr) return std::string("");
    const auto& a = (*c.doc)["loss_agreement"];
    return fmt::format("{:.1e}{}", a["max_rel_diff"].get<double>(), a["within"].get<bool>() ? "" : " (!)");
  });
  print_reference_footer(reference);
}

}  // namespace

namespace {

// What every mode of the run shares once the options have been checked.
struct RunSetup {
  LaunchInfo launch;
  bool output = false, quiet = false;
  std::string out;
  ModesPlan plan;
  std::optional<HostProfile> host_profile;  // --host-profile, read before any run
};

// Shows a run's progress on stderr: a line when a mode starts, one updated in place on a
// terminal (a plain line every 10 s otherwise, for logs) while it trains, one when it is done.
class ProgressPrinter final : public TrainingObserver {
 public:
  ProgressPrinter(const RunSetup& s, std::string data_name) : s_(s), data_name_(std::move(data_name)) {}

  void starting(TrainConfig& config, int rep, int reps) override {
    if (s_.quiet) return;
    const std::string repetition = reps > 1 ? fmt::format(", repetition {}/{}", rep + 1, reps) : "";
    const std::string what = config.model.described.empty() ? config.model.workload
                                                            : fmt::format("a replay of {}", config.model.described);
    fmt::print(stderr, "dpbench: training {} on {} with {} {} ranks ({}), mode {}{} ...\n", what, data_name_,
               config.world_size, config.device, s_.launch.launcher, config.mode, repetition);
    config.progress_interval_s = terminal_ ? 0.5 : 10.0;
    const bool replay = !config.model.described.empty();  // whose loss is not the model's
    config.progress = [terminal = terminal_, mode = config.mode, replay](const Progress& p) {
      const std::string line = fmt::format("dpbench: {} epoch {}/{} step {}/{} loss {} {:.0f} samples/s ETA {:.0f} s",
                                           mode, p.epoch + 1, p.epochs, p.step, p.total_steps,
                                           replay ? std::string("- (replay)") : fmt::format("{:.4f}", p.loss),
                                           p.samples_per_s, p.eta_s);
      if (terminal) {
        fmt::print(stderr, "\r{}\x1b[K", line);
      } else {
        fmt::print(stderr, "{}\n", line);
      }
    };
  }

  void finished(const RunResult& r, double seconds) override {
    if (s_.quiet) return;
    if (terminal_) fmt::print(stderr, "\r\x1b[K");  // the progress line gives way
    std::string accuracy = r.test_accuracy >= 0 ? fmt::format(", test accuracy {:.2f} %", 100.0 * r.test_accuracy) : "";
    if (r.test_auc >= 0) accuracy += fmt::format(", AUC {:.4f}", r.test_auc);
    fmt::print(stderr, "dpbench: {} done in {:.1f} s ({} steps{})\n", r.config.mode, seconds, r.steps_total, accuracy);
  }

  void perturbing(Mode mode, int runs) override {
    if (s_.quiet) return;
    fmt::print(stderr,
               "dpbench: measuring the trajectory's sensitivity: {} {} times more, from parameters 1 ulp away ...\n",
               mode, runs);
  }

 private:
  const RunSetup& s_;
  std::string data_name_;
  bool terminal_ = isatty(STDERR_FILENO) != 0;
};

// Checks the options and the launch, and builds the plan every mode starts from (before any
// data is loaded, a bad --out or option wastes no run). Throws InputError.
RunSetup prepare_run(const RunOptions& o) {
  RunSetup s;
  ModesPlan& plan = s.plan;
  plan.device = choose_device(o.device, o.base.comm == Backend::mpi || o.base.comm == Backend::gloo);
  check_common_options(o.base, o.timeout_s);
  s.launch = resolve_launch(o.base.comm, o.ranks_given ? o.base.world_size : 0, plan.device.device, o.init);
  s.output = is_output_process();
  s.quiet = o.quiet || !s.output;
  s.out = o.out.empty() ? default_out_path("run") : o.out;
  if (s.output) check_result_path(s.out);
  if (!o.host_profile.empty()) s.host_profile = read_host_profile(o.host_profile);
  // Checkpoints and the PyTorch reference belong to one run of each mode.
  const bool single = !o.base.checkpoint.dir.empty() || !o.reference.framework.empty();
  if (o.repetitions < 1) throw InputError(fmt::format("--repetitions {}: must be at least 1", o.repetitions));
  if (single && o.repetitions_given && o.repetitions > 1) {
    throw InputError(
        fmt::format("--repetitions {}: --checkpoint-dir and --reference run each mode once", o.repetitions));
  }
  plan.modes = o.modes;
  plan.repetitions = single ? 1 : o.repetitions;
  TrainConfig& base = plan.base;
  base = o.base;
  base.world_size = s.launch.world_size;
  base.process = process_identity(s.launch);
  base.keep_final_params = !o.save_params.empty();
  if (!o.init_params.empty()) base.initial_params = read_params_file(o.init_params, "--init-params");
  base.device = plan.device.device;
  base.loader.pin_memory = o.data.pin_memory >= 0 ? o.data.pin_memory == 1 : plan.device.device == DeviceKind::cuda;
  base.timeout = std::chrono::milliseconds(static_cast<long>(o.timeout_s * 1000.0));
  return s;
}

// The checks of every mode that depend on the options alone (--out, batch divisible by the
// cluster's ranks, --servers at most the ranks, a known --transport, ...), made before a
// namespace exists or a process starts: against a stand-in dataset as large as the global
// batch, so that only the checks that need the real data are left to the ranks. Throws
// InputError.
void check_cluster_options(const RunOptions& o) {
  check_common_options(o.base, o.timeout_s);
  if (!o.out.empty()) check_result_path(o.out);
  if (!o.host_profile.empty()) read_host_profile(o.host_profile);  // rank 0 records it
  const int world = o.cluster.world_size();
  const auto stand_in = make_synthetic_dataset(
      SampleShape{1, 1, 1}, 10, std::max<std::int64_t>({1, static_cast<std::int64_t>(o.base.global_batch), world}), 0);
  for (const auto& mode : o.modes) {
    TrainConfig config = o.base;
    config.mode = mode;
    config.world_size = world;
    validate_point(config, *stand_in);
  }
}

// The user's command of a job on an emulated cluster (--nodes): checks the options, then starts
// the job's inner program (cluster/cluster_job.hpp); returns the job's exit code.
int start_cluster_job(const RunOptions& o) {
  check_cluster_options(o);
  return cluster::run_job(o.cluster, o.args);
}

// Rank 0's report of the runs (`docs` their entries): the tables, then the result file (the
// run's config with its data, launcher, reference and --init-params; the network block on an
// emulated cluster; the reference's runs), and the reference's failures on stderr. Returns the
// exit code: 1 when a reference failed or left its band.
int report_runs(const RunOptions& o, const RunSetup& s, const LoadedData& data, const TrainedModes& trained,
                const std::vector<nlohmann::json>& docs, const ReferenceSession& reference) {
  const std::vector<RunResult>& runs = trained.runs;
  print_table(runs, docs);
  print_notes(runs);
  print_reference_table(runs, docs, reference.runs());
  nlohmann::json config = config_to_json(s.plan.base);
  config.erase("mode");
  config["modes"] = s.plan.modes;
  config["repetitions"] = s.plan.repetitions;
  config.update(data.config);
  config["launcher"] = s.launch.launcher;
  if (reference.active()) config["reference"] = o.reference.framework;
  if (!o.init_params.empty()) config["init_params"] = o.init_params;
  nlohmann::json document = make_document(std::move(config), docs);
  if (s.host_profile) document["env"]["host_profile"] = host_profile_env_record(*s.host_profile);
  if (auto network = cluster::cluster_description(); !network.is_null()) {
    add_network_results(network, runs, document["runs"]);
    document["network"] = std::move(network);
    print_network_table(runs, document);
  }
  if (reference.active()) document["reference"] = reference.to_json();
  write_json_atomic(s.out, document);
  fmt::print("\nresults written to {}\n", s.out);
  return reference.report_failures() ? 1 : 0;
}

// Trains every mode of `o` in this process (one rank of a job, or all of them as threads) and,
// on the output process, reports and writes the result.
int train_and_report(const RunOptions& o) {
  // A malformed DPBENCH_FAULT is an input error here, not in whichever rank reads it first.
  fault_from_env();
  RunSetup s = prepare_run(o);
  ReferenceSession reference(o.reference, s.launch, s.output, s.quiet);
  const LoadedData data = load_data(o.data, o.base.seed);
  check_points(s.plan.base, s.plan.modes, data);
  s.plan.sensitivity_starts = reference.start(s.plan.base, data);
  // Bad input has been ruled out by now (errors stay one line); say what device was picked.
  if (!s.plan.device.note.empty() && !s.quiet) fmt::print(stderr, "{}\n", s.plan.device.note);
  ProgressPrinter printer(s, data.train->name());
  TrainedModes trained = train_modes(s.plan, data, printer);
  reference.finish(trained);
  if (!s.output) return 0;  // rank 0 of a multi-process job reports for every rank
  for (const RunResult& r : trained.runs) {
    if (o.save_params.empty()) break;
    write_params_file(fmt::format("{}-{}.f32", o.save_params, r.config.mode), r.final_params, "--save-params");
  }
  const std::vector<nlohmann::json> docs = runs_to_json(trained.runs, trained.by_mode);
  return report_runs(o, s, data, trained, docs, reference);
}

}  // namespace

int run_command(const RunOptions& o) {
  // Validate everything cheap before loading data or training.
  if (o.modes.empty()) throw InputError("--mode: give at least one mode");
  return o.cluster.nodes > 0 ? start_cluster_job(o) : train_and_report(o);
}

int cluster_rank_command(const RunOptions& o) {
  if (o.modes.empty()) throw InputError("--mode: give at least one mode");
  cluster::die_with_parent();
  return train_and_report(o);
}

}  // namespace dpbench
