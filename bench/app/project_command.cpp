#include "bench/app/project_command.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "bench/app/harness.hpp"
#include "bench/app/result_json.hpp"
#include "bench/app/strategies.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"

namespace dpbench {

namespace {

nlohmann::json read_json(const std::string& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open {}", path, what));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
}

bool ok_run(const nlohmann::json& run) { return run.value("status", std::string("ok")) == "ok"; }

// The registered strategy of a result file's run (its traits), by the run's mode.
const Strategy& run_strategy(const nlohmann::json& run) { return find_strategy(run.at("mode").get<std::string>()); }

// The projection curve a measured run belongs to: its strategy's curve for its transport.
const ProjectedMode& run_projection(const nlohmann::json& run) {
  TrainConfig c;
  c.mode = run.at("mode").get<std::string>();
  c.transport = run.value("transport", c.transport);
  return projected_mode(run_strategy(run), c);
}

// The run's bus bandwidth in GB/s, if it reports one. Files written before the strategy traits
// called it allreduce_bandwidth_GBps (allreduce runs only).
std::optional<double> run_busbw(const nlohmann::json& run) {
  for (const char* key : {"bus_bandwidth_GBps", "allreduce_bandwidth_GBps"}) {
    if (run.contains(key) && run.at(key).is_object()) return run.at(key).at("busbw").get<double>();
  }
  return std::nullopt;
}

// Link from dpbench_collectives' Google Benchmark JSON: busbw of the ring all-reduce at the
// message size closest to the gradient size (2 ranks preferred), latency from its smallest size.
std::optional<LinkModel> link_from_collectives(const nlohmann::json& gb, double param_bytes) {
  struct Point { int ranks; double bytes, busbw, seconds; };
  std::vector<Point> points;
  for (const auto& b : gb.value("benchmarks", nlohmann::json::array())) {
    const std::string name = b.value("name", "");
    if (name.rfind("BM_AllReduce/", 0) != 0 || b.value("run_type", "iteration") != "iteration") continue;
    Point p{0, 0, b.value("busbw", 0.0), b.value("real_time", 0.0)};
    for (std::size_t pos = 0; pos != std::string::npos;) {
      const std::size_t next = name.find('/', pos + 1);
      const std::string part = name.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
      if (part.rfind("ranks:", 0) == 0) p.ranks = std::stoi(part.substr(6));
      if (part.rfind("bytes:", 0) == 0) p.bytes = std::stod(part.substr(6));
      pos = next;
    }
    const std::string unit = b.value("time_unit", "ns");
    p.seconds *= unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : 1.0;
    if (p.ranks >= 2 && p.bytes > 0 && p.busbw > 0) points.push_back(p);
  }
  if (points.empty()) return std::nullopt;
  const int ranks = std::min_element(points.begin(), points.end(),
                                     [](const Point& a, const Point& b) { return a.ranks < b.ranks; })->ranks;
  const Point* nearest = nullptr;
  const Point* smallest = nullptr;
  for (const auto& p : points) {
    if (p.ranks != ranks) continue;
    if (nearest == nullptr || std::abs(std::log(p.bytes / param_bytes)) < std::abs(std::log(nearest->bytes / param_bytes))) nearest = &p;
    if (smallest == nullptr || p.bytes < smallest->bytes) smallest = &p;
  }
  LinkModel link;
  link.name = "measured";
  link.beta_s_per_byte = 1.0 / (nearest->busbw * 1e9);
  link.alpha_s = smallest->seconds / (2.0 * (ranks - 1));
  link.source = fmt::format("dpbench_collectives: ring all-reduce busbw {:.2f} GB/s at {} ranks and {} "
                            "bytes; latency from {} bytes", nearest->busbw, ranks,
                            static_cast<long long>(nearest->bytes), static_cast<long long>(smallest->bytes));
  return link;
}

}  // namespace

void add_project_options(CLI::App& app, ProjectOptions& o) {
  app.add_option("results", o.results, "dpbench result or sweep files (one needs a 1-rank run)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--link", o.link,
                 "measured (from --collectives or the files' bus bandwidth) or a preset: "
                 "pcie4, pcie5, nvlink4, ib-ndr")
      ->capture_default_str();
  app.add_option("--collectives", o.collectives,
                 "Google Benchmark JSON of dpbench_collectives: measured alpha and busbw")
      ->check(CLI::ExistingFile);
  app.add_option("--max-ranks", o.max_ranks, "Largest world size projected")->capture_default_str();
  app.add_option("--per-rank-batch", o.per_rank_batch,
                 "Samples per rank per step in the projection (default: the 1-rank run's batch; "
                 "weak scaling)");
  app.add_option("--out,-o", o.out, "Projection JSON path (default results/dpbench-projection-<time>.json)");
  app.add_flag("--quiet,-q", o.quiet, "Only print the summary");
}

nlohmann::json project(const ProjectOptions& o, const std::vector<nlohmann::json>& results,
                       const nlohmann::json* collectives) {
  if (o.max_ranks < 1) throw InputError(fmt::format("--max-ranks {}: must be at least 1", o.max_ranks));
  // Calibration: single-rank runs (at 1 rank every mode is plain SGD; see calibration_run).
  int cores = 0;
  std::vector<const nlohmann::json*> runs, singles;
  for (const auto& doc : results) {
    cores = std::max(cores, doc.at("env").value("cpu_cores", 0));
    for (const auto& run : doc.at("runs")) {
      if (!ok_run(run)) continue;
      runs.push_back(&run);
      if (run.at("world_size") == 1) singles.push_back(&run);
    }
  }
  if (singles.empty()) {
    throw InputError(fmt::format("{}: no 1-rank run to calibrate compute from (add 1 to --ranks)",
                                 o.results.empty() ? std::string("results") : o.results.front()));
  }
  // The 1-rank run closest to `batch`, preferring num_workers 0 (its decoding cost is on the
  // critical path, as it is when ranks share one CPU) and a strategy without a reducer (whose
  // 1-rank step is plain SGD, without staging the batch for a scatter).
  auto calibration_run = [&](double batch) {
    const nlohmann::json* best = nullptr;
    auto score = [&](const nlohmann::json* r) {
      return std::abs(std::log(r->at("global_batch").get<double>() / batch)) * 100.0 +
             (r->at("config").value("num_workers", 0) == 0 ? 0.0 : 1.0) +
             (run_strategy(*r).has_reducer ? 0.5 : 0.0);
    };
    for (const auto* r : singles) {
      if (best == nullptr || score(r) < score(best)) best = r;
    }
    return best;
  };
  auto compute_model = [](const nlohmann::json& run) {
    const auto& ph = run.at("phases_s");
    StepModel m;
    m.per_sample_compute_s = (ph.at("data_wait").get<double>() + ph.at("h2d").get<double>() +
                              ph.at("forward").get<double>() + ph.at("backward").get<double>()) /
                             run.at("global_batch").get<double>();
    m.optimizer_s = ph.at("optimizer").get<double>();
    m.param_bytes = run.at("num_params").get<double>() * 4.0;
    m.sample_bytes = run.value("input_features", 0.0) * 4.0;
    m.logit_bytes = run.value("num_classes", 0.0) * 4.0;
    return m;
  };
  const double largest_batch = (*std::max_element(singles.begin(), singles.end(), [](auto* a, auto* b) {
                                 return a->at("global_batch").template get<double>() <
                                        b->at("global_batch").template get<double>();
                               }))->at("global_batch").get<double>();
  const double b = o.per_rank_batch > 0 ? o.per_rank_batch : largest_batch;
  const nlohmann::json* base = calibration_run(b);
  StepModel model = compute_model(*base);

  std::vector<double> exposed;
  std::optional<double> link_busbw;
  int busbw_ranks = std::numeric_limits<int>::max();
  std::string busbw_source;
  for (const auto* run : runs) {
    if (run->at("world_size").get<int>() < 2) continue;
    // The exposed share of communication that may overlap backward, from the runs all of whose
    // communication may (DDP's buckets).
    const double comm = run->at("phases_s").at("comm").get<double>();
    if (run_projection(*run).overlapped_share == 1.0 && comm > 0) {
      exposed.push_back(std::min(1.0, run->at("phases_s").at("comm_exposed").get<double>() / comm));
    }
    const auto busbw = run_busbw(*run);
    if (busbw && run->at("world_size").get<int>() < busbw_ranks) {
      busbw_ranks = run->at("world_size").get<int>();
      link_busbw = *busbw;
      busbw_source = run->contains("bus_bandwidth_GBps")
                         ? run->at("bus_bandwidth_GBps").value("collective", std::string("collective"))
                         : std::string("all-reduce");
    }
  }
  if (!exposed.empty()) model.exposed_fraction = median(exposed);

  LinkModel link;
  if (o.link != "measured") {
    link = link_preset(o.link);
  } else if (collectives != nullptr) {
    auto measured = link_from_collectives(*collectives, model.param_bytes);
    if (!measured) throw InputError(fmt::format("{}: no BM_AllReduce results with busbw", o.collectives));
    link = *measured;
  } else if (link_busbw) {
    link = {"measured", 0.0, 1.0 / (*link_busbw * 1e9),
            fmt::format("the result's own {} busbw {:.2f} GB/s at {} ranks (alpha not measured: 0)",
                        busbw_source, *link_busbw, busbw_ranks)};
  } else {
    throw InputError("--link measured: no bandwidth measured (pass --collectives from dpbench_collectives, "
                     "a result with a bus bandwidth (an allreduce run at 2+ ranks), or --link "
                     "pcie4|pcie5|nvlink4|ib-ndr)");
  }

  // Every strategy's curves; the crossover of each non-reference curve with the reference
  // strategy's default curve (its first): the world size from which the reference is more than
  // 5% slower.
  const auto& curves = projected_modes();
  const ProjectedCurve* reference = nullptr;
  for (const auto& c : curves) {
    if (reference == nullptr && c.strategy->reference) reference = &c;
  }
  nlohmann::json modes = nlohmann::json::array();
  std::vector<std::optional<int>> crossing(curves.size());
  for (const auto& c : curves) {
    modes.push_back({{"mode", c.mode.key}, {"strategy", c.strategy->name}, {"label", c.label},
                     {"transport", c.mode.transport}, {"reference", c.strategy->reference}});
  }
  nlohmann::json points = nlohmann::json::array();
  for (int p = 1; p <= o.max_ranks; p *= 2) {
    std::vector<double> step(curves.size());
    for (std::size_t i = 0; i < curves.size(); ++i) {
      const std::string& mode = curves[i].mode.key;
      const StepPrediction pred = predict_step(model, link, mode, p, b);
      const StepPrediction one = predict_step(model, link, mode, 1, b);
      const double speedup = (p * b / pred.step_s) / (b / one.step_s);
      points.push_back({{"world_size", p}, {"mode", mode}, {"step_time_s", pred.step_s},
                        {"compute_s", pred.compute_s}, {"comm_s", pred.comm_s},
                        {"throughput_samples_per_s", p * b / pred.step_s}, {"speedup", speedup},
                        {"efficiency", speedup / p}});
      step[i] = pred.step_s;
    }
    if (reference != nullptr && p >= 2) {
      const double t_ref = step[static_cast<std::size_t>(reference - curves.data())];
      for (std::size_t i = 0; i < curves.size(); ++i) {
        if (!curves[i].strategy->reference && !crossing[i] && t_ref > 1.05 * step[i]) crossing[i] = p;
      }
    }
    if (p > o.max_ranks / 2) break;
  }
  nlohmann::json crossovers = nlohmann::json::array();
  for (std::size_t i = 0; i < curves.size(); ++i) {
    if (reference == nullptr || curves[i].strategy->reference) continue;
    crossovers.push_back({{"mode", curves[i].mode.key}, {"reference", reference->mode.key},
                          {"world_size", crossing[i] ? nlohmann::json(*crossing[i]) : nlohmann::json()}});
  }

  // The model against every measured multi-rank run. Ranks of one CPU share it: each gets 1/p.
  nlohmann::json measured = nlohmann::json::array();
  for (const auto* run : runs) {
    const int p = run->at("world_size").get<int>();
    if (p < 2) continue;
    const bool cpu = run->at("device") == "cpu";
    const double B = run->at("global_batch").get<double>();
    const int workers = run->at("config").value("num_workers", 0);
    StepModel local = compute_model(*calibration_run(B));
    local.exposed_fraction = model.exposed_fraction;
    const StepPrediction pred =
        predict_step(local, link, run_projection(*run).key, p, B / p, cpu ? 1.0 / p : 1.0);
    const double actual = run->at("step_time_s").at("p50").get<double>();
    // Ranks time-sliced on too few cores, or GPU ranks sharing a device, do not run the way
    // the model assumes (each rank its own compute, communication over the link).
    const bool virtual_ranks = run->value("virtual_ranks", false);
    const bool applies = cpu ? (cores == 0 || p <= cores) : !virtual_ranks;
    std::string note;
    if (!applies) {
      note = cpu ? fmt::format("{} ranks on {} cores: time-sliced, the model does not apply", p, cores)
                 : fmt::format("{} virtual ranks shared the GPUs: the model does not apply", p);
    }
    measured.push_back({{"world_size", p}, {"mode", run_projection(*run).key}, {"global_batch", B},
                        {"num_workers", workers},
                        {"step_time_s", actual}, {"predicted_step_time_s", pred.step_s},
                        {"relative_error", pred.step_s / actual - 1.0}, {"model_applies", applies},
                        {"note", note}});
  }

  nlohmann::json doc;
  doc["schema"] = {{"name", "dpbench-projection"}, {"version", 1}};
  doc["created"] = utc_timestamp();
  doc["link"] = {{"name", link.name}, {"alpha_s", link.alpha_s}, {"beta_s_per_byte", link.beta_s_per_byte},
                 {"bandwidth_GBps", 1e-9 / link.beta_s_per_byte}, {"source", link.source}};
  doc["calibration"] = {{"result_files", o.results},
                        {"calibration_run", {{"mode", base->at("mode")}, {"global_batch", base->at("global_batch")},
                                             {"num_workers", base->at("config").value("num_workers", 0)}}},
                        {"per_sample_compute_s", model.per_sample_compute_s},
                        {"optimizer_s", model.optimizer_s}, {"param_bytes", model.param_bytes},
                        {"sample_bytes", model.sample_bytes}, {"logit_bytes", model.logit_bytes},
                        {"exposed_fraction", model.exposed_fraction}, {"per_rank_batch", b},
                        {"scaling", "weak: every rank keeps per_rank_batch samples"}};
  doc["modes"] = modes;
  doc["points"] = points;
  doc["crossovers"] = crossovers;
  // The first non-reference curve's crossover, for readers of version 1 files (which had only
  // allreduce's); `crossovers` has every curve's.
  doc["crossover_world_size"] = crossovers.empty() ? nlohmann::json() : crossovers.front()["world_size"];
  doc["measured"] = measured;
  return doc;
}

int project_command(const ProjectOptions& o) {
  std::vector<nlohmann::json> docs;
  for (const auto& path : o.results) {
    docs.push_back(read_json(path, "result file"));
    if (docs.back().value("schema", nlohmann::json::object()).value("name", "") != kSchemaName) {
      throw InputError(fmt::format("{}: not a dpbench result file", path));
    }
  }
  std::optional<nlohmann::json> gb;
  if (!o.collectives.empty()) gb = read_json(o.collectives, "Google Benchmark JSON");
  const nlohmann::json doc = project(o, docs, gb ? &*gb : nullptr);

  fmt::print("link: {} ({:.2f} GB/s, alpha {:.2f} us): {}\n", doc["link"]["name"].get<std::string>(),
             doc["link"]["bandwidth_GBps"].get<double>(), 1e6 * doc["link"]["alpha_s"].get<double>(),
             doc["link"]["source"].get<std::string>());
  const std::size_t n_modes = doc["modes"].size();
  if (!o.quiet) {
    fmt::print("\n{:>6}", "ranks");
    for (const auto& m : doc["modes"]) fmt::print("  {:>14}", m["mode"].get<std::string>());
    fmt::print("   (step ms / scaling efficiency)\n");
    for (std::size_t i = 0; i + n_modes <= doc["points"].size(); i += n_modes) {
      fmt::print("{:>6}", doc["points"][i]["world_size"].get<int>());
      for (std::size_t k = 0; k < n_modes; ++k) {
        const auto& pt = doc["points"][i + k];
        fmt::print("  {:>8.3f} {:>4.0f}%", 1e3 * pt["step_time_s"].get<double>(),
                   100.0 * pt["efficiency"].get<double>());
      }
      fmt::print("\n");
    }
  }
  fmt::print("\n");
  for (const auto& c : doc["crossovers"]) {
    const auto mode = c["mode"].get<std::string>();
    const auto ref = c["reference"].get<std::string>();
    if (c["world_size"].is_null()) {
      fmt::print("{} does not overtake {} by 5% up to {} ranks\n", mode, ref, o.max_ranks);
    } else {
      fmt::print("{} overtakes {} (by more than 5%) from {} ranks\n", mode, ref, c["world_size"].get<int>());
    }
  }
  for (const auto& m : doc["measured"]) {
    fmt::print("measured {:>13} at {} ranks, batch {:>4}, workers {}: {:.3f} ms, model {:.3f} ms ({:+.0f}%){}\n",
               m["mode"].get<std::string>(), m["world_size"].get<int>(), m["global_batch"].get<int>(),
               m["num_workers"].get<int>(), 1e3 * m["step_time_s"].get<double>(),
               1e3 * m["predicted_step_time_s"].get<double>(), 100.0 * m["relative_error"].get<double>(),
               m["model_applies"].get<bool>() ? "" : "  (" + m["note"].get<std::string>() + ")");
  }
  const std::string out = o.out.empty() ? default_out_path("projection") : o.out;
  write_json_atomic(out, doc);
  fmt::print("projection written to {}\n", out);
  return 0;
}

}  // namespace dpbench
