// What every training mode shares: the configuration of one run, the record of what it
// measured, the launchers that run one thread (or one process) per rank, evaluation. A mode
// (ps/, allreduce/, sharded_ps/) is a function TrainConfig + data -> RunResult that runs the
// one step loop (train/step_loop.hpp) with its verbs, plus its traits (train/strategy.hpp),
// registered by name in registry/strategies.cpp.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "allreduce/allreduce_config.hpp"
#include "core/comm.hpp"
#include "core/hierarchical.hpp"
#include "core/memory.hpp"
#include "launch/rank_launch.hpp"
#include "ps/ps_config.hpp"
#include "sharded_ps/sharded_ps_config.hpp"
#include "train/engine_probe.hpp"
#include "train/optimizer_config.hpp"
#include "workloads/dataloader.hpp"
#include "workloads/dataset.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

// What rank 0 says about a run while it trains (`dpbench run`'s progress line).
struct Progress {
  int epoch = 0;  // 0-based epoch of the last step
  int epochs = 0;
  long step = 0;  // steps done
  long total_steps = 0;
  double loss = 0;           // mean training loss of rank 0's samples since the previous report
  double samples_per_s = 0;  // global samples per second since the previous report
  double eta_s = 0;          // seconds left at that rate
};
using ProgressFn = std::function<void(const Progress&)>;

// Checkpoints (train/checkpoint.hpp): written to `dir` after every `every` steps (0: never); with
// `resume`, training continues from the newest valid one there.
struct CheckpointConfig {
  std::string dir;
  long every = 0;
  bool resume = false;
};

// The model a run trains, as train/models.hpp's make_model builds it.
struct ModelConfig {
  std::string workload = "mlp";          // "mlp", "cnn" or "dlrm"
  std::vector<int> hidden = {512, 256};  // mlp: hidden widths; cnn: the first, its fc width
  std::vector<int> channels = {16, 32};  // cnn: output channels of its two conv layers
  bool sync_bn = false;                  // cnn in allreduce mode: SyncBatchNorm
  DlrmShape dlrm;                        // dlrm: its tables, lookups and MLP widths
  // --model: a described model to replay (workloads/replay_model.hpp), a built-in description's
  // name or a file; "" trains `workload` for real.
  std::string described;
  // A replay's described times are multiplied by it: the --device-profile's rescaling times
  // --time-scale (apply_described_model in bench/app/cli.hpp).
  double replay_time_scale = 1;
  std::string device_profile = "described";  // --device-profile: recorded with the result
  // --time-scale D on an emulated cluster: compute x D and links shaped at their rate / D (time-
  // warped emulation, Gupta et al. NSDI'06); results also give figures scaled back by 1/D. 1 elsewhere.
  double time_dilation = 1;
};

// How long a run trains, in epochs and steps (one step: one global batch).
struct RunLength {
  int epochs = 2;
  long max_steps = -1;   // stop after this many steps in total (-1: run all epochs)
  int warmup_steps = 5;  // first steps excluded from timing statistics
  // --target-loss: > 0, the result records when the training loss first reached it
  // (time_to_target_loss); 0: not asked.
  double target_loss = 0;
  // --test-freq N (dlrm_s_pytorch.py's --test-freq): > 0, rank 0 evaluates the test set after
  // every N steps, between steps and outside the timed figures (RunResult::test_curve); 0: only
  // after the last step.
  long test_freq = 0;
  // --target-auc A (MLPerf DLRM's AUC threshold): in (0, 1], the result records the first
  // evaluation whose test AUC reached it (time_to_target_auc); 0: not asked. Needs test_freq.
  double target_auc = 0;
};

