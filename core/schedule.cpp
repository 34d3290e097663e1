#include "core/schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>
#include <tuple>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hierarchical.hpp"
#include "core/ring.hpp"

namespace dpbench {

namespace {
constexpr double kFloat = sizeof(float);
constexpr std::size_t kMpiSegmentElems = 65536 / sizeof(float);  // coll_tuned_*_segmentsize
constexpr std::size_t kLocalSliceElems = 32 * 1024;              // LocalCommunicator::kSliceElems
}  // namespace

const char* collective_name(CollectiveKind kind) {
  static const char* const names[kCollectiveKinds] = {"p2p",       "allreduce", "reduce", "broadcast", "reduce_scatter",
                                                      "allgather", "scatter",   "gather"};
  return names[static_cast<int>(kind)];
}

namespace {
struct LabelTable {
  std::mutex mutex;
  std::deque<std::string> texts{""};
};
LabelTable& label_table() {
  static LabelTable table;
  return table;
}
}  // namespace

std::uint16_t schedule_label(const char* label) {
  LabelTable& t = label_table();
  const std::lock_guard<std::mutex> lock(t.mutex);
  for (std::size_t i = 0; i < t.texts.size(); ++i) {
    if (std::strcmp(t.texts[i].c_str(), label) == 0) return static_cast<std::uint16_t>(i);
  }
  if (t.texts.size() > 0xffff) throw Error(fmt::format("schedule: more than 65,535 compute labels ({})", label));
  t.texts.emplace_back(label);
  return static_cast<std::uint16_t>(t.texts.size() - 1);
}

const char* ScheduleOp::label() const {
  if (kind != ScheduleOpKind::compute) return "";
  LabelTable& t = label_table();
  const std::lock_guard<std::mutex> lock(t.mutex);
  return t.texts.at(label_id).c_str();
}

std::vector<std::size_t> even_counts(std::size_t n, int p) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(std::max(p, 1)),
                                  n / static_cast<std::size_t>(std::max(p, 1)));
  counts.back() += n % counts.size();
  return counts;
}

StepSchedule::StepSchedule(int world_size, int played) : world_(world_size) {
  if (world_size < 1) throw Error(fmt::format("schedule: world size {} must be at least 1", world_size));
  if (played < 0 || (played > 0 && world_size % played != 0)) {
    throw Error(fmt::format("schedule: cannot fold {} ranks onto {}", world_size, played));
  }
  ranks_.resize(static_cast<std::size_t>(played > 0 ? played : world_size));
}

StepSchedule StepSchedule::only_ranks(int world_size, int kept) {
  if (kept < 1 || kept > world_size) throw Error(fmt::format("schedule: keep {} of {} ranks", kept, world_size));
  StepSchedule s(world_size);
  s.ranks_.resize(static_cast<std::size_t>(kept));
  s.wrap_peers_ = false;
  return s;
}

void StepSchedule::settle_folded_messages() {
  if (!folded()) return;
  // (stream, from, to) -> the sends' bytes in order; each receive then takes its send's.
  std::map<std::tuple<int, int, int>, std::vector<double>> sent;
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    const auto& streams = ranks_[static_cast<std::size_t>(r)].streams;
    for (int s = 0; s < static_cast<int>(streams.size()); ++s) {
      for (const auto& op : streams[static_cast<std::size_t>(s)]) {
        if (op.kind == ScheduleOpKind::send) sent[{s, r, op.peer()}].push_back(op.bytes());
      }
    }
  }
  std::map<std::tuple<int, int, int>, std::size_t> taken;
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    auto& streams = ranks_[static_cast<std::size_t>(r)].streams;
    for (int s = 0; s < static_cast<int>(streams.size()); ++s) {
      for (auto& op : streams[static_cast<std::size_t>(s)]) {
        if (op.kind != ScheduleOpKind::recv) continue;
        const std::tuple<int, int, int> key{s, op.peer(), r};
        const auto it = sent.find(key);
        std::size_t& k = taken[key];
        if (it == sent.end() || k >= it->second.size()) {
          throw Error(fmt::format("schedule: folded onto {} ranks, rank {} receives more from rank {} than it sends "
                                  "(the schedule is not the same on every node)",
                                  ranks_.size(), r, op.peer()));
        }
        op.amount = it->second[k++];
      }
    }
  }
  for (const auto& [key, bytes] : sent) {
    if (taken[key] != bytes.size()) {
      throw Error(fmt::format("schedule: folded onto {} ranks, rank {} sends more to rank {} than it receives",
                              ranks_.size(), std::get<1>(key), std::get<2>(key)));
    }
  }
}

