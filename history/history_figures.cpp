// history_figures() and history_machine(): what of a dpbench file goes into the history.
#include <fmt/format.h>

#include "core/error.hpp"
#include "history/history_store.hpp"

namespace dpbench {

namespace {

using Json = nlohmann::json;

// The configuration keys of a run that make two runs comparable (its config block's).
constexpr const char* kRunConfigKeys[] = {"mode",         "transport",     "workload",  "model",     "world_size",
                                          "global_batch", "num_workers",   "comm",      "device",    "hidden",
                                          "optimizer",    "bucket_cap_mb", "comm_hook", "hierarchy", "staleness",
                                          "servers",      "precision",     "nodes",     "link",      "ranks_per_node",
                                          "launcher"};

void figure(std::vector<HistoryFigure>& out, const HistoryFigure& base, const char* metric, const Json& value) {
  if (!value.is_number()) return;
  HistoryFigure f = base;
  f.metric = metric;
  f.value = value.get<double>();
  out.push_back(std::move(f));
}

// j[a][b]... or null.
const Json& at(const Json& j, std::initializer_list<const char*> path) {
  static const Json kNull;
  const Json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object() || !cur->contains(key)) return kNull;
    cur = &(*cur)[key];
  }
  return *cur;
}

void run_figures(const Json& run, const HistoryFigure& base, std::vector<HistoryFigure>& out) {
  if (run.value("status", std::string("ok")) == "failed") return;
  Json config = Json::object();
  const Json& c = at(run, {"config"});
  for (const char* key : kRunConfigKeys) {
    if (c.is_object() && c.contains(key) && !c[key].is_null()) config[key] = c[key];
  }
  if (run.contains("transport")) config["transport"] = run["transport"];
  HistoryFigure f = base;
  f.config = config.dump();
  figure(out, f, "throughput_samples_per_s", at(run, {"throughput_samples_per_s"}));
  figure(out, f, "step_time_p50_s", at(run, {"step_time_s", "p50"}));
  const Json& bytes = at(run, {"comm_bytes_per_step", "per_rank"});
  if (bytes.is_array() && !bytes.empty()) figure(out, f, "rank0_bytes_sent_per_step", at(bytes[0], {"sent"}));
  const Json& memory = at(run, {"memory", "per_rank"});
  if (memory.is_array() && !memory.empty()) figure(out, f, "rank0_peak_bytes", at(memory[0], {"peak_bytes"}));
  figure(out, f, "memory_imbalance", at(run, {"memory", "imbalance_max_over_mean"}));
  figure(out, f, "final_train_loss", at(run, {"quality", "final_train_loss"}));
  figure(out, f, "bus_bandwidth_GBps", at(run, {"bus_bandwidth_GBps"}));
}

}  // namespace

std::string history_machine(const Json& env) {
  if (!env.is_object()) return "simulated";
  std::string gpus;
  if (env.contains("gpus") && env["gpus"].is_array()) {
    for (const auto& g : env["gpus"]) {
      gpus += (gpus.empty() ? "" : " + ") + (g.is_object() ? g.value("name", std::string("GPU")) : std::string("GPU"));
    }
  }
  return fmt::format("{}, {} cores, {}, BLAS {}", env.value("cpu_model", std::string("unknown CPU")),
                     env.contains("cpu_cores") ? env["cpu_cores"].dump() : std::string("?"),
                     gpus.empty() ? std::string("no GPU") : gpus, env.value("blas_core", std::string("unknown")));
}

namespace {

// Google Benchmark's JSON (dpbench_collectives): each benchmark's real time and counters; the
// median aggregate where repetitions were run.
std::vector<HistoryFigure> benchmark_figures(const Json& doc, HistoryFigure base) {
  const Json& ctx = doc["context"];
  base.created = ctx.value("date", std::string());
  base.machine = fmt::format("{} ({} CPUs at {} MHz)", ctx.value("host_name", std::string("unknown host")),
                             ctx.contains("num_cpus") ? ctx["num_cpus"].dump() : std::string("?"),
                             ctx.contains("mhz_per_cpu") ? ctx["mhz_per_cpu"].dump() : std::string("?"));
  if (base.commit.empty()) {
    throw InputError(fmt::format("{}: Google Benchmark's JSON records no git commit; give --commit", base.source));
  }
  std::vector<HistoryFigure> out;
  for (const auto& b : doc["benchmarks"]) {
    if (b.value("run_type", std::string("iteration")) == "aggregate" && b.value("aggregate_name", "") != "median") {
      continue;
    }
    HistoryFigure f = base;
    f.config = Json{{"benchmark", b.value("run_name", b.value("name", std::string()))}}.dump();
    figure(out, f, "real_time", at(b, {"real_time"}));
    for (const char* counter : {"busbw", "algbw", "bytes_per_second"}) figure(out, f, counter, at(b, {counter}));
  }
  return out;
}

// A projection's points: the projected step and the simulated one.
std::vector<HistoryFigure> projection_figures(const Json& doc, const HistoryFigure& base) {
  std::vector<HistoryFigure> out;
  for (const auto& p : doc.value("points", Json::array())) {
    HistoryFigure f = base;
    // The curve's key: "curve" since projection version 2, "mode" in version 1's files.
    f.config = Json{{"projection", p.value("curve", p.value("mode", std::string()))},
                    {"world_size", p.value("world_size", 0)},
                    {"per_rank_batch", p.value("per_rank_batch", 0.0)}}
                   .dump();
    figure(out, f, "projected_step_s", at(p, {"step_time_s"}));
    figure(out, f, "simulated_step_s", at(p, {"simulation", "simulated_step_s"}));
  }
  return out;
}

}  // namespace

std::vector<HistoryFigure> history_figures(const Json& doc, const std::string& source, const std::string& commit) {
  if (!doc.is_object()) throw InputError(fmt::format("{}: not a JSON object", source));
  HistoryFigure base;
  base.source = source;
  base.commit = commit;
  if (doc.contains("benchmarks") && doc.contains("context")) return benchmark_figures(doc, base);
  const Json& name = at(doc, {"schema", "name"});
  const std::string kind = name.is_string() ? name.get<std::string>() : "";
  if (kind != "dpbench-result" && kind != "dpbench-projection") {
    throw InputError(fmt::format("{}: not a dpbench result, sweep, projection or Google Benchmark file", source));
  }
  base.created = doc.value("created", std::string());
  if (base.created.empty()) throw InputError(fmt::format("{}: records no creation time ('created')", source));
  const Json& own = at(doc, {"env", "git_commit"});
  if (base.commit.empty() && own.is_string()) base.commit = own.get<std::string>();
  if (base.commit.empty()) {
    throw InputError(fmt::format("{}: records no git commit (env.git_commit); give --commit", source));
  }
  base.machine = history_machine(at(doc, {"env"}));
  if (kind == "dpbench-projection") return projection_figures(doc, base);
  std::vector<HistoryFigure> out;
  for (const auto& run : doc.value("runs", Json::array())) run_figures(run, base, out);
  return out;
}

}  // namespace dpbench
