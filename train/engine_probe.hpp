// The engine's own speed on an emulated cluster, measured before a run's steps: after a barrier,
// every rank runs the collectives the run's mode uses (allreduce, reduce, broadcast,
// reduce-scatter, all-gather, scatter, gather) back to back in the order its step runs them, on
// the same floats, through the same calls the mode makes (the non-blocking start + wait where the
// communicator has them), and notes when it left the barrier and each collective; the sequence
// starts when its last rank left the barrier (as the simulation starts every rank at 0) and a
// collective ends when its last rank left it (the ranks share one host's monotonic clock). Back to back, as in a step, because that is
// how they ran slower: a rank that leaves one collective early (its last sends still in the
// kernel's buffers) starts the next while its peers still receive, and two flows of a shaped link
// then contend with each other's acknowledgements. Rank 0 keeps each collective's mean end over
// the repetitions. The simulation (sim/) plays the same sequence on the probed platform and finds,
// for each collective in turn, the share of the link at which the engine's messages must move for it to
// end when it did: the engine's calibration (gloo, Open MPI over TCP and the local ring each move
// bytes at their own fraction of the link). Not for: the link itself (cluster/probe.hpp measures
// it with bulk TCP).
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/hierarchical.hpp"
#include "core/reduction.hpp"
#include "core/schedule.hpp"

namespace dpbench {

struct CollectiveProbe {
  CollectiveKind kind = CollectiveKind::allreduce;
  std::size_t floats = 0;           // the collective's size (v-collectives: split evenly over the ranks)
  std::vector<std::size_t> counts;  // v-collectives: the segments, when not even ([world_size], sum floats)
  double end_s = 0;    // when its last rank left it, seconds after the last rank left the sequence's barrier
  double seconds = 0;  // end_s less the previous collective's end_s (the first: end_s)
};

// Two ranks of one node sending each other a message in turn (a ping-pong of Communicator's
// blocking send and recv), the engine's transfer inside a node, as latency + bytes / rate: the
// latency half the round trip of one float, the rate 2 x floats x 4 bytes over the round trip of
// `floats` less the two latencies (over the whole round trip where they are half of it or more).
struct IntraNodeProbe {
  std::size_t floats = 0;
  double seconds = 0;    // the median round trip of `floats`
  double latency_s = 0;  // one way: half the median round trip of one float
  double bytes_per_s = 0;
  int repetitions = 0;
  std::vector<double> small_round_trips, large_round_trips;  // every repetition's, seconds (for pool_probes)
  int runs = 1;                                              // the runs whose round trips it holds (pool_probes)
};

struct EngineProbe {
  std::vector<CollectiveProbe> collectives;
  int repetitions = 0;
  std::optional<IntraNodeProbe> intra_node;  // with two ranks or more on node 0
  // Every repetition's ends ([repetitions][collectives], as CollectiveProbe::end_s), for pool_probes.
  std::vector<std::vector<double>> repetition_ends;
  int runs = 1;  // the runs whose repetitions it holds (pool_probes)
  // The host's reduction by size (core/reduction.hpp probe_reduction), timed by rank 0 after the
  // collectives, the other ranks waiting for it; pooled: each size's median over the runs. Empty
  // where it was not probed.
  ReductionCost reduction;
};

// One probe from the probes of several runs of one configuration (a `run`'s repetitions): each
// collective's mean end over all their repetitions, and the intra-node link from the medians of
// all their round trips; `runs` counts the probes. One run's 5 repetitions on a host whose ranks
// share its cores swung from run to run (the node hierarchy's all-reduce at 1 Gbit/s: 41 to 81 ms
// a run, its repetitions 23 to 132 ms); three runs' 15 hold it steadier. nullopt where the probes
// do not probe the same collectives on the same floats, or one is missing; the intra-node link is
// pooled only where every probe has one of the same size.
std::optional<EngineProbe> pool_probes(const std::vector<const EngineProbe*>& probes);

// The intra-node link from its round trips (IntraNodeProbe's reading of them); `floats` the large
// message's. Throws InputError when either list is empty.
IntraNodeProbe intra_node_from_round_trips(std::size_t floats, std::vector<double> small, std::vector<double> large);

// The rounds of a sparse step's small messages the engine probe times (a strategy's
// probed_collectives under --sparse-grad: sharded_ps's pairwise sendrecv rounds, allreduce's half
// as many all-gathers of the rows), the second half at kLargeProbeFactor x the size: the
// simulation fits their cost per message and per byte, and one round alone samples too little of
// a host whose ranks share cores.
inline constexpr int kSparseProbeRounds = 12;

// Whether the simulation fits `kind`'s probe as a cost per message (an overhead, the link's rate
// kept) rather than as a share of the link: the small messages of a sparse step (sharded_ps's
// pairwise exchanges, p2p; allreduce's all-gather of the rows) and the root's transfers one rank
// after the other (ps's scatter and gather, whose sizes follow the batch: their capped probes stand
// for a GPT-2 step's 206 MB of logits per rank). analysis/run_simulation.cpp.
inline bool probed_per_message(CollectiveKind kind, bool sparse_grad) {
  return kind == CollectiveKind::p2p || kind == CollectiveKind::scatter || kind == CollectiveKind::gather ||
         (sparse_grad && kind == CollectiveKind::allgather);
}
// A sparse run probes the second half of each per-message collective's entries at this many times
// their size (at most kMaxProbeFloats), so that the simulation fits how the cost per message grows
// with its bytes (SMPI's os/or: a constant and a cost per byte).
inline constexpr std::size_t kLargeProbeFactor = 16;

// The unmeasured repetitions before the measured ones: at least this long (seconds), at least one.
inline constexpr float kProbeWarmupSeconds = 0.3f;

// Every rank of `comm` calls it with the same arguments: each kind once on a few floats (the
// connections' first use), then `reps` times the sequence of `kinds` on `floats` floats each, each
// time after a barrier; more times (at most kMaxRepetitions) while the repetitions, at the first
// one's time on rank 0, take less than min_seconds together, after unmeasured ones for
// warmup_seconds (at least one). Returns the probe (each collective's mean end) on rank 0, nullopt
// on the others. Throws InputError when floats < world_size or reps < 1, and what the communicator
// throws.
// hierarchy_ranks_per_node > 0: the allreduce is core/hierarchical.hpp's over nodes of that many
// ranks in `format` (--hierarchy node, --comm-hook), and so are the reduce-scatter and all-gather
// (sharded_ps --hierarchy node) and the reduce and broadcast (ps), as the steps run them.
std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        std::size_t floats, int reps, double min_seconds = 0,
                                        int hierarchy_ranks_per_node = 0, WireFormat format = WireFormat::fp32);
