#include "bench/app/cli.hpp"

#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/app/history_command.hpp"
#include "bench/app/memory_command.hpp"
#include "bench/app/name_options.hpp"
#include "bench/app/profile_command.hpp"
#include "bench/app/project_command.hpp"
#include "analysis/simulated_projection.hpp"
#include "bench/app/run_command.hpp"
#include "registry/strategies.hpp"
#include "workloads/criteo.hpp"
#include "bench/app/sweep_command.hpp"
#include "cluster/cluster_job.hpp"
#include "cluster/link.hpp"
#include "core/error.hpp"
#include "launch/resolve.hpp"
#include "core/mpi_comm.hpp"
#include "train/models.hpp"
#include "train/training.hpp"

extern char** environ;

namespace dpbench {

namespace {

// The optimizer's options, torch.optim's names and defaults.
void add_optimizer_options(CLI::App& app, TrainConfig& config) {
  app.add_option("--optimizer", config.optimizer.name,
                 "sgd (with momentum), adam or adamw: torch.optim.SGD / Adam / AdamW semantics")
      ->capture_default_str();
  app.add_option(
         "--lr", config.optimizer.lr,
         "Learning rate (sgd: 0.1, cnn 0.05; adam and adamw: 1e-3, PyTorch's default; torch.optim.SGD has none)")
      ->capture_default_str();
  app.add_option("--momentum", config.optimizer.momentum, "sgd: momentum (PyTorch semantics, dampening 0)")
      ->capture_default_str();
  app.add_option("--weight-decay", config.optimizer.weight_decay,
                 "Weight decay: L2 added to the gradient (sgd, adam), decoupled (adamw)")
      ->capture_default_str();
  app.add_option_function<std::vector<float>>(
         "--betas",
         [&config](const std::vector<float>& b) {
    if (b.size() != 2) throw CLI::ValidationError("--betas", "two values: beta1,beta2");
    config.optimizer.beta1 = b[0];
    config.optimizer.beta2 = b[1];
         },
         "adam, adamw: coefficients of the running averages of the gradient and its square")
      ->delimiter(',')
      ->default_str("0.9,0.999");
  app.add_option("--eps", config.optimizer.eps, "adam, adamw: term added to the denominator")->default_str("1e-08");
}

// The node hierarchy, which every mode takes.
void add_hierarchy_option(CLI::App& app, TrainConfig& config) {
  add_name_option(app, "--hierarchy", config.hierarchy, &parse_hierarchy,
                  "none (the flat collectives over every rank) or node (reduce inside each node first, one ring per "
                  "local rank across the nodes: allreduce's all-reduce, sharded_ps's push and pull, ps's reduce and "
                  "broadcast; collective transport, host buffers)");
}

// The model's shape (--hidden, --channels, --sync-bn), the node hierarchy and each strategy's own
// options (Strategy::add_options: DDP's buckets and hook, sharded_ps's servers and staleness), for
// add_shared_options.
void add_model_and_mode_options(CLI::App& app, TrainConfig& config) {
  app.add_option("--model", config.model.described,
                 "Replay a described model instead of training --workload: a built-in description (" +
                     fmt::format("{}", fmt::join(builtin_model_names(), ", ")) +
                     ") or a file models/describe.py wrote. Real parameter, gradient and optimizer buffers of its "
                     "shapes and its gradient-ready order; each layer's compute a wait of its described time; "
                     "synthetic data of its input shape; loss and accuracy are not the model's");
  app.add_option("--device-profile", config.model.device_profile,
                 "--model: rescale the described compute times to this device: " +
                     fmt::format("{}", fmt::join(device_profile_names(), ", ")) +
                     " (the description's FLOPs at the profile's rate)")
      ->capture_default_str();
  app.add_option("--time-scale", config.model.replay_time_scale,
                 "--model: multiply every compute time by this factor as well (time dilation: e.g. 100 with "
                 "links given at the target's rate / 100)")
      ->capture_default_str();
  app.add_option("--hidden", config.model.hidden,
                 "Hidden layer widths of the MLP, comma list (cnn: the width of its one hidden "
                 "linear layer, default 128)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--channels", config.model.channels, "cnn: output channels of its two 3x3 conv layers")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--sync-bn", config.model.sync_bn,
               "cnn, allreduce mode: SyncBatchNorm (statistics all-gathered across ranks, gradient "
               "sums all-reduced) instead of per-rank BatchNorm statistics");
  add_hierarchy_option(app, config);
  // Each strategy's own options (its config section's), from its folder.
  for (const Strategy& strategy : strategies()) {
    if (strategy.add_options != nullptr) strategy.add_options(app, config);
  }
}

// The dlrm workload's sizes and gradients (workloads/dlrm.hpp), for the training commands and
// `memory`; apply_dlrm_options checks them.
void add_dlrm_shape_options(CLI::App& app, DlrmShape& shape) {
  app.add_option("--tables", shape.tables, "dlrm: embedding tables (one embedding bag each)")->capture_default_str();
  app.add_option("--rows", shape.rows, "dlrm: rows of each embedding table")->capture_default_str();
  app.add_option("--embedding-dim", shape.dim, "dlrm: embedding dimension (also the bottom MLP's output width)")
      ->capture_default_str();
  app.add_option("--lookups", shape.lookups, "dlrm: indices per table per sample, sum-pooled (the pooling factor)")
      ->capture_default_str();
  app.add_option("--dense-features", shape.dense_features, "dlrm: dense features per sample")->capture_default_str();
  app.add_option("--bottom-mlp", shape.bottom, "dlrm: hidden widths of the bottom MLP, comma list (then the dim)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--top-mlp", shape.top, "dlrm: hidden widths of the top MLP, comma list (then 2 logits)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_flag("--sparse-grad", shape.sparse_grad,
               "dlrm: sparse embedding gradients (nn.EmbeddingBag(sparse=True)): sharded_ps pulls only a batch's "
               "rows from their servers and pushes only their gradients; allreduce all-gathers every rank's rows "
               "(DDP over gloo); ps's root gathers every rank's rows and scatters them back; the tables step with "
               "--embedding-optimizer");
  app.add_option("--embedding-optimizer", shape.embedding_optimizer,
                 "dlrm --sparse-grad: the tables' optimizer, sgd (torch.optim.SGD without momentum) or adagrad "
                 "(torch.optim.Adagrad on a sparse gradient, eps 1e-10), at --lr; the dense layers take --optimizer")
      ->check(CLI::IsMember({"sgd", "adagrad"}))
      ->capture_default_str();
}

// The dlrm options and its click logs' index distribution (workloads/click_logs.hpp), for
// add_shared_options.
void add_dlrm_options(CLI::App& app, DlrmShape& shape, ClickLogOptions& logs) {
  add_dlrm_shape_options(app, shape);
  app.add_option_function<double>(
      "--zipf-alpha",
      [&logs](double alpha) {
    if (!(alpha > 0 && std::isfinite(alpha)))
      throw InputError(fmt::format("--zipf-alpha {}: must be a number > 0", alpha));
    logs.zipf_alpha = alpha;
      },
      "dlrm: draw each table's indices from a Zipf(alpha) law over its rows (alpha > 0; e.g. 1.05), as FBGEMM's "
      "benchmark requests do; default: uniform");
}

// The data a training command reads: --data and the options of each source.
void add_data_options(CLI::App& app, DataOptions& d) {
  app.add_option("--data", d.data,
                 "fashion-mnist (Debian's dataset-fashion-mnist) or synthetic; with --workload dlrm click-logs "
                 "(synthetic) or criteo (--raw-data-file)")
      ->capture_default_str();
  app.add_option("--raw-data-file", d.raw_data_file,
                 "dlrm: Criteo's raw click logs (the Kaggle set's train.txt, a Terabyte day_N: label, 13 integer, 26 "
                 "hexadecimal fields a line, tab-separated), as facebookresearch/dlrm reads them with "
                 "--max-ind-range --rows; the last seventh of the lines is held out. Implies --data criteo");
  app.add_option("--data-dir", d.data_dir,
                 "Directory of the Fashion-MNIST .gz files (default: $DPBENCH_DATA_DIR, else "
                 "/usr/share/datasets/fashion-mnist)");
  app.add_option("--input", d.input_shape, "synthetic: sample shape CxHxW, e.g. 3x224x224")->capture_default_str();
  app.add_option("--classes", d.classes, "synthetic: number of classes")->capture_default_str();
  app.add_option("--synthetic-samples", d.synthetic_samples, "synthetic: training samples")->capture_default_str();
}

// How long a run trains and what it records on the way: epochs, steps, warm-up, and the targets
// and evaluations of quality.
void add_run_length_options(CLI::App& app, RunLength& run) {
  app.add_option("--epochs", run.epochs, "Passes over the training set (cnn: 3 unless given)")->capture_default_str();
  app.add_option("--max-steps", run.max_steps, "Stop after this many optimizer steps in total (-1: no cap)")
      ->capture_default_str();
  app.add_option("--warmup-steps", run.warmup_steps, "Steps excluded from timing statistics")->capture_default_str();
  app.add_option("--target-loss", run.target_loss,
                 "Record the time to this training loss: the first step whose mean loss over the last 10 steps is at "
                 "or below it, and rank 0's wall time from the first step to its end (quality.time_to_target_loss)")
      ->check(CLI::PositiveNumber);
  app.add_option("--test-freq", run.test_freq,
                 "Evaluate the test set after every N steps, between steps and left out of the timed figures "
                 "(quality.test_curve); 0: after the last step only")
      ->capture_default_str();
  app.add_option("--target-auc", run.target_auc,
                 "Record the time to this test AUC: the first --test-freq evaluation at or above it "
                 "(quality.time_to_target_auc; --workload dlrm)");
}

// Options every training command shares (not the ones a sweep varies).
void add_shared_options(CLI::App& app, TrainConfig& config, std::optional<DeviceKind>& device, DataOptions& d,
                        double& timeout_s, std::string& out, bool& quiet) {
  app.add_option_function<std::string>(
         "--device", [&device](const std::string& text) { device = parse_device_request(text); },
         "auto, cpu or cuda (auto picks CUDA when usable, else CPU)")
      ->default_str("auto");
  add_run_length_options(app, config.run);
  add_optimizer_options(app, config);
  app.add_option("--seed", config.seed,
                 "Seed of the initial parameters (broadcast from rank 0) and of the "
                 "DistributedSampler shuffle (seed + epoch)")
      ->capture_default_str();
  add_model_and_mode_options(app, config);
  add_dlrm_options(app, config.model.dlrm, d.click_logs);
  app.add_option("--prefetch-factor", config.loader.prefetch_factor,
                 "DataLoader prefetch_factor: batches loaded in advance per worker")
      ->capture_default_str();
  app.add_flag("--persistent-workers", config.loader.persistent_workers,
               "DataLoader persistent_workers: keep the worker threads alive between epochs");
  app.add_flag_callback(
      "--pin-memory", [&d] { d.pin_memory = 1; },
      "DataLoader pin_memory: page-locked staging for asynchronous host-to-device "
      "copies, each step's batch loaded and copied on its own stream while the step "
      "before computes (default on with --device cuda; no effect when training on CPU)");
  app.add_flag_callback(
      "--no-pin-memory", [&d] { d.pin_memory = 0; },
      "Copy batches to the GPU from pageable memory (synchronous copies, no prefetch)");
  add_name_option(app, "--precision", config.precision, &parse_precision,
                  "cuda: cuBLAS math for the GEMMs, tf32 (tensor cores, PyTorch's allow_tf32) or fp32");
  app.add_option("--decode-cost-us", config.loader.decode_cost_us,
                 "Emulated decoding: every loaded sample costs this many microseconds of the loading "
                 "thread's CPU time, so the effect of --num-workers is measurable")
      ->capture_default_str();
  app.add_option("--crop-padding", config.loader.crop_padding,
                 "Augmentation: random crop with this zero padding (torchvision RandomCrop; 0 = off), "
                 "seeded per sample so results do not depend on --num-workers")
      ->capture_default_str();
  app.add_flag("--hflip", config.loader.hflip, "Augmentation: random horizontal flip (p = 0.5), seeded per sample");
  add_data_options(app, d);
  app.add_option("--timeout", timeout_s, "Seconds a rank waits for its peers before the whole run is aborted")
      ->capture_default_str();
  app.add_option("--out,-o", out, "Result JSON path (default results/dpbench-<command>-<time>.json)");
  app.add_flag(
      "--no-eval", [&config](std::int64_t) { config.evaluate = false; }, "Skip the test-set evaluation");
  app.add_flag("--quiet,-q", quiet, "Only print the table / summary");
}

// "ps (DataParallel: ...) and allreduce (DistributedDataParallel: ...)", from the registry.
std::string mode_help() {
  std::string text;
  const auto& list = strategies();
  for (std::size_t i = 0; i < list.size(); ++i) {
    text += fmt::format("{}{} ({})",
                        i == 0                 ? ""
                        : i + 1 == list.size() ? " and "
                                               : ", ",
                        list[i].mode, list[i].description);
  }
  return text;
}

// What --transport means, for the strategies that take one (their `transports` trait).
std::string transport_help() {
  std::string modes;
  for (const auto& s : strategies()) {
    if (!s.transports.empty()) modes += (modes.empty() ? "" : ", ") + std::string(name(s.mode));
  }
  return modes + " only: collective (ps: reduce + broadcast, as DataParallel over NCCL; sharded_ps: "
                 "reduce-scatter + all-gather) or p2p (send/recv between every worker and the root or "
                 "servers: incast)";
}

// The optimizer's options that do nothing with the chosen optimizer are errors: --momentum with
// adam or adamw, --betas or --eps with sgd. Without --lr, adam and adamw take PyTorch's 1e-3.
void check_optimizer_options(const CLI::App& app, TrainConfig& config) {
  const bool sgd = config.optimizer.name == "sgd";
  // torch.optim.Adam's and AdamW's default learning rate; SGD has none in PyTorch and keeps 0.1.
  if (!sgd && app.count("--lr") == 0) config.optimizer.lr = 1e-3f;
  if (!sgd && app.count("--momentum") > 0) {
    throw InputError(fmt::format("--momentum: sgd's option; --optimizer {} has --betas", config.optimizer.name));
  }
  for (const char* name : {"--betas", "--eps"}) {
    if (sgd && app.count(name) > 0) {
      throw InputError(
          fmt::format("{}: adam's and adamw's option; give --optimizer adam or adamw (sgd takes --momentum)", name));
    }
  }
}

// --nodes and its companions: parsed and checked, and the options that cannot go with them.
void finish_cluster_options(const CLI::App& run, RunOptions& o) {
  const bool any = run.count("--link") + run.count("--link-of") + run.count("--ranks-per-node") +
                       run.count("--launcher") + run.count("--rdzv-backend") + run.count("--max-restarts") >
                   0;
  if (o.cluster.nodes == 0) {
    if (any) {
      throw InputError("--link, --link-of, --ranks-per-node, --launcher, --rdzv-backend and --max-restarts describe "
                       "an emulated cluster: give --nodes N");
    }
    return;
  }
  o.cluster.launcher = parse_cluster_launcher(o.launcher, "--launcher");
  // The ranks of --launcher tcp get --init-method tcp://... and --rank from the cluster; the world
  // size is the cluster's.
  if (run.count("--init-method") + run.count("--rank") > 0 && !o.cluster_rank) {
    throw InputError("--init-method and --rank: an emulated cluster's launcher gives each rank its own "
                     "(--launcher tcp: tcp:// to node 0 and --rank; --launcher file: file://PATH and --rank)");
  }
  if (o.cluster.launcher != Launcher::torchrun && run.count("--rdzv-backend") + run.count("--max-restarts") > 0) {
    throw InputError("--rdzv-backend and --max-restarts are torchrun's: give --launcher torchrun");
  }
  if (o.link.empty())
    throw InputError(fmt::format("--nodes {}: give the links' rate with --link RATE (e.g. 1gbit)", o.cluster.nodes));
  const double dilation = o.base.model.time_dilation;
  o.cluster.link = cluster::parse_rate(o.link, "--link", 100e9 * dilation);
  cluster::validate(o.cluster);
  cluster::parse_link_of(o.link_of, o.cluster);
  if (dilation != 1) {  // --time-scale D: links given at the target's rate, shaped at rate / D
    cluster::dilate(o.cluster, dilation);
  }
  // mpirun's ranks meet over MPI, the others' over gloo.
  const Backend comm = cluster_backend(o.cluster.launcher);
  if (run.count("--comm") > 0 && o.base.comm != comm) {
    throw InputError(fmt::format("--comm {}: an emulated cluster's ranks are processes on separate hosts that "
                                 "meet over gloo (--comm gloo, the default with --nodes) or, with --launcher "
                                 "mpirun, over MPI (--comm mpi)",
                                 name(o.base.comm)));
  }
  if (o.ranks_given && o.base.world_size != o.cluster.world_size()) {
    throw InputError(fmt::format("--ranks {}: --nodes {} x --ranks-per-node {} makes {} ranks", o.base.world_size,
                                 o.cluster.nodes, o.cluster.ranks_per_node, o.cluster.world_size()));
  }
  if (explicit_init(o.cluster.launcher)) {
    o.base.world_size = o.cluster.world_size();
    o.ranks_given = true;
  }
  if (o.base.device == DeviceKind::cuda)
    throw InputError("--nodes: an emulated cluster trains on the CPU (--device cpu)");
  if (!o.reference.framework.empty()) throw InputError("--nodes: not with --reference");
  o.base.comm = comm;
}

}  // namespace

