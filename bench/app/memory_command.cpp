#include "bench/app/memory_command.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/app/name_options.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}  // namespace

void add_memory_options(CLI::App& app, MemoryOptions& o) {
  add_names_option(app, "--modes,--mode", o.modes, &parse_mode, "Modes, comma list (default: every one)");
  app.add_option("--ranks", o.ranks, "World sizes, comma list")->delimiter(',')->capture_default_str();
  app.add_option("--batch-size", o.base.global_batch, "Global batch (split over the ranks)")->capture_default_str();
  app.add_option("--optimizer", o.base.optimizer.name, "sgd, adam or adamw")->capture_default_str();
  add_name_option(app, "--transport", o.base.transport, &parse_transport, "ps, sharded_ps: collective or p2p");
  for (const Strategy& strategy : strategies()) {  // their options that shape a memory model
    if (strategy.add_memory_options != nullptr) strategy.add_memory_options(app, o.base);
  }
  app.add_option("--workload", o.base.model.workload,
                 "Built-in model: mlp, cnn or dlrm (with its --tables, --rows, ...)")
      ->capture_default_str();
  app.add_option("--hidden", o.base.model.hidden, "Built-in model: hidden widths")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--model", o.model,
                 "A described model: a built-in description's name (" +
                     fmt::format("{}", fmt::join(builtin_model_names(), ", ")) +
                     ") or a file models/describe.py wrote; its parameter count, saved activation, input and "
                     "output bytes per sample replace --params and the --*-bytes-per-sample options");
  app.add_option("--params", o.params, "A model described by its size: parameter count (e.g. 335e6)");
  app.add_option("--activation-bytes-per-sample", o.activation_bytes_per_sample,
                 "With --params: activation bytes one sample keeps for backward (fp32)");
  app.add_option("--input-bytes-per-sample", o.input_bytes_per_sample,
                 "With --params: a sample's input bytes and label")
      ->capture_default_str();
  app.add_option("--output-bytes-per-sample", o.output_bytes_per_sample,
                 "With --params: a sample's output (logit) bytes")
      ->capture_default_str();
  app.add_flag("--mixed-precision", o.mixed_precision,
               "A projection of mixed-precision training (fp16 weights, gradients and activations, fp32 master "
               "weights with the optimizer state); without it, fp32 as dpbench trains");
  app.add_option("--capacity-gb", o.capacity_gb,
                 "With --params: the largest parameter count each mode fits in this many GB");
  app.add_option("--out,-o", o.out, "Write the dpbench-memory JSON here");
}

int memory_command(const MemoryOptions& given) {
  const nlohmann::json doc = memory_document(given);
  const MemoryOptions o = with_described_sizes(given);
  const std::string what = o.params > 0 ? fmt::format("{:.4g}", o.params) : o.base.model.workload;
  fmt::print("memory model: {}{} parameters, global batch {}, {}, {}\n",
             o.model.empty() ? "" : fmt::format("{} (described), ", o.model), what, o.base.global_batch,
             o.base.optimizer.name, doc["precision"].get<std::string>());
  double most = 0;
  for (const auto& r : doc["rows"]) most = std::max(most, r["total_bytes"].get<double>());
  const bool gib = most >= kGiB;  // MiB for the small built-in models
  const double unit = gib ? kGiB : kGiB / 1024.0;
  fmt::print("{:>11} {:>5} {:>8} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10}   ({})\n", "mode", "ranks", "role",
             "params", "grads", "optimizer", "activations", "comm", "data", "total", gib ? "GiB" : "MiB");
  for (const auto& r : doc["rows"]) {
    fmt::print("{:>11} {:>5} {:>8} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.3f} {:>10.3f} {:>10.3f} {:>10.3f}\n",
               r["mode"].get<std::string>(), r["world_size"].get<int>(), r["role"].get<std::string>(),
               r["parameters"].get<double>() / unit, r["gradients"].get<double>() / unit,
               r["optimizer_state"].get<double>() / unit, r["activations"].get<double>() / unit,
               r["comm_buffers"].get<double>() / unit, r["data_staging"].get<double>() / unit,
               r["total_bytes"].get<double>() / unit);
  }
  for (const auto& f : doc["largest_fitting"]) {
    fmt::print("{} at {} ranks fits up to {:.3g} parameters in {:g} GB\n", f["mode"].get<std::string>(),
               f["world_size"].get<int>(), f["largest_params"].get<double>(), o.capacity_gb);
  }
  if (!o.out.empty()) {
    write_json_atomic(o.out, doc);
    fmt::print("memory model written to {}\n", o.out);
  }
  return 0;
}

}  // namespace dpbench