bool StepSchedule::is_rotation_symmetric(int shift) const {
  if (static_cast<int>(ranks_.size()) < world_) throw Error("schedule: is_rotation_symmetric of a folded schedule");
  if (shift <= 0 || world_ % shift != 0) return false;
  const auto same = [&](const ScheduleOp& a, const ScheduleOp& b) {
    if (a.kind != b.kind || a.collective != b.collective || a.label_id != b.label_id) return false;
    if (a.kind != ScheduleOpKind::send && a.kind != ScheduleOpKind::recv)
      return a.index == b.index && a.amount == b.amount;
    const double big = std::max(a.bytes(), b.bytes());
    return (a.peer() + shift) % world_ == b.peer() && (big == 0 || std::abs(a.bytes() - b.bytes()) <= 0.05 * big);
  };
  for (int r = 0; r < world_; ++r) {
    const RankProgram& a = ranks_[static_cast<std::size_t>(r)];
    const RankProgram& b = ranks_[static_cast<std::size_t>((r + shift) % world_)];
    if (a.events != b.events || a.streams.size() != b.streams.size()) return false;
    for (std::size_t s = 0; s < a.streams.size(); ++s) {
      if (!std::equal(a.streams[s].begin(), a.streams[s].end(), b.streams[s].begin(), b.streams[s].end(), same)) {
        return false;
      }
    }
  }
  return true;
}

std::vector<ScheduleOp>& StepSchedule::stream_of(int rank, int stream) {
  auto& streams = ranks_.at(static_cast<std::size_t>(rank)).streams;
  if (streams.size() <= static_cast<std::size_t>(stream)) streams.resize(static_cast<std::size_t>(stream) + 1);
  return streams[static_cast<std::size_t>(stream)];
}

void StepSchedule::compute(int rank, int stream, double seconds, const char* label) {
  if (!keeps(rank)) return;
  ScheduleOp op;
  op.kind = ScheduleOpKind::compute;
  op.amount = seconds;
  op.label_id = schedule_label(label);
  stream_of(rank, stream).push_back(op);
}

void StepSchedule::send(int rank, int stream, int peer, double bytes) {
  if (!keeps(rank)) return;
  stream_of(rank, stream).push_back({bytes, peer_of(peer), ScheduleOpKind::send, collective_});
}

void StepSchedule::recv(int rank, int stream, int peer, double bytes) {
  if (!keeps(rank)) return;
  stream_of(rank, stream).push_back({bytes, peer_of(peer), ScheduleOpKind::recv, collective_});
}

void StepSchedule::wait_recvs(int rank, int stream) {
  if (keeps(rank)) stream_of(rank, stream).push_back({0, -1, ScheduleOpKind::wait_recvs});
}
void StepSchedule::wait_all(int rank, int stream) {
  if (keeps(rank)) stream_of(rank, stream).push_back({0, -1, ScheduleOpKind::wait_all});
}

// A dropped rank's events are never recorded or waited for: any number does.
int StepSchedule::new_event(int rank) {
  if (rank < 0 || rank >= world_) throw Error(fmt::format("schedule: rank {} of {}", rank, world_));
  return keeps(rank) ? ranks_[static_cast<std::size_t>(rank)].events++ : 0;
}

void StepSchedule::record(int rank, int stream, int event) {
  if (keeps(rank)) stream_of(rank, stream).push_back({0, event, ScheduleOpKind::record});
}

void StepSchedule::wait_event(int rank, int stream, int event) {
  if (keeps(rank)) stream_of(rank, stream).push_back({0, event, ScheduleOpKind::wait_event});
}

std::vector<bool> StepSchedule::collectives_used() const {
  std::vector<bool> used(kCollectiveKinds, false);
  for (const auto& rank : ranks_) {
    for (const auto& stream : rank.streams) {
      for (const auto& op : stream) {
        if (op.kind == ScheduleOpKind::send) used[static_cast<std::size_t>(op.collective)] = true;
      }
    }
  }
  return used;
}

void StepSchedule::shrink_to_fit() {
  for (auto& rank : ranks_) {
    for (auto& stream : rank.streams) stream.shrink_to_fit();
  }
}