// The emulated cluster's options of `run` (group "Emulated cluster").
static void add_cluster_options(CLI::App& run, RunOptions& o) {
  run.add_option("--nodes", o.cluster.nodes,
                 "Emulated cluster: run the job on N nodes of this machine (network namespaces on one "
                 "bridge, each with its own hostname and a link shaped by tc), ranks as gloo processes "
                 "started the torchrun way; needs --link")
      ->group("Emulated cluster");
  run.add_option("--link", o.link,
                 "Emulated cluster: every node's link rate, both directions, in tc's units "
                 "(100mbit, 1gbit, 10gbit)")
      ->group("Emulated cluster");
  run.add_option("--link-of", o.link_of,
                 "Emulated cluster: one node's own rate, NODE=RATE (e.g. 2=100mbit for a "
                 "straggler, 0=10gbit for a fat root link); repeatable")
      ->group("Emulated cluster");
  run.add_option("--ranks-per-node", o.cluster.ranks_per_node, "Emulated cluster: ranks (processes) per node")
      ->capture_default_str()
      ->group("Emulated cluster");
  run.add_option("--launcher", o.launcher,
                 "Emulated cluster: env (each rank a process given torchrun's variables), tcp (each rank a "
                 "process given --init-method tcp://NODE0:PORT --rank R, PyTorch's explicit form), file (the same "
                 "with --init-method file://PATH, a file every node sees), torchrun (one "
                 "torchrun agent per node, --nnodes N --nproc_per_node K, meeting at a rendezvous on node 0), "
                 "mpirun (Open MPI, its daemons started in the nodes; --comm mpi) or srun (Slurm: slurmctld on "
                 "node 0, a slurmd in every node, the job started with srun; needs root)")
      ->capture_default_str()
      ->group("Emulated cluster");
  run.add_option("--rdzv-backend", o.cluster.rdzv_backend,
                 "Emulated cluster, --launcher torchrun: the rendezvous, c10d (its store in node 0's agent) or "
                 "etcd (etcd-server with --enable-v2 on node 0; needs etcd-server and python3-etcd)")
      ->capture_default_str()
      ->group("Emulated cluster");
  run.add_option("--max-restarts", o.cluster.max_restarts,
                 "Emulated cluster, --launcher torchrun: torchrun's --max_restarts; a node whose agent was killed "
                 "is started again as often (as a cluster's scheduler would)")
      ->capture_default_str()
      ->group("Emulated cluster");
}

