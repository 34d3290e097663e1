// The engine's own speed on one link of an emulated cluster, measured before a run's steps: rank
// a sends each message size to rank b, which answers with one float (ping-pong), a few times; the
// one-way time of a size is the median round trip less half of a one-float round trip's. A line
// t = overhead + bytes / bytes_per_s fitted to the sizes says how the engine (gloo, Open MPI over
// TCP) moves bytes against the link's probed rate; the simulation (sim/) is calibrated with it.
// Not for: the link itself (cluster/probe.hpp measures it with bulk TCP).
#pragma once

#include <optional>
#include <vector>

#include "core/comm.hpp"

namespace dpbench {

struct EngineProbe {
  int from = 0, to = 0;            // the ranks that measured
  std::vector<double> bytes;       // message sizes
  std::vector<double> one_way_s;   // [bytes.size()] median one-way seconds
  double overhead_s = 0;           // fitted: seconds per message beyond its bytes
  double bytes_per_s = 0;          // fitted: the engine's rate for long messages
};

// Ranks a and b of `comm` measure (both must call it, with the same arguments; the other ranks
// return nullopt at once); rank a returns the probe, rank b nullopt. floats: message sizes in
// floats; reps: round trips per size (the median counts). Throws what the communicator throws.
std::optional<EngineProbe> probe_engine(Communicator& comm, int a, int b, const std::vector<std::size_t>& floats, int reps);

// The least-squares line t = overhead_s + bytes / bytes_per_s through the points; bytes_per_s is
// 0 when the times do not grow with the size. Throws Error on fewer than two points.
void fit_engine_line(EngineProbe& probe);

// The last probe this process measured (rank a's), for its result file; nullopt when none.
const std::optional<EngineProbe>& last_engine_probe();
void set_last_engine_probe(const EngineProbe& probe);

}  // namespace dpbench