long StepSchedule::messages() const {
  long n = 0;
  for (const auto& rank : ranks_) {
    for (const auto& stream : rank.streams) {
      n += std::count_if(stream.begin(), stream.end(),
                         [](const ScheduleOp& op) { return op.kind == ScheduleOpKind::send; });
    }
  }
  return n;
}

double StepSchedule::bytes_sent(int rank) const {
  double b = 0;
  for (const auto& stream : ranks_.at(static_cast<std::size_t>(rank)).streams) {
    for (const auto& op : stream) b += op.kind == ScheduleOpKind::send ? op.bytes() : 0.0;
  }
  return b;
}

double StepSchedule::bytes_received(int rank) const {
  double b = 0;
  for (const auto& stream : ranks_.at(static_cast<std::size_t>(rank)).streams) {
    for (const auto& op : stream) b += op.kind == ScheduleOpKind::recv ? op.bytes() : 0.0;
  }
  return b;
}

namespace {
// Per node, {out, in}: the sum of count(op) over the sends and receives between nodes.
template <typename Count>
std::vector<std::pair<double, double>> per_node_link(const std::vector<RankProgram>& ranks,
                                                     const std::vector<int>& node_of, int nodes, Count count) {
  std::vector<std::pair<double, double>> sums(static_cast<std::size_t>(nodes), {0.0, 0.0});
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const int mine = node_of.at(r);
    for (const auto& stream : ranks[r].streams) {
      for (const auto& op : stream) {
        if (op.kind != ScheduleOpKind::send && op.kind != ScheduleOpKind::recv) continue;
        if (node_of.at(static_cast<std::size_t>(op.peer())) == mine) continue;
        auto& b = sums.at(static_cast<std::size_t>(mine));
        (op.kind == ScheduleOpKind::send ? b.first : b.second) += count(op);
      }
    }
  }
  return sums;
}
}  // namespace

std::vector<std::pair<double, double>> StepSchedule::node_link_bytes(const std::vector<int>& node_of, int nodes) const {
  return per_node_link(ranks_, node_of, nodes, [](const ScheduleOp& op) { return op.bytes(); });
}

std::vector<std::pair<double, double>> StepSchedule::node_link_messages(const std::vector<int>& node_of,
                                                                        int nodes) const {
  return per_node_link(ranks_, node_of, nodes, [](const ScheduleOp&) { return 1.0; });
}

void StepSchedule::check_matched() const {
  // (stream, from, to) -> the count and an order-sensitive hash of the messages' bytes, as sent
  // and as received: constant memory per pair, as a 2,048-rank ring holds 60 million messages.
  const auto key = [](int stream, int from, int to) {
    return (static_cast<std::uint64_t>(stream) << 42) | (static_cast<std::uint64_t>(from) << 21) |
           static_cast<std::uint64_t>(to);
  };
  struct Side {
    std::uint64_t count = 0, hash = 0;
    void add(double bytes) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &bytes, sizeof bits);
      hash = (hash ^ bits) * 0x100000001b3ULL + ++count;  // FNV-1a's prime, mixed with the position
    }
    bool operator==(const Side&) const = default;
  };
  std::unordered_map<std::uint64_t, std::pair<Side, Side>> flows;
  for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
    const auto& streams = ranks_[static_cast<std::size_t>(r)].streams;
    for (int s = 0; s < static_cast<int>(streams.size()); ++s) {
      for (const auto& op : streams[static_cast<std::size_t>(s)]) {
        if (op.kind == ScheduleOpKind::send) flows[key(s, r, op.peer())].first.add(op.bytes());
        if (op.kind == ScheduleOpKind::recv) flows[key(s, op.peer(), r)].second.add(op.bytes());
      }
    }
  }
  for (const auto& [k, f] : flows) {
    const auto stream = static_cast<int>(k >> 42), from = static_cast<int>((k >> 21) & 0x1fffff),
               to = static_cast<int>(k & 0x1fffff);
    if (!(f.first == f.second)) {
      throw Error(fmt::format("schedule: stream {} from rank {} to rank {}: {} sends against {} receives, or their "
                              "bytes differ",
                              stream, from, to, f.first.count, f.second.count));
    }
  }
}