// `run`'s checkpoints (--checkpoint-dir, --checkpoint-every, --resume) and its PyTorch reference
// (--reference and its interpreter and start bundle).
void add_checkpoint_and_reference_options(CLI::App& run, RunOptions& o) {
  TrainConfig& config = o.base;
  run.add_option("--checkpoint-dir", config.checkpoint.dir,
                 "Directory of checkpoints: parameters, optimizer state (momentum), BatchNorm buffers, "
                 "the step reached and the per-step losses, written atomically with a CRC-32 (rank 0; "
                 "sharded_ps: one shard per server). One --mode");
  run.add_option("--checkpoint-every", config.checkpoint.every,
                 "Write a checkpoint after every N optimizer steps (with --checkpoint-dir)");
  run.add_flag("--resume", config.checkpoint.resume,
               "Continue from the newest valid checkpoint in --checkpoint-dir (a damaged one is skipped "
               "with a warning; none there: start from step 0)");
  run.add_option("--reference", o.reference.framework,
                 "Train each mode's PyTorch counterpart too, from the same parameters on the same samples "
                 "in the same order, alternating with dpbench's runs, in the same result file: pytorch "
                 "(bench/reference/pytorch_reference.py; DataParallel's flow over gloo for ps, DDP over gloo "
                 "for allreduce, the RPC parameter server for ps p2p and sharded_ps, plain PyTorch for one rank)")
      ->check(CLI::IsMember({"pytorch"}));
  run.add_option("--reference-python", o.reference.python,
                 "Python interpreter for --reference (default /usr/bin/python3, Debian's, with python3-torch)");
  run.add_option("--reference-start", o.reference.start_dir,
                 "Keep the start bundle --reference writes (parameters, data, sample order) in this directory "
                 "(default: a temporary directory, removed at the end)");
}