// The same with each kind on its own size: floats[j] for kinds[j] (every one >= world_size), and
// a v-collective (reduce-scatter, all-gather) over segments[j] where that is given and not empty
// ([world_size] counts summing to floats[j]; sharded_ps's push meets its servers' ranges within a
// bucket, most of a bucket to one server), else over even ones.
std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        const std::vector<std::size_t>& floats, int reps, double min_seconds = 0,
                                        int hierarchy_ranks_per_node = 0, WireFormat format = WireFormat::fp32,
                                        const std::vector<std::vector<std::size_t>>& segments = {},
                                        float warmup_seconds = kProbeWarmupSeconds);
// The largest size a run's probe gives one collective: DDP's default bucket_cap_mb (25 MiB of
// floats), the largest message a bucketed step sends, so that the probe meets what the step's
// messages meet at their size (an incast that overflows a link's queue at a bucket's size does not
// at 1 MiB).
inline constexpr std::size_t kMaxProbeFloats = 25 * 1024 * 1024 / sizeof(float);
// At most this many measured repetitions of a short sequence in its min_seconds: one repetition
// of a few all-reduces of kilobytes on a host whose ranks share its cores ranges over 10x (4 ranks
// on 2 cores: the mean of 45 had a relative standard error of 19 %).
inline constexpr int kMaxRepetitions = 100;

// Every rank of `comm` calls it: when ranks_per_node >= 2 (rank r sits on node r /
// ranks_per_node), local ranks 2i and 2i + 1 of every node ping-pong one float, then `floats`
// floats, after a barrier, `reps` times (once more first, unmeasured: the connections' first use),
// all pairs at once, as every rank of a step communicates; rank 0 returns its pair's median round
// trips. Returns nullopt on every rank but 0 and when ranks_per_node < 2 or the world has one
// rank. Throws InputError when floats or reps is 0, and what the communicator throws.
// The intra-node probe's message at least (16 MiB): long enough that the copy, not the
// round trip's latency, sets its time.
inline constexpr std::size_t kIntraNodeProbeFloats = std::size_t{1} << 22;
// Repetitions of the reduction probe at each size (EngineProbe::reduction; about 20 ms in all on
// a 2-core Xeon).
inline constexpr int kReductionProbeRepetitions = 5;
// `clock` (seconds, called on the rank's own thread; empty: std::chrono::steady_clock) times the
// round trips, for a test to script them.
std::optional<IntraNodeProbe> probe_intra_node(Communicator& comm, int ranks_per_node, std::size_t floats, int reps,
                                               const std::function<double()>& clock = {});

}  // namespace dpbench