Collectives::Collectives(StepSchedule& schedule, Backend engine, int stream)
    : s_(schedule), engine_(engine), stream_(stream) {
  if (engine_ != Backend::local && engine_ != Backend::mpi && engine_ != Backend::gloo) {
    throw InputError(fmt::format("schedule: engine '{}' has no schedule (local, mpi, gloo)", name(engine_)));
  }
}

std::size_t Collectives::slice(std::size_t n) const {
  if (engine_ == Backend::mpi) return kMpiSegmentElems;
  return std::min(kLocalSliceElems, std::max<std::size_t>(1, (n + 7) / 8));  // LocalCommunicator::chain_slice
}

// One ring half over `counts` (every rank sends to rank+1 and receives from rank-1 at each of
// the p-1 steps), the chunk of each step as core/ring.hpp has it: step(rank, p, shift, s).
void Collectives::ring_half(const std::vector<std::size_t>& counts, int shift, RingStep (*step)(int, int, int, int),
                            const std::vector<int>& members) {
  const int p = static_cast<int>(members.size());
  const auto rank = [&members, p](int pos) { return members[static_cast<std::size_t>(ring_mod(pos, p))]; };
  std::vector<int> positions;  // of the ranks the schedule keeps: a folded ring of p costs p x 2 nodes' ranks
  for (int pos = 0; pos < p; ++pos) {
    if (s_.keeps(rank(pos))) positions.push_back(pos);
  }
  for (int k = 0; k + 1 < p; ++k) {
    for (int pos : positions) {
      const RingStep st = step(pos, p, shift, k);
      const int r = rank(pos);
      s_.send(r, stream_, rank(pos + 1), kFloat * static_cast<double>(counts[static_cast<std::size_t>(st.send)]));
      s_.recv(r, stream_, rank(pos - 1), kFloat * static_cast<double>(counts[static_cast<std::size_t>(st.recv)]));
      s_.wait_all(r, stream_);
      if (step == ring_reduce_scatter_step) reduction(r, counts[static_cast<std::size_t>(st.recv)]);
    }
  }
}

std::vector<int> Collectives::all_ranks() const {
  std::vector<int> out(static_cast<std::size_t>(s_.world_size()));
  for (int r = 0; r < s_.world_size(); ++r) out[static_cast<std::size_t>(r)] = r;
  return out;
}

void Collectives::ring_reduce_scatter(const std::vector<std::size_t>& counts, int shift) {
  ring_half(counts, shift, ring_reduce_scatter_step, all_ranks());
}

void Collectives::ring_all_gather(const std::vector<std::size_t>& counts, int shift) {
  ring_half(counts, shift, ring_all_gather_step, all_ranks());
}

// core/hierarchical.hpp's three phases, every node's rings one after the other (each rank is in
// one ring per phase, so its messages keep their order).
void Collectives::hierarchical_allreduce(std::size_t n, int ranks_per_node) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  const int k = ranks_per_node;
  const int nodes = p / k;
  std::vector<std::size_t> node_chunks;
  for (int l = 0; l < k; ++l) node_chunks.push_back(ring_chunk(n, k, l).length);
  as(CollectiveKind::allreduce, [&] {
    for (int node = 0; node < nodes; ++node)
      ring_half(node_chunks, 0, ring_reduce_scatter_step, node_ring(p, k, node * k));
    for (int l = 0; l < k; ++l) {
      std::vector<std::size_t> sub;
      for (int i = 0; i < nodes; ++i)
        sub.push_back(ring_chunk(node_chunks[static_cast<std::size_t>(l)], nodes, i).length);
      ring_half(sub, 1, ring_reduce_scatter_step, cross_node_ring(p, k, l));
      ring_half(sub, 1, ring_all_gather_step, cross_node_ring(p, k, l));
    }
    for (int node = 0; node < nodes; ++node) ring_half(node_chunks, 0, ring_all_gather_step, node_ring(p, k, node * k));
  });
}

void Collectives::allreduce(std::size_t n) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  if (tree_ > 0 && hierarchy_ == 0 && format_ == WireFormat::fp32) return tree_allreduce(n, tree_);
  if (format_ != WireFormat::fp32)
    return hierarchical_allreduce(wire_slots(n, format_), hierarchy_ > 0 ? hierarchy_ : p);
  if (hierarchy_ > 0) return hierarchical_allreduce(n, hierarchy_);
  std::vector<std::size_t> chunks;
  for (int i = 0; i < p; ++i) chunks.push_back(ring_chunk(n, p, i).length);
  as(CollectiveKind::allreduce, [&] {
    ring_reduce_scatter(chunks, 1);
    ring_all_gather(chunks, 1);
  });
}

