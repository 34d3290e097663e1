// `dpbench profile`: the host profile (analysis/host_profile.hpp), made once per machine by one
// short emulated-cluster run (2 nodes of --ranks-per-node ranks on --link, every mode for a few
// steps, its probes kept), and jobs of more ranks than cores (--shared-nodes), written as JSON for
// `dpbench project --simulate --host-profile`.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace dpbench {

// The most nodes the default ranks-sharing-cores job runs (4 x cores beyond it: none).
inline constexpr int kMaxSharedNodes = 16;
// Samples per rank in each such job (the 8-node job's 256 of `run`'s default batch, on 2 cores).
inline constexpr int kSharedBatchPerRank = 32;
// Repetitions of every mode in each such job (its fits vary less than the local ranks' round trips).
inline constexpr int kSharedRepetitions = 2;

struct ProfileOptions {
  std::string link = "1gbit";  // the emulated link between the two nodes (tc's units)
  int ranks_per_node = 2;      // >= 2: a node's local ranks are what the profile probes
  // Repetitions of every mode's run, each probing (analysis/host_profile.hpp pools them). 5: on 4
  // ranks of 2 cores, profiles of one mode with 3 came out at 0.07 to 1.6 ms (the ranks' time
  // slices); of every mode with 5, as means, at 0.40 to 1.29 ms (2-core Intel Xeon, 2026-11-30).
  int repetitions = 5;
  // Nodes (one rank each) of the jobs whose ranks exceed the cores (ranks_sharing_cores), one job
  // each: empty: 3 and 4 x the host's cores where 4 x is at most kMaxSharedNodes, else none; {0}:
  // none.
  std::vector<int> shared_nodes;
  std::string out;  // "" -> results/dpbench-host-profile-<time>.json
  bool quiet = false;
};

// The arguments of one of the profile's cluster jobs, a child `dpbench run` writing `out`: every
// mode, 6 steps after 2 of warm-up, `repetitions` runs, no evaluation, on --link; a
// ranks-sharing-cores job (`ranks_per_node` 1) at kSharedBatchPerRank samples per rank, so that
// every node count divides its batch.
std::vector<std::string> profile_run_args(const ProfileOptions& o, int nodes, int ranks_per_node, int repetitions,
                                          const std::string& out);

// The `profile` subcommand of `app`, its options read into `options`.
CLI::App* add_profile_command(CLI::App& app, ProfileOptions& options);

// Runs the profile's cluster run as a child `dpbench run`, writes the profile and prints it.
// Throws InputError on bad options or a machine that cannot host an emulated cluster; returns the
// child's exit code (nothing written) when its run fails.
int profile_command(const ProfileOptions& options);

}  // namespace dpbench
