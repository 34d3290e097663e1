// `dpbench profile`: the host profile (analysis/host_profile.hpp), made once per machine by one
// short emulated-cluster run (2 nodes of --ranks-per-node ranks on --link, every mode for a few
// steps, its probes kept), and a second of more ranks than cores (--shared-nodes), written as JSON for `dpbench project --simulate --host-profile`.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace dpbench {

// The most nodes the default ranks-sharing-cores job runs (4 x cores beyond it: none).
inline constexpr int kMaxSharedNodes = 16;
// Repetitions of every mode in that job (its fits vary less than the local ranks' round trips).
inline constexpr int kSharedRepetitions = 2;

struct ProfileOptions {
  std::string link = "1gbit";  // the emulated link between the two nodes (tc's units)
  int ranks_per_node = 2;      // >= 2: a node's local ranks are what the profile probes
  // Repetitions of every mode's run, each probing (analysis/host_profile.hpp pools them). 5: on 4
  // ranks of 2 cores, profiles of one mode with 3 came out at 0.07 to 1.6 ms (the ranks' time
  // slices); of every mode with 5, as means, at 0.40 to 1.29 ms (2-core Intel Xeon, 2026-11-30).
  int repetitions = 5;
  // Nodes (one rank each) of the second job, whose ranks exceed the cores (ranks_sharing_cores):
  // -1: 4 x the host's cores where that is at most kMaxSharedNodes, else none; 0: none.
  int shared_nodes = -1;
  std::string out;  // "" -> results/dpbench-host-profile-<time>.json
  bool quiet = false;
};

// The `profile` subcommand of `app`, its options read into `options`.
CLI::App* add_profile_command(CLI::App& app, ProfileOptions& options);

// Runs the profile's cluster run as a child `dpbench run`, writes the profile and prints it.
// Throws InputError on bad options or a machine that cannot host an emulated cluster; returns the
// child's exit code (nothing written) when its run fails.
int profile_command(const ProfileOptions& options);

}  // namespace dpbench
