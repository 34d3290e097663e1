// A step's message schedule: for every rank, in-order streams of operations (compute for some
// seconds; send or receive bytes to or from a peer; wait; record or wait for an event), the way a
// GPU rank runs a compute stream and a communication stream. The collective builders (class
// Collectives) write, message by message, the algorithms the engines run: the ring of
// core/ring.hpp, the pipelined chain of the local engine and of Open MPI's pinned pipeline,
// gloo's reduce (ring reduce-scatter + gather to the root) and binomial broadcast, and the root
// scatter/gather. The byte counts the communicators report (core/comm.hpp) and the simulation
// (sim/) are both read from these descriptions, so they cannot drift apart. This file holds no
// time model of its own: a schedule is played by a simulator; the one cost it writes, the host's
// reductions, is given to it measured (set_reduction).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/hierarchical.hpp"
#include "core/names.hpp"
#include "core/reduction.hpp"
#include "core/ring.hpp"

namespace dpbench {

enum class ScheduleOpKind : std::uint8_t {
  compute,     // spend `seconds` on the rank's processor
  send,        // start sending `bytes` to `peer` (completes at a later wait_all)
  recv,        // start receiving `bytes` from `peer` (completes at a later wait_recvs or wait_all)
  wait_recvs,  // block until every receive this stream started has completed
  wait_all,    // block until every send and receive this stream started has completed
  record,      // mark `event` as reached (one waiter per record)
  wait_event,  // block until `event` has been recorded once more than it was waited for
};

// The collective a message belongs to (p2p: none), so that a simulator can give each its engine's
// calibrated speed (sim/simulate.hpp).
enum class CollectiveKind : std::uint8_t {
  p2p,
  allreduce,
  reduce,
  broadcast,
  reduce_scatter,
  allgather,
  scatter,
  gather
};
inline constexpr int kCollectiveKinds = 8;
// "p2p", "allreduce", "reduce", "broadcast", "reduce_scatter", "allgather", "scatter", "gather".
const char* collective_name(CollectiveKind kind);

// One collective a rank ran inside a step, stamped by std::chrono::steady_clock (seconds since its
// epoch): the host's monotonic clock, which every rank of a run on one host shares (threads, and
// the processes of an emulated cluster), so that the ranks' stamps compare. What the in-run
// simulation calibrates the engine on where a mode records them (analysis/run_simulation.hpp in_step_collectives).
struct CollectiveTiming {
  CollectiveKind kind = CollectiveKind::allreduce;
  // allreduce, reduce, broadcast: the buffer's floats; allgather, reduce_scatter: this rank's own
  // segment's.
  std::size_t floats = 0;
  double enter_s = 0, exit_s = 0;
};
// Now on CollectiveTiming's clock: std::chrono::steady_clock's seconds since its epoch.
inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
// Runs the collective f() and appends its timing (kind, floats, entry and exit) to `log`.
template <typename F>
void time_collective(std::vector<CollectiveTiming>& log, CollectiveKind kind, std::size_t floats, F&& f) {
  const double enter = steady_seconds();
  f();
  log.push_back({kind, floats, enter, steady_seconds()});
}

// 16 bytes, as a 16,384-rank schedule holds hundreds of millions of ops: one number (a send's or
// receive's bytes, a compute's seconds) and one index (a send's or receive's peer, an event),
// each read through the accessor the op's kind names.
struct ScheduleOp {
  double amount = 0;        // send, recv: bytes; compute: seconds
  std::int32_t index = -1;  // send, recv: the peer; record, wait_event: the event
  ScheduleOpKind kind = ScheduleOpKind::compute;
  CollectiveKind collective = CollectiveKind::p2p;  // send, recv
  std::uint16_t label_id = 0;                       // compute: schedule_label()'s number of its label

