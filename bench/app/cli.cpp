#include "bench/app/cli.hpp"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>
#include <exception>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/app/run_command.hpp"
#include "core/error.hpp"
#include "core/training.hpp"

namespace dpbench {

namespace {

void add_run_options(CLI::App& run, RunOptions& o) {
  TrainConfig& c = o.base;
  run.add_option("--workload", c.workload, "Model to train: mlp (Linear/ReLU stack)")->capture_default_str();
  run.add_option("--mode", o.modes,
                 "Synchronisation modes to compare, comma list: ps (DataParallel: reducer rank 0 "
                 "sums gradients, steps the optimizer, broadcasts parameters) and allreduce "
                 "(DistributedDataParallel: bucketed ring all-reduce overlapping backward)")
      ->delimiter(',')
      ->capture_default_str();
  run.add_option("--transport", c.transport,
                 "ps only: collective (reduce + broadcast, as DataParallel over NCCL) or p2p "
                 "(every worker sends to / receives from the reducer: incast)")
      ->capture_default_str();
  run.add_option("--ranks,--world-size", c.world_size,
                 "world_size: number of ranks (in-process threads, one replica each)")
      ->capture_default_str();
  run.add_option("--device", c.device, "auto, cpu or cuda (auto picks CUDA when usable, else CPU)")
      ->capture_default_str();
  run.add_option("--comm", c.comm, "Communicator backend: local (dpbench's own ring and chain collectives)")
      ->capture_default_str();
  run.add_option("--batch-size", c.global_batch,
                 "Global batch: samples per optimizer step summed over all ranks (allreduce gives "
                 "each rank batch-size / ranks; ps scatters it in chunks of ceil(batch/ranks))")
      ->capture_default_str();
  run.add_option("--epochs", c.epochs, "Passes over the training set")->capture_default_str();
  run.add_option("--max-steps", c.max_steps, "Stop after this many optimizer steps in total (-1: no cap)")
      ->capture_default_str();
  run.add_option("--warmup-steps", c.warmup_steps, "Steps excluded from timing statistics")
      ->capture_default_str();
  run.add_option("--lr", c.lr, "SGD learning rate")->capture_default_str();
  run.add_option("--momentum", c.momentum, "SGD momentum (PyTorch semantics, dampening 0)")
      ->capture_default_str();
  run.add_option("--weight-decay", c.weight_decay, "SGD weight decay (L2)")->capture_default_str();
  run.add_option("--seed", c.seed,
                 "Seed of the initial parameters (broadcast from rank 0) and of the "
                 "DistributedSampler shuffle (seed + epoch)")
      ->capture_default_str();
  run.add_option("--hidden", c.hidden, "Hidden layer widths of the MLP, comma list")
      ->delimiter(',')
      ->capture_default_str();
  run.add_option("--bucket-cap-mb", c.bucket_cap_mb,
                 "allreduce: DDP bucket_cap_mb, gradient bucket size in MiB (first bucket 1 MiB)")
      ->capture_default_str();
  run.add_option("--num-workers", c.loader.num_workers,
                 "DataLoader num_workers per loading rank: worker threads (0 = load on the training thread)")
      ->capture_default_str();
  run.add_option("--prefetch-factor", c.loader.prefetch_factor,
                 "DataLoader prefetch_factor: batches loaded in advance per worker")
      ->capture_default_str();
  run.add_option("--data", o.data, "fashion-mnist (Debian's dataset-fashion-mnist) or synthetic")
      ->capture_default_str();
  run.add_option("--data-dir", o.data_dir,
                 "Directory of the Fashion-MNIST .gz files (default: $DPBENCH_DATA_DIR, else "
                 "/usr/share/datasets/fashion-mnist)");
  run.add_option("--input", o.input_shape, "synthetic: sample shape CxHxW, e.g. 3x224x224")
      ->capture_default_str();
  run.add_option("--classes", o.classes, "synthetic: number of classes")->capture_default_str();
  run.add_option("--synthetic-samples", o.synthetic_samples, "synthetic: training samples")
      ->capture_default_str();
  run.add_option("--timeout", o.timeout_s,
                 "Seconds a rank waits for its peers before the whole run is aborted")
      ->capture_default_str();
  run.add_option("--out,-o", o.out, "Result JSON path (default results/dpbench-run-<time>.json)");
  run.add_flag("--no-eval", [&c](std::int64_t) { c.evaluate = false; }, "Skip the test-set evaluation");
  run.add_flag("--quiet,-q", o.quiet, "Only print the table");
}

}  // namespace

int dpbench_main(int argc, char** argv) {
  CLI::App app{
      "dpbench: what does a DataParallel parameter server cost against ring all-reduce, and why?\n"
      "Without a subcommand, runs `dpbench run` with its defaults (the MLP on Fashion-MNIST, 4 "
      "CPU ranks, ps and allreduce side by side)."};
  app.name("dpbench");
  app.require_subcommand(0, 1);
  RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run", "The main job: train one workload under each mode with the same seed, data and global "
             "batch; print a comparison table and write one result JSON");
  add_run_options(*run, options);

  // `dpbench --ranks 8 ...` means `dpbench run --ranks 8 ...`: the main job is the default.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0].rfind("-", 0) == 0 && args[0] != "-h" && args[0] != "--help") {
    args.insert(args.begin(), "run");
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes the arguments back to front

  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    fmt::print(stderr, "dpbench: {}\n", e.what());
    return 2;
  }

  try {
    return run_command(options);
  } catch (const InputError& e) {
    fmt::print(stderr, "dpbench: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "dpbench: failed: {}\n", e.what());
    return 1;
  }
}

}  // namespace dpbench
