#include "bench/app/project_command.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/held_out.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"

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

// A machine block's field as text: a string as it is, null or missing as "?", else its JSON.
std::string field_text(const nlohmann::json& m, const char* key) {
  const auto it = m.find(key);
  if (it == m.end() || it->is_null()) return "?";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

}  // namespace

// --simulate and the topology it plays on (analysis/simulated_projection.hpp).
void add_topology_options(CLI::App& app, TopologyOptions& o) {
  app.add_flag("--simulate", o.simulate,
               "Also simulate every point: each mode's step schedule played by SimGrid on the topology below");
  app.add_option("--ranks-per-node", o.ranks_per_node, "--simulate: ranks (GPUs) per node")->capture_default_str();
  app.add_option("--node-link", o.node_link,
                 "--simulate: each node's NIC, each way, in tc's units (400gbit); default: the projection's link");
  app.add_option("--intra-link", o.intra_link,
                 "--simulate: each rank's link inside its node (default: NVLink 4, 370 GB/s; on the calibration "
                 "files' emulated link, their probe of a node's local ranks where a run has one)")
      ->capture_default_str();
  app.add_option("--nodes-per-leaf", o.nodes_per_leaf,
                 "--simulate: nodes per leaf switch of a two-level tree (0: one switch)")
      ->capture_default_str();
  app.add_option("--oversubscription", o.oversubscription,
                 "--simulate: a leaf's nodes' bandwidth over its uplink's (1: non-blocking)")
      ->capture_default_str();
  app.add_option("--node-link-of", o.node_link_of, "--simulate: I=RATE, node I's NIC (a straggler, a fat server)");
  app.add_option("--topology", o.preset,
                 "--simulate: a datasheet node: dgx-h100, h100-8gpu-400g, a100-pcie-8gpu-100g (sets --ranks-per-node, "
                 "--intra-link and --node-link where not given)");
  app.add_option("--platform", o.platform_file,
                 "--simulate: a SimGrid platform file (XML) instead of the options above; rank r on its r-th host in "
                 "natural name order")
      ->check(CLI::ExistingFile);
  app.add_option("--nccl-algo", o.nccl_algo,
                 "--simulate: NCCL_ALGO of allreduce's all-reduce: ring (the flat ring) or tree (NCCL's double "
                 "binary tree over the nodes, a chain inside each, pipelined in 4 MiB chunks)")
      ->check(CLI::IsMember({"ring", "tree"}))
      ->capture_default_str();
  app.add_flag("--what-if", o.what_if,
               "--simulate: also simulate every point with non-blocking uplinks and with the last node's NIC at half "
               "its rate, and name where oversubscription reorders the modes and what the straggler costs each");
}

void add_project_options(CLI::App& app, ProjectOptions& o) {
  app.add_option("results", o.results, "dpbench result or sweep files (one needs a 1-rank run); or --model")
      ->check(CLI::ExistingFile);
  app.add_option("--model", o.model,
                 "Project a described model instead of measured runs: a built-in description (" +
                     fmt::format("{}", fmt::join(builtin_model_names(), ", ")) +
                     ") or a describer's file. Its tensors cut DDP's buckets, its layer times place their ready "
                     "points, and its compute is rescaled to --device-profile; weak scaling at --per-rank-batch "
                     "(default 8); needs --link-model PRESET or an H100 --topology (nvlink4)");
  app.add_option("--device-profile", o.device_profile,
                 "--model: the device its described times are rescaled to: " +
                     fmt::format("{}", fmt::join(device_profile_names(), ", ")) +
                     " (default: h100 with an H100 --topology, else described)");
  app.add_option("--link-model", o.link_model,
                 "measured: a link between processes (--collectives' inter-process all-reduce, else the "
                 "files' emulated cluster link, else their GPU or gloo/mpi runs' busbw); memory: the "
                 "in-process copies of thread ranks; or a preset: pcie4, pcie5, nvlink4, ib-ndr")
      ->capture_default_str();
  app.add_option("--collectives", o.collectives,
                 "Google Benchmark JSON of dpbench_collectives: measured alpha and busbw")
      ->check(CLI::ExistingFile);
  app.add_option("--max-ranks", o.max_ranks, "Largest world size projected")->capture_default_str();
  app.add_option("--scaling", o.scaling,
                 "strong (default: the calibration run's global batch split over the ranks, as "
                 "--batch-size splits it) or weak (every rank keeps --per-rank-batch)");
  app.add_option("--per-rank-batch", o.per_rank_batch,
                 "Samples per rank per step: weak scaling (default with --scaling weak: the "
                 "calibration run's batch)");
  app.add_option("--out,-o", o.out, "Projection JSON path (default results/dpbench-projection-<time>.json)");
  app.add_flag("--quiet,-q", o.quiet, "Only print the summary");
  add_topology_options(app, o.topology);
  app.add_option("--held-out", o.held_out,
                 "--simulate: emulated-cluster result or sweep files the projection is not calibrated on: each run "
                 "predicted on its own cluster's setting (nodes, ranks per node, link rates) and compared with its "
                 "measured step; exit 1 when one is off by more than --max-error")
      ->check(CLI::ExistingFile);
  app.add_option("--host-profile", o.host_profile_path,
                 "--simulate: a host profile (dpbench profile) of the machine the emulated runs were measured on: "
                 "where no calibration file probed a node's local ranks, their link is the profile's")
      ->check(CLI::ExistingFile);
  app.add_option_function<double>(
         "--max-error", [&o](double percent) { o.max_error = percent / 100.0; },
         "--held-out: the largest |error| of a held-out run, in percent")
      ->default_str("15");
}

