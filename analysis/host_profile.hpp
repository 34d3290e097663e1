// The host profile (`dpbench profile`): what this machine's host, not its links, costs an
// emulated cluster's ranks, measured once per machine and saved as JSON ("dpbench-host-profile",
// version 1), so that `project --simulate` on runs that never crossed a node's local link (one
// rank per node) still plays it as this machine moves it. It holds:
//   - the link between a node's local ranks: 2 nodes of --ranks-per-node ranks on one emulated
//     link, every node's local pairs ping-ponging one float, then 16 MiB, all at once, as a run's
//     engine probe does (train/engine_probe.hpp probe_intra_node): over every run (each mode's,
//     each pooling its repetitions), the median rate and the mean round trip (on ranks sharing
//     cores a round trip takes 0.07 ms or waits 1-2 ms for a time slice, from run to run);
//   - the emulated links' requested and probed rates (the share of a requested rate a TCP
//     transfer gets: tbf counts each frame's headers);
//   - the host's reduction by size (core/reduction.hpp: the add a collective does on what it
//     receives), each size's median over the runs' probes; optional (profiles made before it
//     have none);
//   - ranks beyond the host's cores (optional, `ranks_sharing_cores`): cluster jobs of more
//     nodes than cores, one rank each, on the same link (by default 3 and 4 x cores), whose engine
//     probes give each dense collective as a cost per message between nodes at the link's rate
//     (analysis/run_simulation.cpp fit_probe's overhead_at_link_s), each kind's median over its
//     runs, one point per job: what every message costs when the ranks must wait for a core (2-core
//     AMD EPYC, 2026-12-02: at 6 ranks reduce_scatter 0.51 ms, allgather 0.86, allreduce 0.14; at 8
//     ranks 1.08, 0.93 and 0.40 ms; broadcast and reduce 0 to 0.13; from profile to profile the
//     8-rank all-reduce moved between 0.21 and 0.86 ms);
//   - the machine it was made on (CPU, cores, host, OS, BLAS core, dpbench's commit).
// Not for: the engines' shares of a link per collective, which depend on the model's messages and
// come from the calibration files' own probes (analysis/projection.cpp).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/reduction.hpp"

namespace dpbench {

inline constexpr const char* kHostProfileSchema = "dpbench-host-profile";
inline constexpr int kHostProfileVersion = 1;

// One ranks-sharing-cores job of a profile: `ranks` ranks (one per emulated node) on the host's
// cores and, by CollectiveKind, each message's cost between nodes at the link's rate (s, >= 0).
struct SharedCoresPoint {
  int ranks = 0;
  std::vector<double> overhead_s;  // [kCollectiveKinds]
};

struct HostProfile {
  std::string path;                   // the file it was read from
  std::string created;                // UTC, ISO 8601
  nlohmann::json machine;             // cpu_model, cpu_cores, host, os, blas_core, dpbench_version, git_commit
  double intra_bytes_per_s = 0;       // a node's local ranks' link, as probed (bytes/s, > 0)
  double intra_round_trip_s = 0;      // one float's round trip between two local ranks (s, > 0)
  std::vector<nlohmann::json> links;  // the profile cluster's links (requested and probed rates)
  ReductionCost reduction;            // the host's reduction by size; empty: the profile has none
  // Ranks sharing cores: one point per job of more ranks than `shared_cores` cores, in ascending
  // ranks; empty: the profile has none.
  std::vector<SharedCoresPoint> shared_points;
  int shared_cores = 0;
  nlohmann::json document;                // the whole profile, as read
  std::string source = "--host-profile";  // or "recorded in FILE" (a result file's env.host_profile)

  // What a projection records of it: path, created, machine, the probed link and its source.
  nlohmann::json record() const;
};

// The profile document made from the result of `dpbench profile`'s cluster run (a result file of
// 2 nodes of 2 or more ranks each, one run or more, each with network.simulation.intra_node as
// probed): the runs' median rate and mean round trip, each run's as "probes", and each size's median
// reduction rate over the runs that probed it (network.simulation.reduction); with `shared_results`
// (the jobs of more ranks than cores; empty: none), `ranks_sharing_cores` (shared_cores_block);
// `machine_host` (the real host's name, the run's env naming its emulated node) and `command`
// recorded. Throws Error when no run probed a node's local ranks.
nlohmann::json host_profile_document(const nlohmann::json& run_result, const std::string& machine_host,
                                     const std::string& command,
                                     const std::vector<nlohmann::json>& shared_results = {});

// The `ranks_sharing_cores` block of result files of more ranks than their env's cpu_cores, one
// point per file in ascending ranks ("points": its nodes, ranks, runs, each probe under "probes" and
// per dense collective kind the median over its runs' engine-probe fits, network.simulation.
// calibration.collectives[].overhead_at_link_s, probe_calibrated's where the run calibrated on its
// steps); beside them the largest point's nodes, ranks and overhead_s and the cores. Throws Error
// when a file's runs fitted no dense collective, its ranks do not exceed the cores, two files have
// the same ranks or their cores differ, or there is no file.
nlohmann::json shared_cores_block(const std::vector<nlohmann::json>& shared_results);

// The points of a ranks_sharing_cores `block` (an object): its "points", or, for a profile made
// before them, a list of the block itself as its one point. Unchecked (host_profile_from checks).
nlohmann::json shared_cores_points(const nlohmann::json& block);

// The profile in `doc`, read from `path`. Throws InputError naming `option` and the path and the
// problem (not a host profile, another version, a missing or non-positive rate or round trip, a
// reduction block whose rates are not positive sizes and rates in ascending bytes, a
// ranks_sharing_cores block whose points' ranks do not exceed its cores or do not ascend, or whose
// overheads are not non-negative numbers of known collectives; a block without "points", as
// profiles made before them, is one point).
HostProfile host_profile_from(const nlohmann::json& doc, const std::string& path, const std::string& option = "");

// Reads and checks the profile at `path`. Throws InputError (unreadable, not JSON, as above).
HostProfile read_host_profile(const std::string& path);

// What a result file keeps of the profile its run was given (`run` / `sweep --host-profile`),
// under env.host_profile: the path, the creation time, the machine and the whole document, so
// that a later `project --simulate` on the file plays the same profile without the file.
nlohmann::json host_profile_env_record(const HostProfile& profile);

// The profile a result file recorded (its env.host_profile), or nullopt when it has none; its
// source "recorded in `file`". Throws InputError naming `file` when the record is not a profile.
std::optional<HostProfile> recorded_host_profile(const nlohmann::json& result, const std::string& file);

}  // namespace dpbench