// One run's configuration in sections: the model, the optimizer, the run's length, the data
// loader, checkpoints and the process's identity, and each mode's own knobs, whose structs live in
// the mode's folder (allreduce/allreduce_config.hpp, ps/ps_config.hpp,
// sharded_ps/sharded_ps_config.hpp). What every mode reads stays at the top level.
struct TrainConfig {
  Mode mode = Mode::allreduce;                  // --mode: a registered strategy (core/names.hpp)
  Transport transport = Transport::collective;  // ps, sharded_ps: collective or p2p
  Backend comm = Backend::local;                // --comm
  DeviceKind device = DeviceKind::cpu;          // --device, once chosen (choose_device)
  Precision precision = Precision::tf32;        // cuda: cuBLAS math
  int world_size = 4;
  std::size_t global_batch = 256;  // samples per step over all ranks
  // Samples per rank per step when they differ (uneven split); empty: global_batch split evenly
  // (allreduce, sharded_ps) or in torch.chunk chunks (ps). Their sum is the global batch.
  std::vector<std::size_t> rank_batches;
  ModelConfig model;          // --workload, --hidden, --channels, --sync-bn
  OptimizerConfig optimizer;  // --optimizer, --lr, --momentum, --weight-decay, --betas, --eps
  RunLength run;              // --epochs, --max-steps, --warmup-steps
  std::uint64_t seed = 0;     // model initialisation, DistributedSampler shuffle, augmentation (--seed)
  // Every mode: none (one ring over every rank) or node (core/hierarchical.hpp: inside each node
  // of ranks_on_this_node ranks, then one ring per local rank across the nodes).
  Hierarchy hierarchy = Hierarchy::none;
  AllreduceConfig allreduce;   // allreduce: DDP's buckets and communication hook
  PsConfig ps;                 // ps: the root's coalesced broadcast and reduce_add
  ShardedPsConfig sharded_ps;  // sharded_ps: servers and staleness
  DataLoaderOptions loader;
  bool evaluate = true;            // measure test accuracy after training
  bool keep_final_params = false;  // copy rank 0's parameters into RunResult (tests)
  // Initial parameters in the model's flat order (--init-params); null: the model's own
  // initialisation from seed.
  std::shared_ptr<const std::vector<float>> initial_params;
  CheckpointConfig checkpoint;  // --checkpoint-dir, --checkpoint-every, --resume
  ProgressFn progress;          // called on rank 0 every progress_interval_s and after the last step
  double progress_interval_s = 0.5;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
  // This process's identity in a multi-process job (launch/rank_launch.hpp), filled from the
  // launcher (launch/resolve.hpp), never from the user's options; defaults: every rank a thread.
  ProcessIdentity process;
};

// The ranks per node of a --hierarchy node run: ranks_on_this_node when the launch set it, else
// every rank (one process's threads share one node).
inline int hierarchy_ranks_per_node(const TrainConfig& config) {
  return config.process.ranks_on_this_node > 0 ? config.process.ranks_on_this_node : config.world_size;
}
// --hierarchy node's checks, for the modes that have it: host buffers (--device cpu) and a world
// size that nodes of hierarchy_ranks_per_node ranks make up. Throws InputError naming the option.
void validate_node_hierarchy(const TrainConfig& config);

// The hook spelled `text` (comm_hook_from); InputError naming `option`, `text` and the choices
// otherwise ("--comm-hook int8: unknown hook (choose allreduce, fp16, bf16 or powersgd:R ...)").
CommHook parse_comm_hook(std::string_view text, std::string_view option = "--comm-hook");

// How the allreduce mode sums a bucket: ranks_per_node 0 is the backend's own all-reduce; else
// core/hierarchical.hpp's rings over nodes of that many ranks (the world size: one flat ring) with
// the hook's wire format.
struct BucketAllreduce {
  int ranks_per_node = 0;
  WireFormat format = WireFormat::fp32;
};
inline BucketAllreduce bucket_allreduce(const TrainConfig& config) {
  const CommHook& hook = config.allreduce.comm_hook;
  const WireFormat format = hook.kind == CommHook::Kind::fp16   ? WireFormat::fp16
                            : hook.kind == CommHook::Kind::bf16 ? WireFormat::bf16
                                                                : WireFormat::fp32;
  if (config.hierarchy == Hierarchy::node) return {hierarchy_ranks_per_node(config), format};
  if (hook.kind == CommHook::Kind::powersgd) return {config.world_size, format};  // the project's ring
  return {format == WireFormat::fp32 ? 0 : config.world_size, format};
}

// Seconds spent in each phase of one step on one rank.
struct PhaseTimes {
  double data_wait = 0, h2d = 0, forward = 0, backward = 0, comm = 0, comm_exposed = 0, optimizer = 0;
};

struct StepRecord {
  double step_time = 0;  // seconds, wall clock on this rank
  PhaseTimes phases;
  // The step's collectives in the order this rank ran them, where its mode times them
  // (ModeRank::take_collective_timings; allreduce --sparse-grad); empty elsewhere.
  std::vector<CollectiveTiming> collectives;
};

struct MemoryReport {
  std::int64_t peak_bytes = 0;
  std::map<std::string, std::int64_t> peak_by_category;  // category_name() -> peak bytes
};