void add_run_options(CLI::App& run, RunOptions& o) {
  TrainConfig& config = o.base;
  run.add_option("--workload", config.model.workload,
                 "Model to train: mlp (Linear/ReLU stack), cnn ([conv3x3-BatchNorm-ReLU-maxpool] x2, "
                 "linear, linear) or dlrm (bottom MLP, embedding bags, dot interaction, top MLP; on click logs)")
      ->capture_default_str();
  run.add_option("--rank-batch", config.rank_batches,
                 "Uneven split: samples per rank per step, comma list (e.g. 96,96,32,32 for GPUs of "
                 "different speed); the global batch is their sum; gradients are weighted by each "
                 "rank's sample count")
      ->delimiter(',');
  add_names_option(run, "--mode", o.modes, &parse_mode,
                   std::string("Synchronisation modes to compare, comma list: ") + mode_help());
  add_name_option(run, "--transport", config.transport, &parse_transport, transport_help());
  run.add_option("--ranks,--world-size", config.world_size,
                 "world_size: number of ranks (in-process threads, one replica each)")
      ->capture_default_str();
  run.add_option("--init-method", o.init.init_method,
                 "PyTorch's init_process_group(init_method=...), one command per process: tcp://ADDR:PORT "
                 "(rank 0 listens there; with --rank R and --world-size N), file://PATH (the ranks meet "
                 "through a file every process sees; with --rank R and --world-size N) or env:// (MASTER_ADDR, "
                 "MASTER_PORT, and RANK, WORLD_SIZE unless --rank, --world-size give them); --comm gloo "
                 "or nccl. LOCAL_RANK and LOCAL_WORLD_SIZE, when set, place the rank on its node");
  run.add_option("--rank", o.init.rank, "This process's rank, with --init-method (0 to world_size - 1)")
      ->check(CLI::NonNegativeNumber);
  add_name_option(run, "--comm", config.comm, &parse_backend,
                  "Communicator backend: local (in-process ranks over dpbench's own ring and chain "
                  "collectives), mpi (one rank per process: mpirun -np N dpbench run --comm mpi) or "
                  "gloo (one rank per process, torchrun's RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT)");
  run.add_option("--batch-size", config.global_batch,
                 "Global batch: samples per optimizer step summed over all ranks (allreduce and "
                 "sharded_ps give each rank batch-size / ranks; ps scatters it in chunks of "
                 "ceil(batch/ranks))")
      ->capture_default_str();
  run.add_option("--num-workers", config.loader.num_workers,
                 "DataLoader num_workers per loading rank: worker threads (0 = load on the training thread)")
      ->capture_default_str();
  run.add_option("--save-params", o.save_params,
                 "Write rank 0's final parameters of each mode to PREFIX-<mode>.f32 (raw float32, "
                 "parameter order), to compare runs, backends or launches");
  run.add_option("--init-params", o.init_params,
                 "Start from these parameters instead of the model's initialisation from --seed: raw "
                 "float32 in parameter order, as --save-params writes them");
  add_checkpoint_and_reference_options(run, o);
  run.add_option("--host-profile", o.host_profile,
                 "This machine's host profile (`dpbench profile`), recorded in the result (env.host_profile): "
                 "`project --simulate` on the file then plays it without --host-profile");
  run.add_option("--repetitions", o.repetitions,
                 "Runs of every mode, the modes alternating; the verdict gives each ratio to ps with its "
                 "spread over them (--checkpoint-dir and --reference run once)")
      ->capture_default_str();
  add_cluster_options(run, o);
  add_shared_options(run, config, o.device, o.data, o.timeout_s, o.out, o.quiet);
}