namespace {

// The curves' table: step ms and scaling efficiency of each mode per world size.
void print_curves(const nlohmann::json& doc) {
  const std::size_t n_curves = doc["curves"].size();
  fmt::print("\n{:>6}", "ranks");
  for (const auto& c : doc["curves"]) fmt::print("  {:>14}", c["curve"].get<std::string>());
  fmt::print("   (step ms / scaling efficiency{})\n", doc.contains("topology") ? "; below each, simulated ms" : "");
  for (std::size_t i = 0; i + n_curves <= doc["points"].size(); i += n_curves) {
    fmt::print("{:>6}", doc["points"][i]["world_size"].get<int>());
    for (std::size_t k = 0; k < n_curves; ++k) {
      const auto& pt = doc["points"][i + k];
      fmt::print("  {:>8.3f} {:>4.0f}%", 1e3 * pt["step_time_s"].get<double>(), 100.0 * pt["efficiency"].get<double>());
    }
    fmt::print("\n");
    if (!doc.contains("topology")) continue;
    fmt::print("{:>6}", "sim");
    for (std::size_t k = 0; k < n_curves; ++k) {
      const auto& sim = doc["points"][i + k]["simulation"];
      fmt::print("  {:>14}", sim.contains("simulated_step_s")
                                 ? fmt::format("{:.3f}", 1e3 * sim["simulated_step_s"].get<double>())
                                 : std::string("-"));
    }
    fmt::print("\n");
  }
}

// The crossovers, then every measured run against the model, with its error.
void print_summary(const nlohmann::json& doc) {
  for (const auto& f : doc.value("findings", nlohmann::json::array())) fmt::print("{}\n", f["text"].get<std::string>());
  const int largest = doc["points"].empty() ? 1 : doc["points"].back()["world_size"].get<int>();
  for (const auto& c : doc["crossovers"]) {
    const auto curve = c["curve"].get<std::string>();
    const auto ref = c["baseline"].get<std::string>();
    if (c["world_size"].is_null()) {
      fmt::print("{} does not overtake {} by 5% up to {} ranks\n", curve, ref, largest);
    } else {
      fmt::print("{} overtakes {} (by more than 5%) from {} ranks\n", curve, ref, c["world_size"].get<int>());
    }
  }
  for (const auto& m : doc["measured"]) {
    std::string tail = m["on_curve"].get<bool>() ? "  [on the curves' setting]" : "";
    if (!m["model_applies"].get<bool>()) tail += "  (" + m["note"].get<std::string>() + ")";
    const std::string model = m["predicted_step_time_s"].is_null()
                                  ? std::string("no model value")
                                  : fmt::format("model {:.3f} ms ({:+.0f}%)",
                                                1e3 * m["predicted_step_time_s"].get<double>(),
                                                100.0 * m["relative_error"].get<double>());
    fmt::print("measured {:>13} at {} ranks, batch {:>4}, workers {}, link {}: {:.3f} ms, {}{}\n",
               m["curve"].get<std::string>(), m["world_size"].get<int>(), m["global_batch"].get<int>(),
               m["num_workers"].get<int>(), m["link"].get<std::string>(), 1e3 * m["step_time_s"].get<double>(), model,
               tail);
  }
}

// Each held-out run against its prediction, then how many are beyond --max-error.
void print_held_out(const nlohmann::json& h) {
  fmt::print("\nheld out (predicted from the calibration files alone; error = predicted / measured - 1):\n");
  fmt::print("{:>30} {:>6} {:>6} {:>10} {:>16} {:>13} {:>13} {:>9}\n", "run", "batch", "nodes", "link", "straggler",
             "measured ms", "predicted ms", "error");
  for (const auto& r : h["runs"]) {
    const std::string straggler = r["node_link_of"].empty() ? "-"
                                                            : fmt::format("{}", fmt::join(r["node_link_of"], ","));
    const std::string nodes = fmt::format("{}x{}", r["nodes"].get<int>(), r["ranks_per_node"].get<int>());
    fmt::print("{:>30} {:>6} {:>6} {:>10} {:>16} {:>13.2f} ", r["label"].get<std::string>(),
               r["global_batch"].get<double>(), nodes, r["node_link"].get<std::string>(), straggler,
               1e3 * r["measured_step_s"].get<double>());
    if (r.contains("unavailable")) {
      fmt::print("{:>13} {:>9}  ({})\n", "-", "-", r["unavailable"].get<std::string>());
      continue;
    }
    fmt::print("{:>13.2f} {:>+8.1f}%{}\n", 1e3 * r["predicted_step_s"].get<double>(),
               100 * r["relative_error"].get<double>(), r["within"].get<bool>() ? "" : "  beyond");
  }
  fmt::print("held out: {} runs, median |error| {:.1f} %, largest {:.1f} %; {} beyond {:.0f} %\n", h["runs"].size(),
             100 * h["median_abs_error"].get<double>(), 100 * h["max_abs_error"].get<double>(), h["beyond"].get<int>(),
             100 * h["max_error"].get<double>());
}

// The projection's host profile (topology.host_profile): where it was made, its figures, what it
// was used for, and a warning when it describes another CPU or core count than the calibration's.
void print_host_profile(const nlohmann::json& doc) {
  const auto& h = doc["topology"]["host_profile"];
  const auto& m = h["machine"];
  fmt::print("host profile: {} ({}; made {} on {}, {} cores, host {}): a node's local ranks {:.1f} MB/s, round trip "
             "{:.1f} us; used for: {}\n",
             h["path"].get<std::string>(), h.value("source", "--host-profile"), h["created"].get<std::string>(),
             field_text(m, "cpu_model"), field_text(m, "cpu_cores"), field_text(m, "host"),
             1e-6 * h["intra_node"]["bytes_per_s"].get<double>(), 1e6 * h["intra_node"]["round_trip_s"].get<double>(),
             h["used_for"].empty() ? std::string("nothing (the files have their own)")
                                   : fmt::format("{}", fmt::join(h["used_for"], ", ")));
  if (const auto& shared = doc["topology"].value("ranks_sharing_cores", nlohmann::json()); shared.is_object()) {
    std::vector<std::string> points;
    for (const auto& point : shared["points"]) {
      std::vector<std::string> costs;
      for (const auto& [kind, o_s] : point["overhead_s"].items()) {
        costs.push_back(fmt::format("{} {:.3f} ms", kind, 1e3 * o_s.get<double>()));
      }
      points.push_back(fmt::format("at {} ranks {}", point["ranks"].get<int>(), fmt::join(costs, ", ")));
    }
    fmt::print("ranks sharing the host's {} cores: per message between nodes {}; from none at {} ranks, piecewise "
               "linear in the ranks\n",
               shared["cores"].get<int>(), fmt::join(points, "; "), shared["from_ranks"].get<int>());
  }
  if (!h["same_machine_as_calibration"].get<bool>()) {
    fmt::print("warning: the host profile was made on another CPU or core count than the calibration run "
               "({}, {} cores): it describes another host\n",
               field_text(doc["calibration"]["machine"], "cpu_model"),
               field_text(doc["calibration"]["machine"], "cpu_cores"));
  }
}

// The host's reductions the simulation played (calibration.reduction): each size's rate, and
// where they came from.
void print_reduction(const nlohmann::json& reduction) {
  std::vector<std::string> rates;
  for (const auto& r : reduction["rates"]) {
    rates.push_back(fmt::format("{:.3g} GB/s at {:.0f} KiB", 1e-9 * r["bytes_per_s"].get<double>(),
                                r["bytes"].get<double>() / 1024));
  }
  fmt::print("the host's reductions (played where a collective sums what it receives): {}; from {}\n",
             fmt::join(rates, ", "), reduction["source"].get<std::string>());
}

std::vector<nlohmann::json> read_result_files(const std::vector<std::string>& paths) {
  std::vector<nlohmann::json> docs;
  for (const auto& path : paths) {
    docs.push_back(read_json(path, "result file"));
    if (docs.back().value("schema", nlohmann::json::object()).value("name", "") != kSchemaName) {
      throw InputError(fmt::format("{}: not a dpbench result file", path));
    }
  }
  return docs;
}

}  // namespace