// What a GPU rank's device said about its memory (cudaMemGetInfo), in bytes in use on the whole
// device: it sees every rank sharing the device, the CUDA context, cuBLAS and NCCL, and the
// allocator's cache.
struct DeviceView {
  int device = -1;                // CUDA device index; -1 for a CPU rank
  bool virtual_rank = false;      // the device is shared with other ranks of this node
  std::int64_t used_before = -1;  // before the rank allocated anything
  std::int64_t used_after = -1;   // after the last step, with the rank's buffers still held
  std::int64_t total = -1;
};

struct RankResult {
  int rank = 0;
  std::size_t local_batch = 0;    // samples this rank computes per step
  std::vector<StepRecord> steps;  // timed steps only (after warm-up)
  CommStats comm_per_step;        // bytes per timed step
  // On a node of an emulated cluster: bytes per timed step that the node's link interface
  // counted (frames, headers included); -1 elsewhere.
  CommStats wire_per_step{-1, -1};
  int node = -1;  // emulated cluster: the node this rank ran on ($DPBENCH_CLUSTER_NODE); -1 elsewhere
  // Under torchrun: its process's attempt ($TORCHELASTIC_RESTART_COUNT). A node whose agent was
  // started again counts from 0 while the others count their restarts.
  int restart_count = 0;
  // Wall-clock seconds from the start of this rank's first timed step to the end of its last (what
  // the timed steps took, gaps between them included).
  double timed_wall_s = 0;
  MemoryReport memory;  // host memory for CPU ranks, device memory for GPU ranks
  DeviceView device;
  std::vector<double> checkpoint_write_s;  // seconds this rank spent on each checkpoint it took part in
  std::int64_t checkpoint_bytes = 0;       // bytes of the file this rank writes per checkpoint (0: none)
  // sharded_ps --staleness: per step (warm-up included), how many versions older than the step
  // the parameters it computed on were; empty otherwise.
  std::vector<int> step_staleness;
};

// One --test-freq evaluation: the test set's metrics after `step` steps (1-based), and rank 0's
// training seconds from the first step's start to that step's end (earlier evaluations left out).
struct TestPoint {
  long step = 0;
  double seconds = 0;
  double accuracy = 0;  // in [0, 1]
  double auc = -1;      // two classes: ROC AUC; -1 otherwise (or a diverged model)
};

// The steps a training loss is averaged over before it is compared with --target-loss: one
// step's global batch is noisy, so the first step whose mean over the last kTargetLossWindow
// steps (fewer at the start) is at or below the target is the one that reached it.
inline constexpr int kTargetLossWindow = 10;
struct TimeToTarget {
  long step = -1;       // 1-based: steps trained when the target was reached; -1: never
  double seconds = -1;  // rank 0's wall time from the first step to that one's end; -1: unknown
};

// A gradient bucket: floats [offset, offset + size) of the flat gradient buffer.
struct ScheduleBucket {
  std::size_t offset = 0;
  std::size_t size = 0;
  // The all-reduces a compressing hook runs for the bucket instead of one of `size` floats
  // (allreduce --comm-hook powersgd:R: its uncompressed tensors, Ps, Qs); empty: none.
  std::vector<std::size_t> allreduces;
  // The share of backward's compute from the previous bucket's ready point to this one's (a
  // described model's layer times); negative: in proportion to the bucket's size.
  double backward_share = -1;
};

struct Strategy;
struct ModelDescription;

// What the strategy registry says of a run (registry/strategies.hpp run_traits), resolved once
// when the harness runs it (harness/harness.hpp execute_point).
struct RunTraits {
  const Strategy* strategy = nullptr;  // the run's mode's strategy
  // Its traits as the result's run entry carries them under "strategy" (strategy_to_json).
  nlohmann::json json;
  double overlapped_share = 0;  // of its communication, its projection curve's (ProjectionCurve)
};