TreeLinks binary_tree_links(int n, int member) {
  if (n < 1 || member < 0 || member >= n) throw Error(fmt::format("binary tree: no member {} of {}", member, n));
  int bit = 1;  // member's lowest set bit; for member 0, the power of two at or above n
  while (bit < n && (member & bit) == 0) bit <<= 1;
  TreeLinks t;
  if (member == 0) {
    if (n > 1) t.child0 = bit >> 1;
    return t;
  }
  t.parent = (member ^ bit) | (bit << 1);
  if (t.parent >= n) t.parent = member ^ bit;
  int low = bit >> 1;
  if (low == 0) return t;
  t.child0 = member - low;
  while (low > 0 && member + low >= n) low >>= 1;
  if (low > 0) t.child1 = member + low;
  return t;
}

TreeLinks double_tree_links(int n, int member, int tree) {
  if (tree != 0 && tree != 1) throw Error(fmt::format("double binary tree: no tree {} (0 or 1)", tree));
  if (tree == 0) return binary_tree_links(n, member);
  const bool shift = n % 2 == 0;
  const auto in_tree0 = [n, shift](int r) { return shift ? (r + n - 1) % n : n - 1 - r; };
  const auto back = [n, shift](int x) { return x < 0 ? -1 : shift ? (x + 1) % n : n - 1 - x; };
  const TreeLinks t = binary_tree_links(n, in_tree0(member));
  return {back(t.parent), back(t.child0), back(t.child1)};
}

namespace {
// Rank r's parent and children in tree t of a tree all-reduce of p ranks over nodes of g ranks (the
// last node the rest): inside its node a chain from the last rank to the first; the nodes' first
// ranks in the double binary tree.
struct RankTree {
  int parent = -1;
  std::vector<int> children;
};
RankTree rank_tree(int r, int t, int g, int p) {
  RankTree out;
  const int local = r % g, nodes = (p + g - 1) / g;
  if (local + 1 < g && r + 1 < p) out.children.push_back(r + 1);
  if (local > 0) {
    out.parent = r - 1;
    return out;
  }
  const TreeLinks links = double_tree_links(nodes, r / g, t);
  out.parent = links.parent < 0 ? -1 : links.parent * g;
  for (int c : {links.child0, links.child1}) {
    if (c >= 0) out.children.push_back(c * g);
  }
  return out;
}
}  // namespace

void Collectives::tree_allreduce(std::size_t n, int ranks_per_node) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  if (stream_ >= kTreeFirstStream) {
    throw Error(fmt::format("tree all-reduce: called on stream {}, one of its own ({} to {})", stream_,
                            kTreeFirstStream, kTreeFirstStream + 3));
  }
  if (ranks_per_node < 1) throw Error(fmt::format("tree all-reduce: nodes of {} ranks", ranks_per_node));
  std::array<std::vector<std::size_t>, 2> chunks;
  for (int t = 0; t < 2; ++t) {
    const std::size_t half = t == 0 ? n / 2 : n - n / 2;
    const double count = std::ceil(kFloat * static_cast<double>(half) / kTreeChunkBytes);
    if (half > 0) chunks[static_cast<std::size_t>(t)] = even_counts(half, std::max(1, static_cast<int>(count)));
  }
  as(CollectiveKind::allreduce, [&] {
    for (int r = 0; r < p; ++r) {
      if (!s_.keeps(r)) continue;
      std::vector<int> ends;
      for (int t = 0; t < 2; ++t) {
        const RankTree tree = rank_tree(r, t, ranks_per_node, p);
        tree_pipelines(r, kTreeFirstStream + 2 * t, tree.parent, tree.children, chunks[static_cast<std::size_t>(t)],
                       ends);
      }
      for (int e : ends) s_.wait_event(r, stream_, e);
    }
  });
}