void apply_described_model(const CLI::App& app, TrainConfig& config, DataOptions& data) {
  // (bench/app/cli.hpp says what it sets)
  const auto given = [&app](const char* name) {
    const CLI::Option* o = app.get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  if (config.model.described.empty()) {
    for (const char* o : {"--time-scale", "--device-profile"}) {
      if (given(o)) throw InputError(fmt::format("{}: applies to a replayed model; give --model", o));
    }
    return;
  }
  if (!(config.model.replay_time_scale > 0) || !std::isfinite(config.model.replay_time_scale)) {
    throw InputError(fmt::format("--time-scale {}: must be a positive number", config.model.replay_time_scale));
  }
  if (given("--workload") || given("--workloads")) {
    throw InputError(fmt::format("--model {} and --workload: give one (--model replays a description, --workload "
                                 "trains a built-in model)",
                                 config.model.described));
  }
  const std::shared_ptr<const ModelDescription> d = described_model(config.model.described);
  for (const char* o : {"--input", "--classes"}) {
    if (given(o)) throw InputError(fmt::format("{}: --model {} sets it from its description", o, d->name));
  }
  if (given("--data") && data.data != "synthetic") {
    throw InputError(
        fmt::format("--data {}: --model {} replays on synthetic data of its input shape", data.data, d->name));
  }
  data.data = "synthetic";
  const std::size_t floats = (d->input_bytes + sizeof(float) - 1) / sizeof(float);
  const auto& s = d->input_shape;
  const bool image = s.size() == 3 && s[0] * s[1] * s[2] == floats;
  data.input_shape = image ? fmt::format("{}x{}x{}", s[0], s[1], s[2]) : fmt::format("{}", floats);
  data.classes = static_cast<int>(d->output_features());
  config.evaluate = false;  // a replay's accuracy is not the model's
  if (!given("--max-steps")) config.run.max_steps = 20;
  if (!given("--batch-size") && !given("--rank-batch")) config.global_batch = std::max(1, config.world_size);
  config.model.time_dilation = config.model.replay_time_scale;  // 1 again unless on an emulated cluster
  config.model.replay_time_scale *= profile_time_scale(*d, device_profile(config.model.device_profile));
}

// --data criteo / --raw-data-file: Criteo's shape (13 dense features, 26 tables of one lookup),
// which --dense-features, --tables and --lookups may only repeat. Throws InputError naming the
// option.
template <typename Given>
void apply_criteo_shape(const Given& given, TrainConfig& config, DataOptions& data) {
  if (given("--data") && data.data != "criteo") {
    throw InputError(fmt::format("--raw-data-file: reads Criteo's click logs, not --data {}", data.data));
  }
  if (data.raw_data_file.empty()) throw InputError("--data criteo: give Criteo's file with --raw-data-file PATH");
  if (given("--zipf-alpha")) throw InputError("--zipf-alpha: draws synthetic click logs; Criteo's ids are the file's");
  DlrmShape& shape = config.model.dlrm;
  const std::pair<const char*, std::pair<std::size_t*, std::size_t>> fixed[] = {
      {"--dense-features", {&shape.dense_features, kCriteoDenseFeatures}},
      {"--tables", {&shape.tables, kCriteoTables}},
      {"--lookups", {&shape.lookups, 1}}};
  for (const auto& [option, field] : fixed) {
    if (given(option) && *field.first != field.second) {
      throw InputError(fmt::format("{} {}: a Criteo line has {} (leave it out)", option, *field.first, field.second));
    }
    *field.first = field.second;
  }
  data.data = "criteo";
}

void apply_dlrm_options(const CLI::App& app, TrainConfig& config, DataOptions& data) {
  // (bench/app/cli.hpp says what it sets)
  const auto given = [&app](const char* name) {
    const CLI::Option* o = app.get_option_no_throw(name);
    return o != nullptr && o->count() > 0;
  };
  const char* own[] = {"--tables",       "--rows",    "--embedding-dim", "--lookups",     "--dense-features",
                       "--bottom-mlp",   "--top-mlp", "--zipf-alpha",    "--sparse-grad", "--embedding-optimizer",
                       "--raw-data-file"};
  if (config.model.workload != "dlrm") {
    for (const char* o : own) {
      if (given(o)) throw InputError(fmt::format("{}: applies to --workload dlrm", o));
    }
    if (data.data == "criteo" || data.data == "click-logs") {
      throw InputError(fmt::format("--data {}: click logs train --workload dlrm", data.data));
    }
    return;
  }
  check_dlrm_shape(config.model.dlrm);
  if (given("--embedding-optimizer") && !config.model.dlrm.sparse_grad) {
    throw InputError("--embedding-optimizer: the tables' own optimizer steps sparse gradients: give --sparse-grad "
                     "(dense embedding gradients step with --optimizer)");
  }
  for (const char* o : {"--input", "--classes", "--hidden", "--channels"}) {
    if (given(o)) throw InputError(fmt::format("{}: --workload dlrm sets its shape with --tables, --rows, ...", o));
  }
  if (given("--raw-data-file") || (given("--data") && data.data == "criteo")) {
    apply_criteo_shape(given, config, data);
  } else if (given("--data") && data.data != "click-logs") {
    throw InputError(
        fmt::format("--data {}: --workload dlrm trains on click logs (--data click-logs, or criteo)", data.data));
  } else {
    data.data = "click-logs";
  }
  config.model.dlrm.zipf_alpha = data.click_logs.zipf_alpha;
  data.click_log_shape = config.model.dlrm;
  data.input_shape = fmt::format("{}", config.model.dlrm.input_features());
  data.classes = 2;
}

// --sparse-grad runs the strategies that have a sparse path (Strategy::sparse_grad): one line
// naming `option` when another is among the modes.
void check_sparse_grad_modes(const TrainConfig& config, const std::vector<Mode>& modes, const char* option) {
  if (!config.model.dlrm.sparse_grad) return;
  std::vector<std::string> sparse;
  for (const Strategy& s : strategies()) {
    if (s.sparse_grad) sparse.emplace_back(name(s.mode));
  }
  for (const Mode mode : modes) {
    if (find_strategy(mode).sparse_grad) continue;
    throw InputError(
        fmt::format("--sparse-grad: {} has no sparse path yet (give {} {})", mode, option, fmt::join(sparse, ",")));
  }
}

void finish_run_options(const CLI::App& run, RunOptions& o) {
  check_optimizer_options(run, o.base);
  apply_described_model(run, o.base, o.data);
  apply_dlrm_options(run, o.base, o.data);
  check_sparse_grad_modes(o.base, o.modes, "--mode");
  // Under mpirun the world size is the launcher's unless --ranks says otherwise.
  o.ranks_given = run.count("--ranks") > 0;
  o.repetitions_given = run.count("--repetitions") > 0;
  finish_cluster_options(run, o);
  if (run.count("--transport") > 0 &&
      std::none_of(o.modes.begin(), o.modes.end(), [](Mode m) { return !find_strategy(m).transports.empty(); })) {
    throw InputError(fmt::format("--transport {}: no mode of this run takes a transport ({}); drop it",
                                 o.base.transport, fmt::join(o.modes, ",")));
  }
  // The cnn's own defaults, where the options were not given: one hidden layer of 128, lr 0.05
  // and 3 epochs (the MLP's are 512,256, 0.1 and 2).
  if (o.base.model.workload == "cnn") {
    if (run.count("--hidden") == 0) o.base.model.hidden = {128};
    if (run.count("--lr") == 0 && o.base.optimizer.name == "sgd") o.base.optimizer.lr = 0.05f;
    if (run.count("--epochs") == 0) o.base.run.epochs = 3;
  }
  const TrainConfig& config = o.base;
  if (config.checkpoint.every < 0) {
    throw InputError(fmt::format("--checkpoint-every {}: must be positive", config.checkpoint.every));
  }
  if (config.checkpoint.dir.empty() && (config.checkpoint.every > 0 || config.checkpoint.resume)) {
    throw InputError(
        fmt::format("{}: needs --checkpoint-dir", config.checkpoint.resume ? "--resume" : "--checkpoint-every"));
  }
  if (!config.checkpoint.dir.empty()) {
    if (config.checkpoint.every == 0 && !config.checkpoint.resume) {
      throw InputError(
          fmt::format("--checkpoint-dir {}: give --checkpoint-every N, --resume, or both", config.checkpoint.dir));
    }
    if (o.modes.size() != 1) {
      throw InputError(fmt::format("--checkpoint-dir {}: checkpoints one mode; give one --mode (got {})",
                                   config.checkpoint.dir, fmt::join(o.modes, ",")));
    }
    if (!o.reference.framework.empty()) throw InputError("--checkpoint-dir: not with --reference");
  }
  // --rank-batch fixes the global batch (and the world size) unless they were given too.
  if (!o.base.rank_batches.empty()) {
    std::size_t sum = 0;  // may wrap; validate_config rejects such a list
    for (std::size_t b : o.base.rank_batches) sum += b;
    if (run.count("--batch-size") == 0) o.base.global_batch = sum;
    if (!o.ranks_given) {
      o.base.world_size = static_cast<int>(o.base.rank_batches.size());
      o.ranks_given = true;
    }
  }
  check_replay_fits(o.base, o.modes, o.data);
  if (!o.base.model.described.empty() && !o.repetitions_given) o.repetitions = 1;  // replays of large models are long
  if (o.cluster.nodes == 0) o.base.model.time_dilation = 1;                        // --time-scale scaled compute alone
}

namespace {

void add_sweep_variant_options(CLI::App& sweep, SweepOptions& o);

void add_sweep_options(CLI::App& sweep, SweepOptions& o) {
  o.base.run.epochs = 1;  // a sweep's points are short: one epoch, 60 steps, unless given
  o.base.run.max_steps = 60;
  sweep.add_option("--workloads,--workload", o.workloads, "Workloads, comma list (mlp, cnn; or dlrm alone)")
      ->delimiter(',')
      ->capture_default_str();
  add_names_option(sweep, "--comms,--comm", o.comms, &parse_backend, "Communicator backends, comma list");
  add_names_option(sweep, "--modes,--mode", o.modes, &parse_mode, std::string("Modes, comma list: ") + mode_help());
  add_names_option(sweep, "--transports,--transport", o.transports, &parse_transport,
                   std::string("Transports, comma list; ") + transport_help());
  sweep.add_option("--ranks,--world-sizes", o.ranks, "world_size values, comma list")
      ->delimiter(',')
      ->capture_default_str();
  sweep.add_option("--batch-sizes,--batch-size", o.batch_sizes, "Global batch sizes, comma list")
      ->delimiter(',')
      ->capture_default_str();
  sweep.add_option("--num-workers", o.num_workers, "DataLoader num_workers values, comma list")
      ->delimiter(',')
      ->capture_default_str();
  sweep.add_option("--repetitions", o.repetitions, "Runs of every point (for noise estimates)")->capture_default_str();
  sweep
      .add_option("--nodes", o.nodes,
                  "Emulated cluster: node counts, comma list (each point is a `dpbench run "
                  "--nodes N --link L`; see run --help)")
      ->delimiter(',')
      ->group("Emulated cluster");
  sweep.add_option("--links,--link", o.links, "Emulated cluster: link rates, comma list (100mbit,1gbit,10gbit)")
      ->delimiter(',')
      ->group("Emulated cluster");
  sweep.add_option("--ranks-per-node", o.ranks_per_node, "Emulated cluster: ranks per node, comma list")
      ->delimiter(',')
      ->capture_default_str()
      ->group("Emulated cluster");
  sweep
      .add_option("--launcher", o.launcher,
                  "Emulated cluster: how each point's ranks start (run --launcher): env, tcp, file, torchrun or srun "
                  "(gloo), mpirun (MPI)")
      ->capture_default_str()
      ->group("Emulated cluster");
  sweep.add_option("--host-profile", o.host_profile,
                   "This machine's host profile (`dpbench profile`), recorded in the result (env.host_profile), "
                   "as run --host-profile");
  add_shared_options(sweep, o.base, o.device, o.data, o.timeout_s, o.out, o.quiet);
  add_sweep_variant_options(sweep, o);
}

// The variants of a mode a sweep runs as axes (one job per value on an emulated cluster):
// allreduce's hooks, the node hierarchy, sharded_ps's staleness bound, the click logs' index law;
// and a straggler's link. Every axis follows the sweep's one convention, the plural with the
// singular as its alias and a comma list (`--modes,--mode`), so the run's singular options that
// add_shared_options registered give way to them.
void add_sweep_variant_options(CLI::App& sweep, SweepOptions& o) {
  for (const char* singular : {"--comm-hook", "--hierarchy", "--staleness", "--zipf-alpha"}) {
    sweep.remove_option(sweep.get_option(singular));
  }
  sweep
      .add_option_function<std::vector<std::string>>(
          "--comm-hooks,--comm-hook",
          [&o](const std::vector<std::string>& texts) {
    o.comm_hooks.clear();
    for (const auto& text : texts) o.comm_hooks.push_back(parse_comm_hook(text, "--comm-hooks"));
          },
          "allreduce: DDP communication hooks, comma list (allreduce, fp16, bf16, powersgd:R; see run --comm-hook); "
          "each hook but allreduce runs the allreduce mode alone, the other modes run with allreduce")
      ->delimiter(',');
  add_names_option(sweep, "--hierarchies,--hierarchy", o.hierarchies, &parse_hierarchy,
                   "Emulated cluster: node hierarchies, comma list (none, node; see run --hierarchy): one job per "
                   "value at every point, each mode in turn")
      ->group("Emulated cluster");
  sweep
      .add_option("--stalenesses,--staleness", o.stalenesses,
                  "sharded_ps: staleness bounds, comma list (see run --staleness): 0 runs every mode, a bound above 0 "
                  "sharded_ps alone (not under a --comm-hooks hook or --hierarchies node)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  sweep
      .add_option("--zipf-alphas,--zipf-alpha", o.zipf_alphas,
                  "dlrm: Zipf alphas of the click logs' indices, comma list (0: uniform; see run --zipf-alpha); more "
                  "than one value sweeps an emulated cluster (one job per value at every point)")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](const std::string& v) {
    double a = -1;
    return CLI::detail::lexical_cast(v, a) && a >= 0 && std::isfinite(a)
               ? std::string()
               : "Zipf alpha " + v + ": must be a number >= 0 (0: uniform indices)";
          },
          "ALPHA", "zipf alpha"));
  sweep
      .add_option("--link-of", o.link_of,
                  "Emulated cluster: one node's own rate in every job, NODE=RATE (run --link-of; e.g. 2=100mbit for a "
                  "straggler); repeatable")
      ->group("Emulated cluster");
}