struct RunResult {
  TrainConfig config;
  std::string dataset;
  std::size_t num_params = 0;
  std::size_t input_features = 0;  // floats per sample
  SampleShape sample_shape;        // the training set's samples
  std::size_t num_classes = 0;
  // DDP's buckets of the run's model under its --bucket-cap-mb and --first-bucket-mb, {offset,
  // size} in floats, in the order backward makes them ready (train/step_schedule.hpp
  // model_schedule_buckets): what allreduce and sharded_ps reduce, whatever the mode run.
  std::vector<std::pair<std::size_t, std::size_t>> ddp_buckets;
  long steps_total = 0;
  long steps_timed = 0;
  std::vector<RankResult> ranks;
  std::vector<double> step_train_loss;  // mean training loss of each step's global batch
  // Rank 0's seconds from the start of its first step to the end of each step it ran (warm-up
  // included; after --resume, the steps since the checkpoint).
  std::vector<double> step_end_s;
  std::vector<double> epoch_train_loss;  // mean training loss of each epoch
  double final_train_loss = 0;           // of the last epoch
  double test_accuracy = -1;             // in [0, 1]; -1 when not evaluated
  double test_auc = -1;                  // two classes (dlrm): held-out ROC AUC (roc_auc); -1 otherwise
  std::vector<TestPoint> test_curve;     // --test-freq: rank 0's evaluations between steps, in step order
  // --target-loss and --target-auc: when the run reached them (time_to_target_loss and
  // time_to_target_auc of its losses and curve, once it ended); nullopt when not asked.
  std::optional<TimeToTarget> reached_target_loss, reached_target_auc;
  std::vector<std::string> warnings;
  std::vector<float> final_params;   // rank 0's, if config.keep_final_params
  std::vector<float> final_buffers;  // and its BatchNorm running statistics (cnn), likewise
  // Under torchrun --max_restarts, in an attempt after a failure: what the restart cost
  // (train/elastic.hpp restart_cost); null otherwise.
  nlohmann::json elastic_restart;
  long resumed_from_step = -1;  // --resume: the checkpoint's step; -1: started from step 0
  // On an emulated cluster: rank 0's probe of the engine's collectives before the first step
  // (train/engine_probe.hpp); nullopt elsewhere.
  std::optional<EngineProbe> engine_probe;
  // Where the harness pooled the probes of a configuration's repetitions into this run's
  // (harness/harness.cpp train_modes): each rank's timed steps of every repetition, in run order,
  // [world_size]; the in-run simulation's phases and the mean step it is held against are read
  // from them (three runs' steps: a third of the sampling error of one). Empty: this run's own.
  std::vector<std::vector<StepRecord>> pooled_steps;
  // Set by the harness that ran it (harness/harness.hpp execute_point), for the result file and
  // the network analysis to read: its strategy's traits; the description a replay (--model)
  // replays (null otherwise); the memory model's figures for each rank (train/memory_model.hpp;
  // CPU ranks over --comm local, where it holds to the byte; empty elsewhere); its strategy's
  // buckets of its model (Strategy::schedule_buckets; empty when the strategy has none).
  RunTraits traits;
  std::shared_ptr<const ModelDescription> description;
  std::vector<RankMemory> modelled_memory;
  std::vector<ScheduleBucket> schedule_buckets;
  // The BLAS threads each of this process's ranks computed with (harness/harness.hpp
  // blas_threads_per_rank); 0: not set by a harness.
  int blas_threads = 0;
};

// The data of one run.
struct TrainData {
  const Dataset* train = nullptr;
  const Dataset* test = nullptr;  // may be null: no evaluation
};

using StrategyFn = RunResult (*)(const TrainConfig&, const TrainData&);

using RankBody = std::function<void(int rank, Communicator& comm, MemoryTracker& tracker)>;

// Runs body(rank, comm, tracker) for every rank of the run this process owns and leaves each
// rank's record in ranks[rank] on the output process: the launch room's launcher for
// config.comm (launch/rank_launch.hpp's RankLauncher says how each fails).
void run_ranks(const TrainConfig& config, std::vector<RankResult>& ranks, const RankBody& body);

// What the launch room needs of a run (its backend, world size, timeout, process identity, and
// the elastic failure record under --checkpoint-dir), and how its records cross processes
// (rank_to_json of ranks[rank], and back into ranks[rank]). The codec refers to `ranks`.
LaunchSpec launch_spec(const TrainConfig& config);
RecordCodec rank_records(std::vector<RankResult>& ranks);

// A rank's record as JSON and back (for gathering records across processes).
nlohmann::json rank_to_json(const RankResult& rank);
RankResult rank_from_json(const nlohmann::json& json);

