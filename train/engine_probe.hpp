// The engine's own speed on an emulated cluster, measured before a run's steps: every rank runs
// each collective the run's mode uses (allreduce, reduce, broadcast, reduce-scatter, all-gather,
// scatter, gather) on the same floats, through the same calls the mode makes (the non-blocking
// start + wait where the communicator has them), between two barriers; rank 0 keeps the quickest
// of a few repetitions. The simulation (sim/) plays the same collective on the probed platform and
// finds the share of the link at which the engine's messages must move to take that long: the
// engine's calibration (gloo, Open MPI over TCP and the local ring each move bytes at their own
// fraction of the link). Not for: the link itself (cluster/probe.hpp measures it with bulk TCP).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/schedule.hpp"

namespace dpbench {

struct CollectiveProbe {
  CollectiveKind kind = CollectiveKind::allreduce;
  std::size_t floats = 0;  // the collective's size (v-collectives: split evenly over the ranks)
  double seconds = 0;      // the quickest repetition, barrier to barrier, on rank 0
};

struct EngineProbe {
  std::vector<CollectiveProbe> collectives;
  int repetitions = 0;
};

// The collectives a mode's schedule uses (core/schedule.hpp's tags, p2p left out: a transfer
// moves at the link's rate): "ps" broadcast, scatter, gather, reduce (p2p transport: scatter and
// gather); "sharded_ps" reduce-scatter and all-gather (p2p: none); "allreduce" allreduce. Empty
// for any other mode.
std::vector<CollectiveKind> probed_collectives(const std::string& mode, const std::string& transport);

// Every rank of `comm` calls it with the same arguments: each kind, once on a few floats (the
// connections' first use), then `reps` times on `floats` floats. Returns the probe on rank 0,
// nullopt on the others. Throws InputError when floats < world_size or reps < 1, and what the
// communicator throws.
std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        std::size_t floats, int reps);

}  // namespace dpbench