  double bytes() const { return amount; }
  double seconds() const { return amount; }
  int peer() const { return index; }
  int event() const { return index; }
  // compute: "forward", "backward", "optimizer", ...; "" for other kinds.
  const char* label() const;
};
static_assert(sizeof(ScheduleOp) == 16);

// The number of a compute op's label (interned once per distinct text; thread-safe). Throws Error
// past 65,535 distinct labels.
std::uint16_t schedule_label(const char* label);

// n floats split over p segments: n / p each, the last one also the remainder. [p]
std::vector<std::size_t> even_counts(std::size_t n, int p);

// One rank's streams; stream 0 is the rank's main (compute) stream, whose end is the step's end.
struct RankProgram {
  std::vector<std::vector<ScheduleOp>> streams;
  int events = 0;  // events are numbered 0..events-1
};

// The programs of every rank for one training step. Messages match in order per (stream,
// sender, receiver): the k-th send from a to b on stream s meets the k-th receive from a at b on
// stream s, and the two must agree on the bytes.
//
// Folded (played > 0): a schedule of world_size ranks of which only ranks 0..played-1 are kept,
// every peer taken modulo `played` and the ops of the other ranks dropped, so that the builders
// run unchanged. Where the schedule is the same for rank r and rank r + played (peers shifted
// alike) and so is the platform, rank r of the folded schedule does exactly what it does in the
// whole one: a ring of 1,024 ranks on identical nodes is played as a ring of two nodes' ranks
// taking the 2 x 1,023 steps of chunks of n / 1,024. is_rotation_symmetric() checks the premise.
class StepSchedule {
 public:
  // Throws Error when world_size < 1, or when played is not 0 or a divisor of world_size.
  explicit StepSchedule(int world_size, int played = 0);
  // The programs of ranks 0..kept-1 only, their peers as they are: what those ranks send and
  // receive (bytes_sent(), node_link_bytes() of their node) at any world size, for the cost of
  // their own ops. Not to be played or matched. Throws Error unless 1 <= kept <= world_size.
  static StepSchedule only_ranks(int world_size, int kept);

  int world_size() const { return world_; }
  // The programs kept: world_size() of them, or `played` when folded.
  const std::vector<RankProgram>& ranks() const { return ranks_; }
  bool folded() const { return wrap_peers_ && static_cast<int>(ranks_.size()) < world_; }
  // Whether `rank`'s ops are kept (every rank's unless folded or only_ranks()).
  bool keeps(int rank) const { return rank < static_cast<int>(ranks_.size()); }
  // Folded: gives every receive the bytes of the send it meets (the ranks that stand for one
  // another differ by a chunk's remainder of at most world_size floats). Throws Error when the
  // sends and receives of a pair of ranks do not pair up (the schedule was not symmetric).
  void settle_folded_messages();
  // True when every rank's ops equal those of rank r + `shift` (mod world_size) with peers
  // shifted by `shift`, bytes within 5 % (the chunks' remainders) and times equal: the premise of
  // folding by `shift`. Not for a folded schedule (Error).
  bool is_rotation_symmetric(int shift) const;

  void compute(int rank, int stream, double seconds, const char* label);
  void send(int rank, int stream, int peer, double bytes);
  void recv(int rank, int stream, int peer, double bytes);
  void wait_recvs(int rank, int stream);
  void wait_all(int rank, int stream);
  int new_event(int rank);  // returns the event's number
  void record(int rank, int stream, int event);
  void wait_event(int rank, int stream, int event);
  // The collective that the sends and receives added from now on belong to (Collectives sets it).
  void set_collective(CollectiveKind kind) { collective_ = kind; }
  // What the host's reductions cost (core/reduction.hpp): from now on the collectives that sum
  // what they receive (Collectives) follow each such receive with a "reduce" compute of its
  // bytes. Empty (the default): reductions cost nothing.
  void set_reduction(ReductionCost cost) { reduction_ = std::move(cost); }
  const ReductionCost& reduction() const { return reduction_; }
  // Which collectives the schedule's messages belong to, [kCollectiveKinds].
  std::vector<bool> collectives_used() const;

  // Gives back the streams' spare capacity (a built schedule of 60 million messages holds a third
  // more than its ops otherwise).
  void shrink_to_fit();
  // The sends of the ranks kept, over every stream.
  long messages() const;
  // Bytes rank `rank` sends / receives in the step, over every stream.
  double bytes_sent(int rank) const;
  double bytes_received(int rank) const;
  // Bytes that cross each node's link per step, when rank r runs on node node_of[r]: out = what
  // the node's ranks send to ranks of other nodes, in = what they receive from them (traffic
  // between ranks of one node never crosses it). [nodes] pairs {out, in}; node_of: [world_size].
  std::vector<std::pair<double, double>> node_link_bytes(const std::vector<int>& node_of, int nodes) const;
  // The same count in messages: {out, in} per node.
  std::vector<std::pair<double, double>> node_link_messages(const std::vector<int>& node_of, int nodes) const;
  // Throws Error naming the first unmatched message (a send without its receive, or bytes that
  // disagree), so a builder's mistake is found before a simulator hangs on it.
  void check_matched() const;