// Fault injection for testing failure handling: DPBENCH_FAULT="rank=R,step=S,kind=K" makes rank R
// at the start of step S throw (kind=throw), stop answering (hang), die (kill: SIGKILL) or, on a
// node of an emulated cluster, set its node's link down and go on (link-down); under torchrun,
// kill-agent kills the rank's torchrun agent and then the rank (a node dying). local_rank=L
// instead of rank=R picks the rank by $LOCAL_RANK. In an emulated cluster node=N may stand for the
// first rank of node N (cluster/cluster_job.hpp).
struct Fault {
  int rank = -1;
  int local_rank = -1;
  long step = -1;
  std::string kind = "throw";
};
std::optional<Fault> fault_from_env();  // throws InputError on a malformed DPBENCH_FAULT
// Called by every rank at the start of every step: the step hook (below), then DPBENCH_FAULT.
void maybe_inject_fault(int rank, long step);
// A test's hold on the step loop: `hook(rank, step)` runs on the rank's own thread at the start of
// each of its steps, before anything else of the step; empty (the default): nothing. Set it only
// while no rank runs.
void set_step_start_hook(std::function<void(int rank, long step)> hook);

// A slowdown for testing the regression gate: DPBENCH_STEP_DELAY="mode=M,ms=X" makes every step of
// mode M sleep X milliseconds inside its timed span (as data wait). Throws InputError on a
// malformed value.
void maybe_delay_step(Mode mode);

// A changed message for testing the regression gate: DPBENCH_EXTRA_MESSAGE="mode=M,floats=N" makes
// rank 0 send N extra floats to rank 1 at the start of every step of mode M (world_size >= 2),
// counted in the run's bytes per step like any message. Host buffers only: throws InputError on a
// malformed value or with --device gpu.
void maybe_send_extra_message(const TrainConfig& config, Communicator& comm, int rank);

// Snapshot of a tracker's peaks.
MemoryReport memory_report(const MemoryTracker& tracker);

// Test accuracy of `params` (and BatchNorm running statistics `buffers`, may be null for models
// without any) on `test`, in evaluation mode, in batches on the calling thread, untracked; with
// two classes also the ROC AUC of the score logit 1 - logit 0 (-1 with more classes, or when the
// test set holds one class only).
struct TestMetrics {
  double accuracy = 0;
  double auc = -1;
};
TestMetrics evaluate_test(const TrainConfig& config, const Dataset& test, const float* params, const float* buffers);

// step_losses: every step's global loss [steps]; step_end_s: the end time of the last
// step_end_s.size() of those steps (a resumed run's). The target must be positive.
TimeToTarget time_to_target_loss(const std::vector<double>& step_losses, const std::vector<double>& step_end_s,
                                 double target);

// The first of `curve`'s evaluations (in step order) whose test AUC is at or above `target`
// (> 0): its step and seconds; {-1, -1} when none reached it.
TimeToTarget time_to_target_auc(const std::vector<TestPoint>& curve, double target);

// The area under the ROC curve of `scores` for the binary `labels` (1 positive, 0 negative): the
// probability that a random positive scores above a random negative, ties counting one half
// (the Mann-Whitney U statistic over n_pos x n_neg, with midranks). [n] each. -1 when either
// class is absent or a score is not a number (a diverged model). Throws Error when the sizes differ or a label is not 0 or 1.
double roc_auc(const std::vector<float>& scores, const std::vector<std::int32_t>& labels);

// Steps per epoch: floor(N / global_batch), identical for every mode so that all modes see the
// same global batches. Throws InputError when the dataset has fewer samples than one step needs.
long steps_per_epoch(const TrainConfig& config, const Dataset& train);

// Checks the options every point shares, before data is loaded: positive sizes, a known workload
// (or model description) and its shape, sane step counts and a timeout in (0, 1e9] s. Throws
// InputError naming the option.
void check_common_options(const TrainConfig& base, double timeout_s);

// Common checks of a config against the data, one-line InputErrors: world_size, batch size,
// epochs, learning rate, transport, device and precision.
void validate_config(const TrainConfig& config, const Dataset& train);

// Total steps of the run (epochs x steps_per_epoch, capped by max_steps).
long total_steps(const TrainConfig& config, const Dataset& train);

// Rank 0's last act in every mode: per-epoch mean losses from per-epoch loss sums (over all
// ranks) and step counts, the final loss, parameter count, a copy of the parameters and buffers
// if asked, and the test accuracy of params[n] with buffers[num_buffers] (null when none).
void finish_result(RunResult& result, const TrainData& data, const std::vector<double>& loss_sums,
                   const std::vector<long>& steps_in_epoch, const float* params, std::size_t n, const float* buffers,
                   std::size_t num_buffers);

// Fills steps_timed/warnings common to every mode and the comm bytes per step of each rank.
void finish_rank(RankResult& rank, const CommStats& timed_bytes, long timed_steps, const MemoryTracker& tracker);

}  // namespace dpbench
