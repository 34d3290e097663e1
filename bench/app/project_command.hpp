// `dpbench project`: calibrates the alpha-beta model (alpha_beta_model.hpp) on measured result
// files, prints projected step time, throughput, speedup and scaling efficiency of each mode for
// world sizes 1, 2, 4, ... up to --max-ranks, the world size where each strategy overtakes the
// baseline strategy (the parameter server), and the model against every measured multi-rank
// run with its error there. The link is one measured between processes (emulated cluster,
// inter-process collectives, GPU runs) unless the user asks for in-process memory copies
// (--link-model memory) or a datasheet preset; the curves scale the way the measured runs did (strong:
// a fixed global batch) unless asked for weak scaling. Writes a "dpbench-projection" JSON for the
// report: its "curves" carry each curve's strategy, label, transport and baseline role, so the
// report names no mode itself.
#pragma once

#include <CLI/CLI.hpp>

#include "analysis/projection.hpp"

namespace dpbench {

void add_project_options(CLI::App& app, ProjectOptions& options);

// Reads the result files (and --collectives), projects, prints the curves and the summary, writes
// the projection file. Returns the exit code; throws InputError / IoError.
int project_command(const ProjectOptions& options);

}  // namespace dpbench