int project_command(const ProjectOptions& given) {
  if (!given.held_out.empty() && !given.topology.simulate) {
    throw InputError("--held-out: held-out runs are judged against the simulation; give --simulate");
  }
  ProjectOptions o = given;
  if (!o.host_profile_path.empty()) o.host_profile = read_host_profile(o.host_profile_path);
  const std::vector<nlohmann::json> docs = read_result_files(o.results);
  // Without --host-profile, the profile the first calibration file's run was given, if any.
  for (std::size_t i = 0; i < docs.size() && !o.host_profile && o.topology.simulate && o.model.empty(); ++i) {
    o.host_profile = recorded_host_profile(docs[i], o.results[i]);
  }
  std::vector<HeldOutFile> held_out;
  for (std::size_t i = 0; i < o.held_out.size(); ++i) {
    held_out.push_back({o.held_out[i], read_result_files({o.held_out[i]}).front()});
  }
  std::optional<nlohmann::json> gb;
  if (!o.collectives.empty()) gb = read_json(o.collectives, "Google Benchmark JSON");
  nlohmann::json doc = project(o, docs, gb ? &*gb : nullptr);
  if (!held_out.empty()) doc["held_out"] = validate_held_out(o, docs, held_out, o.max_error);

  fmt::print("link: {} [{}] ({:.3g} GB/s, alpha {:.2f} us): {}\n", doc["link"]["name"].get<std::string>(),
             doc["link"]["kind"].get<std::string>(), doc["link"]["bandwidth_GBps"].get<double>(),
             1e6 * doc["link"]["alpha_s"].get<double>(), doc["link"]["source"].get<std::string>());
  fmt::print("scaling: {}\n", doc["scaling"]["text"].get<std::string>());
  if (doc["calibration"].contains("machine")) {
    const auto& m = doc["calibration"]["machine"];
    const auto text = [&m](const char* key) { return field_text(m, key); };
    fmt::print("calibrated on: {}, {} cores, host {}, dpbench {} ({})\n", text("cpu_model"), text("cpu_cores"),
               text("host"), text("dpbench_version"), text("git_commit"));
  }
  if (doc.contains("topology") && doc["topology"].contains("host_profile")) print_host_profile(doc);
  if (doc["calibration"].contains("reduction")) print_reduction(doc["calibration"]["reduction"]);
  if (doc["calibration"].contains("described_model")) {
    const auto& m = doc["calibration"]["described_model"];
    fmt::print("model: {} ({:.4g} parameters), described on {}, rescaled x{:.3g} to {}: {}\n",
               m["name"].get<std::string>(), m["num_params"].get<double>(), m["timed_on"].get<std::string>(),
               m["time_scale"].get<double>(), m["device_profile"].get<std::string>(),
               m["device_profile_source"].get<std::string>());
  }
  if (!o.quiet) print_curves(doc);
  fmt::print("\n");
  print_summary(doc);
  if (doc.contains("held_out")) print_held_out(doc["held_out"]);
  const std::string out = o.out.empty() ? default_out_path("projection") : o.out;
  write_json_atomic(out, doc);
  fmt::print("projection written to {}\n", out);
  if (doc.contains("held_out") && doc["held_out"]["beyond"].get<int>() > 0) {
    fmt::print(stderr, "dpbench: {} held-out run(s) off by more than {:.0f} %\n", doc["held_out"]["beyond"].get<int>(),
               100 * o.max_error);
    return 1;
  }
  return 0;
}

}  // namespace dpbench