// One rank's two pipelines of one tree: chunk by chunk, the reduce up on stream `up` and the
// broadcast down on up + 1 (the root's broadcast of a chunk waits for its reduction). A rank
// receives chunk c while its send of chunk c - 1 is under way and sends c once both are done (two
// buffers, one send in flight per direction). Both start when the caller's stream gets here, and
// the events they record at their ends go to `ends`.
void Collectives::tree_pipelines(int r, int up, int parent, const std::vector<int>& children,
                                 const std::vector<std::size_t>& chunks, std::vector<int>& ends) {
  if (chunks.empty()) return;
  const int down = up + 1;
  for (int stream : {up, down}) {
    const int start = s_.new_event(r);
    s_.record(r, stream_, start);
    s_.wait_event(r, stream, start);
  }
  const int reduced = parent < 0 ? s_.new_event(r) : -1;
  for (std::size_t c : chunks) {
    const double bytes = kFloat * static_cast<double>(c);
    for (int child : children) s_.recv(r, up, child, bytes);
    s_.wait_all(r, up);
    if (parent >= 0) {
      s_.send(r, up, parent, bytes);
    } else {
      s_.record(r, up, reduced);
    }
  }
  for (std::size_t c : chunks) {
    const double bytes = kFloat * static_cast<double>(c);
    if (parent >= 0) {
      s_.recv(r, down, parent, bytes);
    } else {
      s_.wait_event(r, down, reduced);
    }
    s_.wait_all(r, down);
    for (int child : children) s_.send(r, down, child, bytes);
  }
  for (int stream : {up, down}) {
    s_.wait_all(r, stream);
    ends.push_back(s_.new_event(r));
    s_.record(r, stream, ends.back());
  }
}

// The pipelined chain: position j >= 1 receives each slice from position j-1 and, unless it is
// the chain's end, passes it on to j+1 while the next slice comes in.
// Open MPI's pipelined reduce (coll_tuned reduce algorithm 3) runs its chain the other way round
// the ring: towards the root through the ranks below it (dir = -1); everything else goes up.
void Collectives::chain(std::size_t n, int root, bool reduce) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  const std::size_t len = slice(n);
  const int dir = reduce && engine_ == Backend::mpi ? -1 : 1;
  for (int r = 0; r < p; ++r) {
    const int pos = reduce ? ring_mod(dir * (r - root) - 1, p) : ring_mod(r - root, p);
    for (std::size_t off = 0; off < n; off += len) {
      const double bytes = kFloat * static_cast<double>(std::min(len, n - off));
      if (pos >= 1) {
        s_.recv(r, stream_, ring_mod(r - dir, p), bytes);
        s_.wait_recvs(r, stream_);
        if (reduce) reduction(r, std::min(len, n - off));
      }
      if (pos < p - 1) s_.send(r, stream_, ring_mod(r + dir, p), bytes);
    }
    s_.wait_all(r, stream_);
  }
}

// libnbc's MPI_Ireduce_scatter (Open MPI's non-blocking reduce-scatter, which has no ring): the
// whole vector reduced to rank 0 along a binomial tree (virtual rank v receives from v + 2^i while
// bit i of v is clear, then sends to v - 2^i), then rank 0 sends every rank its segment.
void Collectives::libnbc_reduce_scatterv(const std::vector<std::size_t>& counts) {
  const int p = s_.world_size();
  std::size_t n = 0;
  for (std::size_t c : counts) n += c;
  const double bytes = kFloat * static_cast<double>(n);
  for (int r = 0; r < p && n > 0; ++r) {
    for (int mask = 1; mask < p; mask <<= 1) {
      if ((r & mask) != 0) {
        s_.send(r, stream_, r - mask, bytes);
        s_.wait_all(r, stream_);
        break;
      }
      if (r + mask < p) {
        s_.recv(r, stream_, r + mask, bytes);
        s_.wait_recvs(r, stream_);
        reduction(r, n);
      }
    }
  }
  for (int r = 1; r < p; ++r) {
    if (counts[static_cast<std::size_t>(r)] == 0) continue;
    s_.send(0, stream_, r, kFloat * static_cast<double>(counts[static_cast<std::size_t>(r)]));
    s_.recv(r, stream_, 0, kFloat * static_cast<double>(counts[static_cast<std::size_t>(r)]));
    s_.wait_all(r, stream_);
  }
  s_.wait_all(0, stream_);
}