// The options given to `app` that `run` takes too, as command-line arguments: every given option
// but those named in `skip` (long names without dashes), flags once per use.
std::vector<std::string> shared_arguments(const CLI::App& app, const std::vector<std::string>& skip) {
  std::vector<std::string> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->count() == 0 || opt->get_lnames().empty()) continue;
    const std::string& name = opt->get_lnames().front();
    if (std::find(skip.begin(), skip.end(), name) != skip.end()) continue;
    if (opt->get_expected_min() == 0) {  // a flag
      for (std::size_t i = 0; i < opt->count(); ++i) out.push_back("--" + name);
      continue;
    }
    for (const auto& value : opt->results()) {
      out.push_back("--" + name);
      out.push_back(value);
    }
  }
  return out;
}

// `sweep --nodes ...`: the axes that go with an emulated cluster checked, the options a `run` takes
// too passed on to each point's run. Throws InputError.
int network_sweep(const CLI::App& sweep, SweepOptions& o) {
  if (sweep.count("--ranks") > 0) {
    throw InputError("--ranks: with --nodes the world size is the node count x --ranks-per-node");
  }
  o.cluster_launcher = parse_cluster_launcher(o.launcher, "--launcher");
  if (sweep.count("--comms") > 0 && o.comms != std::vector<Backend>{cluster_backend(o.cluster_launcher)}) {
    throw InputError("--comms: an emulated cluster's ranks meet over gloo (--comms gloo, the default with --nodes) "
                     "or, with --launcher mpirun, over MPI (--comms mpi)");
  }
  if (sweep.count("--num-workers") == 0) o.num_workers = {0};
  o.shared_args = shared_arguments(sweep, {"help",        "workloads",      "comms",       "modes",       "transports",
                                           "ranks",       "batch-sizes",    "num-workers", "repetitions", "nodes",
                                           "links",       "ranks-per-node", "launcher",    "out",         "quiet",
                                           "comm-hooks",  "hierarchies",    "stalenesses", "link-of",     "zipf-alphas",
                                           "host-profile"});
  return network_sweep_command(o);
}