 private:
  std::vector<ScheduleOp>& stream_of(int rank, int stream);
  int peer_of(int peer) const { return wrap_peers_ ? peer % static_cast<int>(ranks_.size()) : peer; }
  int world_ = 0;
  std::vector<RankProgram> ranks_;
  CollectiveKind collective_ = CollectiveKind::p2p;
  bool wrap_peers_ = true;  // false: only_ranks()
  ReductionCost reduction_;
};

// A member's place in a binary tree over n members: its parent and up to two children (-1 where
// there is none).
struct TreeLinks {
  int parent = -1;
  int child0 = -1;
  int child1 = -1;
};
// The in-order binary tree over members 0..n-1 that NCCL builds (src/graph/trees.cc,
// ncclGetBtree): member 0 is the root and has one child (the largest power of two below n);
// member r with lowest set bit b has children r - b/2 and r + b/2 (the latter shrunk into range)
// and parent (r ^ b) | 2b, or r ^ b where that is out of range. Depth ceil(log2 n). Throws Error
// unless 0 <= member < n.
TreeLinks binary_tree_links(int n, int member);
// The double binary tree (Sanders, Speck and Traeff, "Two-tree algorithms for full bandwidth
// broadcast, reduction and scan", Parallel Computing 2009; NCCL's ncclGetDtree): tree 0 is
// binary_tree_links; tree 1 the same tree over the members shifted by one when n is even (so every
// member with children in one tree is a leaf in the other) and mirrored (n - 1 - r) when n is odd.
TreeLinks double_tree_links(int n, int member, int tree);

// The chunk a tree all-reduce pipelines: NCCL's step of 512 KiB (NCCL_BUFFSIZE 4 MiB over
// NCCL_STEPS 8) on each of 8 channels (one per NIC of an 8-GPU node), which move together over a
// node's links as the platform lumps its NICs into one.
inline constexpr double kTreeChunkBytes = 8 * 512.0 * 1024;
// The streams a tree all-reduce runs its four pipelines on (each tree's reduce up and broadcast
// down): kTreeFirstStream .. kTreeFirstStream + 3 of every rank.
inline constexpr int kTreeFirstStream = 2;

// One round of a pairwise exchange (Communicator::sendrecv) on `stream`: every rank r sends
// `bytes` to r + shift and receives as many from r - shift (mod world_size), then waits for both.
void sendrecv_round(StepSchedule& s, int shift, double bytes, int stream = 0);

// The engine whose algorithms carry a backend's collectives in a schedule: mpi's and gloo's their
// own, every other backend's the local ring's.
inline Backend schedule_engine(Backend comm) {
  return comm == Backend::mpi || comm == Backend::gloo ? comm : Backend::local;
}
// The collectives family of a backend (LinkModel::collectives): gloo's own, the ring otherwise.
inline CollectiveFamily collective_family(Backend comm) {
  return comm == Backend::gloo ? CollectiveFamily::gloo : CollectiveFamily::ring;
}
// The engine a family's schedule is played with: gloo, or the local ring.
inline Backend family_engine(CollectiveFamily family) {
  return family == CollectiveFamily::gloo ? Backend::gloo : Backend::local;
}

// The collectives of core/comm.hpp as messages, by engine (the backend whose algorithms run them):
//   local: ring all-reduce / reduce-scatter / all-gather; pipelined chain reduce and broadcast
//            in slices of LocalCommunicator::chain_slice(n) (min(1 MiB of floats, n / 8));
//   mpi:   what the mpirun launcher pins in Open MPI (cluster/launcher_mpirun.cpp): the same rings,
//            chain reduce (the other way round the ring) and broadcast in 64 KiB segments; the
//            reduce-scatter is libnbc's non-blocking one (sharded_ps's push), which has no ring:
//            a binomial reduce of the whole vector to rank 0, then a scatter of the segments;
//   gloo:  ring all-reduce and all-gather; reduce = ring reduce-scatter, then every rank sends
//            its chunk to the root (gloo/reduce.cc); binomial-tree broadcast (gloo/broadcast.cc);
//            reduce-scatter over segments = one reduce per segment, to its owner, in rank order.
// Every collective runs on stream `stream` of every rank; counts are float elements.
class Collectives {
 public:
  // Throws InputError for an engine without a schedule (nccl).
  Collectives(StepSchedule& schedule, Backend engine, int stream = 0);

