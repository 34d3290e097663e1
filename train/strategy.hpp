// What a synchronisation strategy is to the rest of dpbench: its trainer and the traits that
// `run`, `sweep`, `project`, the result file, `compare` and the report read, so that none of
// them names a mode. Each strategy defines its own in its folder (ps/, allreduce/, sharded_ps/); the registry
// (registry/strategies.cpp) lists them, one line each.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/alpha_beta_model.hpp"
#include "train/memory_model.hpp"
#include "train/step_schedule.hpp"
#include "train/training.hpp"

namespace CLI {
class App;
}

namespace dpbench {

// The bus bandwidth a run of the strategy reports, nccl-tests definitions (PERFORMANCE.md):
// algbw = bytes / comm time (the median comm phase), busbw = algbw * factor.
struct BusBandwidth {
  std::string collective;  // what the bytes cross: "all-reduce"
  double bytes = 0;        // algbw numerator per step, bytes (all-reduce: the gradient bytes)
  double factor = 0;       // all-reduce 2(p-1)/p; reduce, broadcast 1
};

// One curve of `dpbench project`: the strategy under one of its transports.
struct ProjectionCurve {
  std::string key;      // the projection file's "curve": "allreduce", "ps_collective", "ps_p2p"
  Transport transport;  // the transport it models (ring, collective, p2p)
  // The share of comm_time that runs while backward still does (DDP buckets: 1; nothing: 0), of
  // which the measured exposed fraction stays on the step's critical path.
  double overlapped_share = 0.0;
};

// One of a strategy's own options as a run set it: the words a refusal quotes.
struct OwnOption {
  std::string option;  // as given: "--comm-hook fp16", "--staleness 2"
  std::string what;    // what only this strategy has: "communication hooks"
};

struct Strategy {
  Mode mode;                                             // the --mode value
  std::string description;                               // one line for --help
  void (*validate)(const TrainConfig&, const Dataset&);  // throws InputError; runs before any training
  StrategyFn train;  // on config.device: run_step_loop with the mode's verbs (train/step_loop.hpp)

  // ---- traits ----
  // The --transport values the strategy takes, its default first; empty: it has one fixed
  // communication pattern and ignores --transport.
  std::vector<Transport> transports;
  // The transport a run with this config uses (collective, p2p, ring).
  Transport (*transport)(const TrainConfig&);
  // How tables and legends name a run: "ps (collective)", "allreduce (ring)".
  std::string (*label)(const TrainConfig&);
  // The bus bandwidth of a run at config.world_size with `param_bytes` of parameters; nullopt
  // when the strategy's communication is not one collective whose bandwidth can be read off its
  // comm time.
  std::optional<BusBandwidth> (*bus_bandwidth)(const TrainConfig&, double param_bytes);
  // True when rank 0 alone holds state the others do not (a root: master parameters,
  // optimizer state, the full batch), so rank 0's memory above the mean is the strategy's cost.
  bool has_root = false;
  // True for the baseline: the strategy every other one is compared with (ps, DataParallel).
  // Exactly one strategy of the registry is the baseline.
  bool baseline = false;
  // The curves `dpbench project` draws for this strategy, one per transport it models; a run's
  // transport picks its curve, and with it whether the run overlaps backward.
  std::vector<ProjectionCurve> projected;
  // Communication seconds per step at world size p >= 2 under `transport` when every rank
  // computes `per_rank_batch` samples (the alpha-beta terms of the strategy).
  double (*comm_time)(const StepModel&, const LinkModel&, Transport transport, int p, double per_rank_batch);
  // The PyTorch program that trains as a run of this config does, for `dpbench run --reference
  // pytorch` (a program of bench/reference/pytorch_reference.py: "dataparallel", "rpc_ps", "ddp");
  // "" when PyTorch has none. One rank is always compared with "plain".
  std::string (*pytorch_counterpart)(const TrainConfig&) = nullptr;
  // Every rank's bytes by category during training (train/memory_model.hpp), for
  // in.config.world_size ranks; null when the strategy has no model.
  std::vector<RankMemory> (*memory)(const MemoryInputs&) = nullptr;
  // The first of the strategy's own options that `config` sets away from its default, which a
  // run of any other mode refuses (registry/strategies.hpp: validate_point); nullopt when none
  // is set or the strategy has no option another mode could be given.
  std::optional<OwnOption> (*own_option_given)(const TrainConfig&) = nullptr;
  // Adds the strategy's own options (its config section's: allreduce's --bucket-cap-mb, sharded_ps's
  // --servers, ...) to a training command (run, sweep), which parsing writes into `config`; null
  // when the strategy has none. Each option's help names the strategy it belongs to.
  void (*add_options)(CLI::App& app, TrainConfig& config) = nullptr;
  // Adds the strategy's own options that shape its memory model (sharded_ps's --servers) to
  // `dpbench memory`, which parsing writes into `config`; null when it has none.
  void (*add_memory_options)(CLI::App& app, TrainConfig& config) = nullptr;
  // Writes the strategy's own options into a run's config block, under their flat keys
  // ("bucket_cap_mb", "servers", ...; results/schema/dpbench-result.schema.json); every run's block
  // carries every strategy's. Null when the strategy has none.
  void (*config_json)(const TrainConfig& config, nlohmann::json& block) = nullptr;
  // Adds what only this strategy's runs record to a run's entry (sharded_ps --staleness: the
  // staleness histogram); null when there is nothing.
  void (*run_json)(const RunResult& run, nlohmann::json& entry) = nullptr;
  // The warnings a run of `config` carries in its result (an option that makes its timed steps
  // mean something else than the user may think); null when the strategy has none.
  std::vector<std::string> (*warnings)(const TrainConfig&) = nullptr;
  // Writes one training step of in.config.world_size ranks as messages and compute phases, as
  // the strategy's trainer runs it over in.engine's collectives (train/step_schedule.hpp): what
  // the simulator plays (sim/) and what the byte counts are checked against; null when the
  // strategy has none.
  void (*schedule)(const ScheduleInputs&, StepSchedule&) = nullptr;
  // The collectives of its engine a run of `config` runs in a step (core/schedule.hpp's kinds, p2p
  // for pairwise rounds), which the engine probe times and the simulation calibrates: what its
  // ranks' ModeRank::probed_collectives return; null: none.
  std::vector<CollectiveKind> (*probed_collectives)(const TrainConfig& config) = nullptr;
  // The gradient buckets that schedule reduces for `model` under `config` (ScheduleInputs::buckets,
  // in the order backward readies them); null when it reduces none.
  std::vector<ScheduleBucket> (*schedule_buckets)(const Model& model, const TrainConfig& config) = nullptr;
  // Why one step's schedule cannot stand for a run of `config` (its simulation's "unavailable"),
  // "" when it can; null: it always can.
  std::string (*unsimulated)(const TrainConfig& config) = nullptr;
  // True when the optimizer step is divided over the ranks (each steps 1/p of the parameters).
  bool shards_optimizer = false;
  // True when the strategy has a --sparse-grad path (--workload dlrm: only the rows a batch
  // touched cross the network); a run of --sparse-grad under another strategy is refused.
  bool sparse_grad = false;
};

}  // namespace dpbench