// `sweep` without --nodes: the emulated cluster's other options are refused, not ignored.
int local_sweep(const CLI::App& sweep, const SweepOptions& o) {
  if (sweep.count("--links") + sweep.count("--ranks-per-node") + sweep.count("--launcher") > 0) {
    throw InputError("--links, --ranks-per-node and --launcher describe an emulated cluster: give --nodes N,..");
  }
  if (std::find(o.hierarchies.begin(), o.hierarchies.end(), Hierarchy::node) != o.hierarchies.end()) {
    throw InputError("--hierarchies node: the node hierarchy needs nodes: give --nodes N,.. --ranks-per-node K,..");
  }
  if (sweep.count("--link-of") > 0 || o.zipf_alphas.size() > 1) {
    throw InputError("--link-of and more than one --zipf-alphas value sweep an emulated cluster: give --nodes N,.. "
                     "--links RATE,..");
  }
  return sweep_command(o);
}

// Where the Python tools live: $DPBENCH_HOME, else the source tree this binary was built from.
std::filesystem::path tool_path(const std::string& relative) {
  const char* home = std::getenv("DPBENCH_HOME");
  const std::filesystem::path root = home != nullptr ? home : DPBENCH_SOURCE_DIR;
  const auto path = root / relative;
  if (!std::filesystem::exists(path)) {
    throw InputError(fmt::format("{}: not found (set DPBENCH_HOME to the dpbench source tree)", path.string()));
  }
  return path;
}

// Runs Debian's python3 on one of the project's scripts and returns its exit code.
int run_python(const std::string& script, const std::vector<std::string>& args) {
  std::vector<std::string> argv_s = {"/usr/bin/python3", tool_path(script).string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    throw Error("cannot start /usr/bin/python3 (install python3-matplotlib, python3-scipy)");
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

// Ends MPI (when a command started it) and passes the exit code on.
int finish(int code) {
  MpiRuntime::finalize();
  return code;
}

}  // namespace

namespace {

// `report` and `compare`: Python scripts whose arguments are passed on as given.
std::pair<CLI::App*, CLI::App*> add_python_commands(CLI::App& app) {
  CLI::App* report = app.add_subcommand("report",
                                        "Result JSON to report.md and a self-contained report.html with plots "
                                        "(plots/report.py; arguments are passed on, see --help there)");
  report->allow_extras()->prefix_command();
  CLI::App* compare = app.add_subcommand(
      "compare", "BASE.json NEW.json: the CI regression gate (results/compare.py): deterministic "
                 "figures exactly, timings as in-run ratios above a noise floor; exit 1 on a regression");
  compare->allow_extras()->prefix_command();
  return {report, compare};
}

// `project`: --topology's preset fills the topology options the command line left unset, then
// the projection runs.
int project_main(const CLI::App& project, ProjectOptions& o) {
  std::size_t described = 0;
  for (const char* name : {"--ranks-per-node", "--intra-link", "--node-link", "--nodes-per-leaf", "--oversubscription",
                           "--node-link-of"}) {
    described += project.count(name);
  }
  o.topology.intra_link_given = project.count("--intra-link") > 0;
  apply_topology_preset(o.topology, project.count("--ranks-per-node") > 0, project.count("--intra-link") > 0,
                        project.count("--node-link") > 0, described > 0);
  return project_command(o);
}

// A --comm-hooks hook or --stalenesses bound that another strategy owns needs that strategy among
// the --modes. Throws InputError naming the value and the mode to add.
void check_axes_modes(const SweepOptions& o) {
  std::vector<std::pair<std::string, TrainConfig>> probes;  // (option as given, the value alone)
  for (const CommHook& hook : o.comm_hooks) {
    probes.emplace_back("--comm-hooks " + hook_name(hook), TrainConfig{});
    probes.back().second.allreduce.comm_hook = hook;
  }
  for (const int bound : o.stalenesses) {
    probes.emplace_back(fmt::format("--stalenesses {}", bound), TrainConfig{});
    probes.back().second.sharded_ps.staleness = bound;
  }
  for (const auto& [given, probe] : probes) {
    const auto owner = option_owner(probe);
    if (!owner || std::find(o.modes.begin(), o.modes.end(), owner->strategy->mode) != o.modes.end()) continue;
    throw InputError(fmt::format("{}: only {} has {}; add {} to --modes", given, owner->strategy->mode,
                                 owner->option.what, owner->strategy->mode));
  }
}

// `sweep`: the options that depend on what was given, then the in-process or the emulated
// cluster's sweep. Throws InputError.
int sweep_main(const CLI::App& sweep, SweepOptions& o) {
  o.cnn_default_hidden = sweep.count("--hidden") == 0;
  o.cnn_default_lr = sweep.count("--lr") == 0;
  check_optimizer_options(sweep, o.base);
  apply_described_model(sweep, o.base, o.data);
  if (std::find(o.workloads.begin(), o.workloads.end(), "dlrm") != o.workloads.end()) {
    if (o.workloads.size() > 1) {
      throw InputError(fmt::format("--workloads {}: dlrm trains on click logs, the others on images; sweep dlrm "
                                   "alone",
                                   fmt::join(o.workloads, ",")));
    }
    o.base.model.workload = "dlrm";
  }
  if (o.nodes.empty() && o.zipf_alphas.size() == 1) {  // the in-process sweep loads its data once: the data's law
    o.data.click_logs.zipf_alpha = o.zipf_alphas.front();
    o.zipf_alphas.clear();
  }
  apply_dlrm_options(sweep, o.base, o.data);
  check_sparse_grad_modes(o.base, o.modes, "--modes");
  check_axes_modes(o);
  return o.nodes.empty() ? local_sweep(sweep, o) : network_sweep(sweep, o);
}

// The command line's arguments after the program name; `dpbench --ranks 8 ...` means `dpbench
// run --ranks 8 ...`: the main job is the default.
std::vector<std::string> main_arguments(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0].rfind("-", 0) == 0 && args[0] != "-h" && args[0] != "--help") {
    args.insert(args.begin(), "run");
  }
  return args;
}

