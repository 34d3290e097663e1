// libFuzzer target: `dpbench run`'s option parsing, as the command does it: CLI11 with
// add_run_options (bench/app/cli.hpp) on fuzzer-made arguments, then finish_run_options
// (--rank-batch -> global batch and world size), then the checks run_command makes before it
// loads data (modes, device, check_common_options, --input CxHxW, and check_point against a
// small synthetic training set). Input: the arguments after `dpbench run`, separated by NUL bytes
// as in argv. CLI::ParseError and dpbench's InputError are the expected refusals; anything else
// escaping, a crash or a failed FUZZ_CHECK is a bug.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench/app/cli.hpp"
#include "harness/harness.hpp"
#include "registry/strategies.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "fuzz/fuzz_check.hpp"
#include "workloads/synthetic.hpp"

namespace {

// 1000 samples of 1x4x4, 2 classes: what check_point validates a point against.
const dpbench::Dataset& tiny_train_set() {
  static const std::unique_ptr<dpbench::Dataset> ds = dpbench::make_synthetic_dataset(dpbench::SampleShape{1, 4, 4}, 2,
                                                                                      1000, 1);
  return *ds;
}

// run_command's checks before it loads data, on the options as parsed.
void check_like_run_command(const dpbench::RunOptions& o) {
  using namespace dpbench;
  if (o.modes.empty()) throw InputError("--mode: give at least one mode");
  const DeviceChoice device = choose_device(o.device, o.base.comm == Backend::mpi);
  check_common_options(o.base, o.timeout_s);
  if (o.data.data == "synthetic") parse_sample_shape(o.data.input_shape);
  for (const auto& mode : o.modes) {
    TrainConfig cfg = o.base;
    cfg.mode = mode;
    cfg.device = device.device;
    check_point(cfg, tiny_train_set());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::string> args(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == '\0') {
      args.emplace_back();
    } else {
      args.back().push_back(static_cast<char>(data[i]));
    }
  }
  if (size == 0) args.clear();
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments back to front

  CLI::App app{"dpbench run"};
  dpbench::RunOptions o;
  dpbench::add_run_options(app, o);
  try {
    app.parse(args);
    dpbench::finish_run_options(app, o);
    check_like_run_command(o);
  } catch (const CLI::ParseError&) {
    return 0;
  } catch (const dpbench::InputError&) {
    return 0;
  }
  // Accepted: the numbers run_command goes on to use are in range.
  const auto& c = o.base;
  FUZZ_CHECK(c.world_size >= 1 && c.global_batch >= 1);
  FUZZ_CHECK(o.timeout_s > 0 && o.timeout_s * 1000.0 < static_cast<double>(std::numeric_limits<long>::max()));
  if (!c.rank_batches.empty()) {
    unsigned __int128 sum = 0;
    for (std::size_t b : c.rank_batches) sum += b;
    FUZZ_CHECK(sum == c.global_batch);
    FUZZ_CHECK(c.rank_batches.size() == static_cast<std::size_t>(c.world_size));
  }
  return 0;
}