// gloo/reduce.cc: a reduce-scatter around the ring towards the lower neighbour (rank r sends
// every chunk but its own and ends with chunk r), then every rank sends its chunk to the root.
void Collectives::gloo_reduce(std::size_t n, int root) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  auto chunk = [n, p](int i) { return kFloat * static_cast<double>(ring_chunk(n, p, ring_mod(i, p)).length); };
  for (int step = 0; step + 1 < p; ++step) {
    for (int r = 0; r < p; ++r) {
      s_.send(r, stream_, ring_mod(r - 1, p), chunk(r + step + 1));
      s_.recv(r, stream_, ring_mod(r + 1, p), chunk(r + step + 2));
      s_.wait_all(r, stream_);
      reduction(r, ring_chunk(n, p, ring_mod(r + step + 2, p)).length);
    }
  }
  for (int r = 0; r < p; ++r) {
    if (r == root) {
      for (int q = 0; q < p; ++q) {
        if (q != root) s_.recv(r, stream_, q, chunk(q));
      }
    } else {
      s_.send(r, stream_, root, chunk(r));
    }
    s_.wait_all(r, stream_);
  }
}

// gloo/broadcast.cc: ranks renumbered so that the root is 0; virtual rank v receives from v with
// its top bit cleared, then starts every send to v + 2^i (i at or above v's bit length) at once.
void Collectives::binomial_broadcast(std::size_t n, int root) {
  const int p = s_.world_size();
  if (p < 2 || n == 0) return;
  const double bytes = kFloat * static_cast<double>(n);
  for (int r = 0; r < p; ++r) {
    const int v = ring_mod(r - root, p);
    int bits = 0;
    while ((1 << bits) <= v) ++bits;
    if (v > 0) {
      s_.recv(r, stream_, ring_mod(v - (1 << (bits - 1)) + root, p), bytes);
      s_.wait_recvs(r, stream_);
    }
    for (int i = bits; (1 << i) < p; ++i) {
      if (v + (1 << i) < p) s_.send(r, stream_, ring_mod(v + (1 << i) + root, p), bytes);
    }
    s_.wait_all(r, stream_);
  }
}

void Collectives::reduce(std::size_t n, int root) {
  as(CollectiveKind::reduce, [&] {
    if (hierarchy_ > 0 && s_.world_size() > 1) return node_reduce_or_broadcast(n, root, true);
    if (engine_ == Backend::gloo) {
      gloo_reduce(n, root);
    } else {
      chain(n, root, true);
    }
  });
}

void Collectives::broadcast(std::size_t n, int root) {
  as(CollectiveKind::broadcast, [&] {
    if (hierarchy_ > 0 && s_.world_size() > 1) return node_reduce_or_broadcast(n, root, false);
    if (engine_ == Backend::gloo) {
      binomial_broadcast(n, root);
    } else {
      chain(n, root, false);
    }
  });
}

void Collectives::reduce_scatterv(const std::vector<std::size_t>& counts) {
  if (s_.world_size() < 2) return;
  as(CollectiveKind::reduce_scatter, [&] {
    if (hierarchy_ > 0) return node_segment_rings(counts, ring_reduce_scatter_step);
    if (engine_ == Backend::mpi) return libnbc_reduce_scatterv(counts);
    if (engine_ != Backend::gloo) return ring_reduce_scatter(counts, 0);
    for (int r = 0; r < s_.world_size(); ++r) gloo_reduce(counts[static_cast<std::size_t>(r)], r);
  });
}

void Collectives::allgatherv(const std::vector<std::size_t>& counts) {
  if (s_.world_size() < 2) return;
  as(CollectiveKind::allgather, [&] {
    if (hierarchy_ > 0) return node_segment_rings(counts, ring_all_gather_step);
    ring_all_gather(counts, 0);
  });
}

// core/hierarchical.hpp's reduce (the segment reduce-scatter, then every rank's segment to
// rank 0 in rank order) or broadcast (the segments from rank 0, then the segment all-gather).
void Collectives::node_reduce_or_broadcast(std::size_t n, int root, bool reduce) {
  if (root != 0)
    throw Error(fmt::format("schedule: the node hierarchy reduces to and broadcasts from rank 0, not {}", root));
  const int p = s_.world_size();
  const std::vector<std::size_t> counts = hierarchical_segment_counts(n, p, hierarchy_);
  if (!reduce) {
    for (int r = 1; r < p; ++r) {
      if (counts[static_cast<std::size_t>(r)] > 0) one_transfer(counts[static_cast<std::size_t>(r)], 0, r);
    }
    return node_segment_rings(counts, ring_all_gather_step);
  }
  node_segment_rings(counts, ring_reduce_scatter_step);
  for (int r = 1; r < p; ++r) {
    if (counts[static_cast<std::size_t>(r)] > 0) one_transfer(counts[static_cast<std::size_t>(r)], r, 0);
  }
}