  void allreduce(std::size_t n);
  void reduce(std::size_t n, int root);
  void broadcast(std::size_t n, int root);
  void reduce_scatterv(const std::vector<std::size_t>& counts);
  void allgatherv(const std::vector<std::size_t>& counts);
  // Root exchange (DataParallel's scatter and gather): the root sends (receives) every other
  // rank's segment, one rank after the other in rank order.
  void scatterv(const std::vector<std::size_t>& counts, int root);
  void gatherv(const std::vector<std::size_t>& counts, int root);
  // One blocking point-to-point transfer of n floats from `from` to `to`.
  void send_recv(std::size_t n, int from, int to);
  // `rank` sums n floats it received into its own, on the collective's stream: a "reduce"
  // compute of the schedule's reduction cost (nothing when it has none). The collectives above
  // call it where their engine sums: after each receive of a ring's reduce-scatter step, of a
  // reducing chain's slice, of libnbc's binomial reduce and of gloo's reduce-scatter; not in
  // NCCL's tree, whose sums run in the GPU's kernels.
  void reduction(int rank, std::size_t n);
  // `kind` on n floats the way the engine probe runs it (train/engine_probe.hpp): root 0, the
  // v-collectives over even_counts(n, world_size); p2p: one sendrecv_round at shift 1 of n /
  // world_size floats.
  void run(CollectiveKind kind, std::size_t n);
  // The same over `counts` for the v-collectives (reduce_scatter, allgather, scatter, gather) when
  // it is not empty.
  void run(CollectiveKind kind, std::size_t n, const std::vector<std::size_t>& counts);

  // Runs `run` with the schedule's messages tagged as `kind`, then tags p2p again.
  template <class F>
  void as(CollectiveKind kind, F&& run) {
    s_.set_collective(kind);
    run();
    s_.set_collective(CollectiveKind::p2p);
  }

  // Ring (reduce-scatter, shift 0, or all-gather) over the chunks of `chunk(i)`; public for the
  // builders of hierarchical variants.
  void ring_reduce_scatter(const std::vector<std::size_t>& counts, int shift);
  void ring_all_gather(const std::vector<std::size_t>& counts, int shift);
  // core/hierarchical.hpp's all-reduce of n floats over nodes of ranks_per_node ranks (tagged
  // allreduce), whatever the engine: dpbench runs it over sendrecv on every backend.
  void hierarchical_allreduce(std::size_t n, int ranks_per_node);
  // From now on allreduce(), reduce_scatterv(), allgatherv(), reduce() and broadcast() (and
  // run()'s) are core/hierarchical.hpp's over nodes of ranks_per_node ranks (--hierarchy node;
  // the v-collectives' segments in hierarchical_segment_order; reduce and broadcast with root 0
  // only); 0: the engine's flat ones again.
  void set_node_hierarchy(int ranks_per_node) { hierarchy_ = ranks_per_node; }
  // From now on allreduce() is NCCL's tree (tree_allreduce over nodes of ranks_per_node ranks,
  // NCCL_ALGO=Tree) where it moves fp32 without a node hierarchy; 0: the engine's ring again.
  void set_tree_allreduce(int ranks_per_node) { tree_ = ranks_per_node; }
  // NCCL's tree all-reduce of n floats (tagged allreduce) over nodes of ranks_per_node ranks
  // (src/device/all_reduce.h, runTreeUpDown): half of the floats on each tree of
  // double_tree_links over the nodes (the last one the ranks left over), whose members are the
  // nodes' first ranks; inside a node a chain from its last rank to its first. Each half is cut into chunks of kTreeChunkBytes; a chunk
  // is reduced up (a rank receives it from its children, then sends the sum to its parent) and
  // broadcast down from the root, the two directions pipelined on streams of their own
  // (kTreeFirstStream..+3), which start after and end before the caller's stream's next op. Throws
  // Error when the caller's stream is one of those, or ranks_per_node < 1.
  void tree_allreduce(std::size_t n, int ranks_per_node);
  // From now on allreduce() moves its floats as `format` (--comm-hook fp16, bf16): packed, over
  // core/hierarchical.hpp's rings (one node of every rank unless a node hierarchy is set).
  void set_wire_format(WireFormat format) { format_ = format; }

 private:
  // A ring half among `members` in ring order (position i sends to i+1), core/ring.hpp's steps
  // by position.
  void ring_half(const std::vector<std::size_t>& counts, int shift, RingStep (*step)(int, int, int, int),
                 const std::vector<int>& members);
  std::vector<int> all_ranks() const;
  void node_segment_rings(const std::vector<std::size_t>& counts, RingStep (*step)(int, int, int, int));
  void node_reduce_or_broadcast(std::size_t n, int root, bool reduce);
  void tree_pipelines(int r, int up, int parent, const std::vector<int>& children,
                      const std::vector<std::size_t>& chunks, std::vector<int>& ends);
  void chain(std::size_t n, int root, bool reduce);
  void one_transfer(std::size_t n, int from, int to);
  void gloo_reduce(std::size_t n, int root);
  void libnbc_reduce_scatterv(const std::vector<std::size_t>& counts);
  void binomial_broadcast(std::size_t n, int root);
  std::size_t slice(std::size_t n) const;

  StepSchedule& s_;
  Backend engine_;
  int stream_;
  int hierarchy_ = 0;
  int tree_ = 0;
  WireFormat format_ = WireFormat::fp32;
};

}  // namespace dpbench