// Runs a command and turns what it throws into the exit codes: 2 for bad input (said by rank 0
// alone: every process of a job meets it), 3 for a file that could not be written, 1 otherwise.
template <typename Command>
int with_exit_codes(Command&& command) {
  try {
    return command();
  } catch (const InputError& e) {
    if (is_output_process()) fmt::print(stderr, "dpbench: error: {}\n", e.what());
    return finish(2);
  } catch (const IoError& e) {
    fmt::print(stderr, "dpbench: error: {}\n", e.what());
    return finish(3);
  } catch (const std::exception& e) {
    fmt::print(stderr, "dpbench: failed: {}\n", e.what());
    return finish(1);
  }
}

// Parses the command line into `app`'s options; the exit code when the command ends there (help:
// 0; a parse error or a name core/names.cpp does not know: 2, one line), nullopt to go on.
std::optional<int> parse_command_line(CLI::App& app, std::vector<std::string> args) {
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
  } catch (const InputError& e) {
    fmt::print(stderr, "dpbench: error: {}\n", e.what());
    return 2;
  }
  return std::nullopt;
}

// `dpbench memory` once parsed: the dlrm's sizes and the sparse paths checked, then the table.
// The `memory` subcommand of `app`, its options (DLRM's shape among them) read into `o`.
CLI::App* add_memory_command(CLI::App& app, MemoryOptions& o) {
  CLI::App* memory = app.add_subcommand(
      "memory", "The memory model: per-rank bytes by category for each mode, role and world size, for a "
                "built-in model or one described by its size (e.g. --params 335e6)");
  add_memory_options(*memory, o);
  add_dlrm_shape_options(*memory, o.base.model.dlrm);
  return memory;
}

int memory_main(const CLI::App& memory, MemoryOptions& o) {
  DataOptions unused;  // the memory model reads no data
  apply_dlrm_options(memory, o.base, unused);
  check_sparse_grad_modes(o.base, o.modes.empty() ? strategy_modes() : o.modes, "--modes");
  return memory_command(o);
}

// An emulated cluster's second and third programs (cluster/cluster_job.hpp), each started by the
// one before it with the run's options; not in --help.
struct ClusterPrograms {
  RunOptions inner, rank;
  CLI::App* inner_app = nullptr;
  CLI::App* rank_app = nullptr;
};

void add_cluster_programs(CLI::App& app, ClusterPrograms& p) {
  p.inner_app = app.add_subcommand(cluster::kInnerCommand, "an emulated cluster's job inside its namespaces");
  add_run_options(*p.inner_app, p.inner);
  p.rank_app = app.add_subcommand(cluster::kRankCommand, "one rank of an emulated cluster's job");
  add_run_options(*p.rank_app, p.rank);
  p.inner_app->group("");
  p.rank_app->group("");
  p.rank.cluster_rank = true;
}

// The exit code of the cluster's program the command line named; nullopt for any other command.
std::optional<int> run_cluster_program(ClusterPrograms& p) {
  if (*p.inner_app) {
    finish_run_options(*p.inner_app, p.inner);
    return cluster::run_inner(p.inner.cluster, p.inner.args);
  }
  if (*p.rank_app) {
    finish_run_options(*p.rank_app, p.rank);
    return cluster_rank_command(p.rank);
  }
  return std::nullopt;
}

}  // namespace

int dpbench_main(int argc, char** argv) {
  CLI::App app{"dpbench: what does a DataParallel parameter server cost against ring all-reduce, and why?\n"
               "Without a subcommand, runs `dpbench run` with its defaults (the MLP on Fashion-MNIST, 4 "
               "CPU ranks, every strategy side by side: ps, sharded_ps, allreduce)."};
  app.name("dpbench");
  app.require_subcommand(0, 1);

  RunOptions run_options;
  CLI::App* run = app.add_subcommand(
      "run", "The main job: train one workload under each mode with the same seed, data and global "
             "batch; print a comparison table and write one result JSON");
  add_run_options(*run, run_options);

  SweepOptions sweep_options;
  CLI::App* sweep = app.add_subcommand("sweep",
                                       "A grid over modes, transports, world sizes, batch sizes and num_workers "
                                       "(defaults: 60 steps per point); one result JSON with every point");
  add_sweep_options(*sweep, sweep_options);

  const std::pair<CLI::App*, CLI::App*> python = add_python_commands(app);  // report, compare

  ProjectOptions project_options;
  CLI::App* project = app.add_subcommand("project",
                                         "The alpha-beta (Hockney) model: project step time, speedup and scaling "
                                         "efficiency of each mode to 1024 ranks from a measured result file");
  add_project_options(*project, project_options);

  MemoryOptions memory_options;
  CLI::App* memory = add_memory_command(app, memory_options);

  HistoryOptions history_options;
  CLI::App* history = add_history_command(app, history_options);

  ProfileOptions profile_options;
  CLI::App* profile = add_profile_command(app, profile_options);

  ClusterPrograms cluster_programs;
  add_cluster_programs(app, cluster_programs);

  std::vector<std::string> args = main_arguments(argc, argv);
  // As given after the subcommand: the cluster's programs start with them (parse consumes args).
  run_options.args = cluster_programs.inner.args = cluster_programs.rank.args = std::vector<std::string>(
      args.begin() + (args.empty() ? 0 : 1), args.end());
  if (const std::optional<int> code = parse_command_line(app, std::move(args))) return *code;

  return with_exit_codes([&] {
    if (const std::optional<int> code = run_cluster_program(cluster_programs)) return finish(*code);
    finish_run_options(*run, run_options);
    if (*sweep) return finish(sweep_main(*sweep, sweep_options));
    if (*python.first) return run_python("plots/report.py", python.first->remaining());
    if (*python.second) return run_python("results/compare.py", python.second->remaining());
    if (*project) return project_main(*project, project_options);
    if (*memory) return memory_main(*memory, memory_options);
    if (*history) return history_command(*history, history_options);
    if (*profile) return profile_command(profile_options);
    return finish(run_command(run_options));
  });
}

}  // namespace dpbench