// core/hierarchical.hpp's reduce-scatter (inside the nodes, then across them) or all-gather
// (across, then inside) over per-rank segments in hierarchical_segment_order; every node's rings
// of a phase one after the other.
void Collectives::node_segment_rings(const std::vector<std::size_t>& counts, RingStep (*step)(int, int, int, int)) {
  const int p = s_.world_size(), k = hierarchy_, nodes = p / k;
  std::vector<std::size_t> spans(static_cast<std::size_t>(k), 0);
  std::vector<std::vector<std::size_t>> segments(static_cast<std::size_t>(k));
  for (int r = 0; r < p; ++r) {
    spans[static_cast<std::size_t>(r % k)] += counts.at(static_cast<std::size_t>(r));
    segments[static_cast<std::size_t>(r % k)].push_back(counts[static_cast<std::size_t>(r)]);  // node r / k
  }
  const auto inside = [&] {
    for (int node = 0; node < nodes; ++node) ring_half(spans, 0, step, node_ring(p, k, node * k));
  };
  const auto across = [&] {
    for (int l = 0; l < k; ++l) ring_half(segments[static_cast<std::size_t>(l)], 0, step, cross_node_ring(p, k, l));
  };
  if (step == ring_reduce_scatter_step) {
    inside();
    across();
  } else {
    across();
    inside();
  }
}

void Collectives::scatterv(const std::vector<std::size_t>& counts, int root) {
  const int p = s_.world_size();
  if (p < 2) return;
  as(CollectiveKind::scatter, [&] {
    for (int r = 0; r < p; ++r) {
      if (r == root || counts[static_cast<std::size_t>(r)] == 0) continue;
      one_transfer(counts[static_cast<std::size_t>(r)], root, r);
    }
  });
}

void Collectives::gatherv(const std::vector<std::size_t>& counts, int root) {
  const int p = s_.world_size();
  if (p < 2) return;
  as(CollectiveKind::gather, [&] {
    for (int r = 0; r < p; ++r) {
      if (r == root || counts[static_cast<std::size_t>(r)] == 0) continue;
      one_transfer(counts[static_cast<std::size_t>(r)], r, root);
    }
  });
}

void Collectives::send_recv(std::size_t n, int from, int to) { one_transfer(n, from, to); }

void Collectives::reduction(int rank, std::size_t n) {
  const ReductionCost& cost = s_.reduction();
  if (cost.empty() || n == 0) return;
  s_.compute(rank, stream_, cost.seconds(kFloat * static_cast<double>(n)), "reduce");
}

void Collectives::run(CollectiveKind kind, std::size_t n) { run(kind, n, {}); }

void Collectives::run(CollectiveKind kind, std::size_t n, const std::vector<std::size_t>& segments) {
  const std::vector<std::size_t> counts = segments.empty() ? even_counts(n, s_.world_size()) : segments;
  switch (kind) {
    case CollectiveKind::allreduce: return allreduce(n);
    case CollectiveKind::reduce: return reduce(n, 0);
    case CollectiveKind::broadcast: return broadcast(n, 0);
    case CollectiveKind::reduce_scatter: return reduce_scatterv(counts);
    case CollectiveKind::allgather: return allgatherv(counts);
    case CollectiveKind::scatter: return scatterv(counts, 0);
    case CollectiveKind::gather: return gatherv(counts, 0);
    case CollectiveKind::p2p: return sendrecv_round(s_, 1, kFloat * static_cast<double>(counts.front()), stream_);
  }
}

void sendrecv_round(StepSchedule& s, int shift, double bytes, int stream) {
  const int p = s.world_size();
  for (int r = 0; r < p; ++r) {
    s.send(r, stream, ((r + shift) % p + p) % p, bytes);
    s.recv(r, stream, ((r - shift) % p + p) % p, bytes);
    s.wait_all(r, stream);
  }
}

void Collectives::one_transfer(std::size_t n, int from, int to) {
  const double bytes = kFloat * static_cast<double>(n);
  s_.send(from, stream_, to, bytes);
  s_.wait_all(from, stream_);
  s_.recv(to, stream_, from, bytes);
  s_.wait_all(to, stream_);
}

}  // namespace dpbench
