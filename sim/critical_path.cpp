#include "sim/critical_path.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {

// A transfer's route through sim/simgrid/player.cpp's zones, as link directions: the sender's
// intra-node link up, its node's NIC up, its leaf's uplink up, then the receiver's leaf uplink,
// NIC and intra-node link down; with the sum of their latencies and the narrowest bandwidth.
struct Route {
  double latency_s = 0;
  double bytes_per_s = std::numeric_limits<double>::infinity();
  int links[6] = {};
  int count = 0;
  void add(int link, double rate, double latency) {
    links[count++] = link;
    bytes_per_s = std::min(bytes_per_s, rate);
    latency_s += latency;
  }
};

// The platform's link directions, numbered: rank r's intra-node link 2r (up), 2r+1 (down); node
// n's NIC 2p + 2n, +1; leaf l's uplink 2p + 2N + 2l, +1.
class Links {
 public:
  Links(const SimPlatform& pf, int p)
      : pf_(pf),
        p_(p),
        nodes_((p + pf.ranks_per_node - 1) / pf.ranks_per_node),
        leaves_(pf.nodes_per_leaf > 0 ? (nodes_ + pf.nodes_per_leaf - 1) / pf.nodes_per_leaf : 0) {}
  int count() const { return 2 * p_ + 2 * nodes_ + 2 * leaves_; }
  int node(int rank) const { return rank / pf_.ranks_per_node; }
  Route route(int from, int to) const {
    Route r;
    const int nf = node(from), nt = node(to);
    const bool intra = pf_.ranks_per_node > 1;
    if (intra) r.add(2 * from, pf_.intra_bytes_per_s, pf_.intra_latency_s);
    if (nf != nt) {
      const SimNode& a = pf_.nodes[static_cast<std::size_t>(nf)];
      const SimNode& b = pf_.nodes[static_cast<std::size_t>(nt)];
      r.add(2 * p_ + 2 * nf, a.up_bytes_per_s, a.latency_s);
      if (leaves_ > 0 && leaf(nf) != leaf(nt)) {
        r.add(2 * p_ + 2 * nodes_ + 2 * leaf(nf), pf_.leaf_up_bytes_per_s, pf_.leaf_latency_s);
        r.add(2 * p_ + 2 * nodes_ + 2 * leaf(nt) + 1, pf_.leaf_up_bytes_per_s, pf_.leaf_latency_s);
      }
      r.add(2 * p_ + 2 * nt + 1, b.down_bytes_per_s, b.latency_s);
    }
    if (intra) r.add(2 * to + 1, pf_.intra_bytes_per_s, pf_.intra_latency_s);
    return r;
  }

 private:
  int leaf(int node) const { return node / pf_.nodes_per_leaf; }
  const SimPlatform& pf_;
  int p_, nodes_, leaves_;
};

struct Comm {
  double posted[2] = {-1, -1};  // [0] send, [1] receive
  double end = -1;              // known once both are posted
  double bytes = 0;
  CollectiveKind kind = CollectiveKind::p2p;
  int waiter[2] = {-1, -1};  // the stream blocked on it, per side
  int refs = 2;              // sides that have not yet waited for it
};

struct Stream {
  int rank = 0, index = 0;
  const std::vector<ScheduleOp>* ops = nullptr;
  std::size_t pc = 0;
  int step = 0;
  double t = 0;
  std::vector<int> comms[2];  // started and not yet waited for: [0] sends, [1] receives
  std::size_t waited = 0;     // of the list being waited for, how many have ended
  int phase = 0;              // in a wait of both lists: 0 receives first, 1 then sends
  bool done = false;
};

struct Event {
  std::vector<double> released;  // in order
  std::size_t acquired = 0;
  int waiter = -1;
  int acquirer = -1;
};

class Evaluator {
 public:
  Evaluator(const StepSchedule& s, const SimPlatform& pf, int steps)
      : pf_(pf),
        steps_(steps),
        p_(static_cast<int>(s.ranks().size())),
        links_(pf, p_),
        busy_(static_cast<std::size_t>(links_.count())),
        ends_(static_cast<std::size_t>(p_)),
        events_(static_cast<std::size_t>(p_)) {
    static const std::vector<ScheduleOp> kEmpty;
    for (int r = 0; r < p_; ++r) {
      const RankProgram& prog = s.ranks()[static_cast<std::size_t>(r)];
      events_[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(prog.events));
      for (std::size_t i = 0; i < std::max<std::size_t>(prog.streams.size(), 1); ++i) {
        Stream st;
        st.rank = r;
        st.index = static_cast<int>(i);
        st.ops = i < prog.streams.size() ? &prog.streams[i] : &kEmpty;
        streams_.push_back(std::move(st));
      }
    }
  }

  // False when the premise fails (an event with two releasers or waiters, a deadlock, a link
  // carrying two transfers at once).
  bool run() {
    std::vector<int> ready(streams_.size());
    for (std::size_t i = 0; i < ready.size(); ++i) ready[i] = static_cast<int>(i);
    while (!ready.empty() && ok_) {
      const int i = ready.back();
      ready.pop_back();
      advance(i, ready);
    }
    if (!ok_) return false;
    for (const Stream& st : streams_) {
      if (!st.done) return false;
    }
    return uncontended();
  }

  SimulationResult result() const {
    SimulationResult r;
    for (const auto& e : ends_) {
      r.rank_step_s.push_back(steps_ == 1 ? e.back() : (e.back() - e.front()) / (steps_ - 1));
    }
    r.step_s = r.rank_step_s.front();
    for (const Stream& st : streams_) r.simulated_s = std::max(r.simulated_s, st.t);
    r.messages = messages_;
    return r;
  }

 private:
  // Runs stream i until it blocks (registering where it waits) or finishes its steps.
  void advance(int i, std::vector<int>& ready) {
    Stream& st = streams_[static_cast<std::size_t>(i)];
    while (!st.done && ok_) {
      if (st.pc == st.ops->size()) {
        if (!wait_lists(st, i, true)) return;
        if (st.index == 0) ends_[static_cast<std::size_t>(st.rank)].push_back(st.t);
        st.pc = 0;
        st.done = ++st.step == steps_;
        continue;
      }
      const ScheduleOp& op = (*st.ops)[st.pc];
      switch (op.kind) {
        case ScheduleOpKind::compute: st.t += op.seconds() > 0 ? op.seconds() : 0.0; break;
        case ScheduleOpKind::send:
          st.t += overhead(st.rank, op);
          st.comms[0].push_back(post(st, op, 0, ready));
          ++messages_;
          break;
        case ScheduleOpKind::recv: st.comms[1].push_back(post(st, op, 1, ready)); break;
        case ScheduleOpKind::wait_recvs:
          if (!wait_list(st, i, 1)) return;
          break;
        case ScheduleOpKind::wait_all:
          if (!wait_lists(st, i, false)) return;
          break;
        case ScheduleOpKind::record: record(st, op.event(), ready); break;
        case ScheduleOpKind::wait_event:
          if (!acquire(st, i, op.event())) return;
          break;
      }
      ++st.pc;
    }
  }

  // Waits for receives then sends (wait_all), or sends then receives (a step's end, as the
  // player does); false while blocked.
  bool wait_lists(Stream& st, int i, bool sends_first) {
    const int first = sends_first ? 0 : 1;
    if (st.phase == 0) {
      if (!wait_list(st, i, first)) return false;
      st.phase = 1;
    }
    if (!wait_list(st, i, 1 - first)) return false;
    st.phase = 0;
    return true;
  }

  // Waits for every comm of st.comms[side]; false while one has not ended (st is then its waiter).
  bool wait_list(Stream& st, int i, int side) {
    std::vector<int>& list = st.comms[side];
    for (; st.waited < list.size(); ++st.waited) {
      Comm& c = comms_[static_cast<std::size_t>(list[st.waited])];
      if (c.end < 0) {
        c.waiter[side] = i;
        return false;
      }
      st.t = std::max(st.t, c.end);
    }
    for (int id : list) release(id);
    list.clear();
    st.waited = 0;
    return true;
  }

  double overhead(int rank, const ScheduleOp& op) const {
    if (links_.node(rank) == links_.node(op.peer())) return 0.0;
    return message_overhead(pf_, op);
  }

  // Posts st's side of op's transfer at st.t; matches it with the other side's oldest unmatched
  // post on the same mailbox (stream, sender, receiver), as SimGrid's mailboxes do.
  int post(const Stream& st, const ScheduleOp& op, int side, std::vector<int>& ready) {
    const int from = side == 0 ? st.rank : op.peer(), to = side == 0 ? op.peer() : st.rank;
    const std::uint64_t key = (static_cast<std::uint64_t>(st.index) << 48) | (static_cast<std::uint64_t>(from) << 24) |
                              static_cast<std::uint64_t>(to);
    Box& box = boxes_[key];
    std::vector<int>& waiting = box.posts[1 - side];
    std::size_t& head = box.head[1 - side];
    if (head == waiting.size()) {
      const int id = new_comm();
      Comm& c = comms_[static_cast<std::size_t>(id)];
      c.posted[side] = st.t;
      c.bytes = op.bytes();
      c.kind = op.collective;
      box.posts[side].push_back(id);
      return id;
    }
    const int id = waiting[head++];
    if (head == waiting.size() && box.head[side] == box.posts[side].size()) boxes_.erase(key);  // a p2p pair's only
    Comm& c = comms_[static_cast<std::size_t>(id)];
    c.posted[side] = st.t;
    start(c, from, to);
    for (int& w : c.waiter) {
      if (w >= 0) ready.push_back(w);
      w = -1;
    }
    return id;
  }

  // Both sides are posted: the transfer's end, and the span it holds each link of its route.
  void start(Comm& c, int from, int to) {
    const Route route = links_.route(from, to);
    double rate = route.bytes_per_s;
    const auto k = static_cast<std::size_t>(c.kind);
    const int nf = links_.node(from), nt = links_.node(to);
    if (nf != nt && k < pf_.engine_efficiency.size() && pf_.engine_efficiency[k] > 0) {
      const double link = std::min(pf_.nodes[static_cast<std::size_t>(nf)].up_bytes_per_s,
                                   pf_.nodes[static_cast<std::size_t>(nt)].down_bytes_per_s);
      rate = std::min(rate, pf_.engine_efficiency[k] * link);
    }
    const double begin = std::max(c.posted[0], c.posted[1]) + route.latency_s;
    c.end = begin + c.bytes / rate;
    if (c.bytes <= 0) return;
    for (int l = 0; l < route.count; ++l) busy_[static_cast<std::size_t>(route.links[l])].emplace_back(begin, c.end);
  }

  void record(const Stream& st, int event, std::vector<int>& ready) {
    Event& e = events_[static_cast<std::size_t>(st.rank)].at(static_cast<std::size_t>(event));
    if (!e.released.empty() && st.t < e.released.back()) ok_ = false;  // a second releaser
    e.released.push_back(st.t);
    if (e.waiter >= 0) ready.push_back(e.waiter);
    e.waiter = -1;
  }

  bool acquire(Stream& st, int i, int event) {
    Event& e = events_[static_cast<std::size_t>(st.rank)].at(static_cast<std::size_t>(event));
    if (e.acquirer >= 0 && e.acquirer != i) ok_ = false;  // a second waiter
    e.acquirer = i;
    if (e.acquired == e.released.size()) {
      e.waiter = i;
      return false;
    }
    st.t = std::max(st.t, e.released[e.acquired++]);
    return true;
  }

  int new_comm() {
    if (!free_.empty()) {
      const int id = free_.back();
      free_.pop_back();
      comms_[static_cast<std::size_t>(id)] = Comm{};
      return id;
    }
    comms_.emplace_back();
    return static_cast<int>(comms_.size() - 1);
  }
  void release(int id) {
    if (--comms_[static_cast<std::size_t>(id)].refs == 0) free_.push_back(id);
  }

  // True when no link direction carried two transfers' bytes at once (to a nanosecond).
  bool uncontended() {
    for (auto& spans : busy_) {
      std::sort(spans.begin(), spans.end());
      double until = -1;
      for (const auto& [begin, end] : spans) {
        if (begin < until - 1e-9) return false;
        until = std::max(until, end);
      }
    }
    return true;
  }

  const SimPlatform& pf_;
  int steps_, p_;
  Links links_;
  std::vector<std::vector<std::pair<double, double>>> busy_;  // [link direction]: spans of bytes
  std::vector<std::vector<double>> ends_;                     // [rank]: stream 0's step ends
  std::vector<std::vector<Event>> events_;                    // [rank][event]
  std::vector<Stream> streams_;
  std::vector<Comm> comms_;
  std::vector<int> free_;
  // A mailbox's unmatched posts, [side], the first `head` of them matched already. Erased once
  // empty: a p2p schedule's p^2 pairs would otherwise hold one each.
  struct Box {
    std::vector<int> posts[2];
    std::size_t head[2] = {0, 0};
  };
  std::unordered_map<std::uint64_t, Box> boxes_;
  long messages_ = 0;
  bool ok_ = true;
};

}  // namespace

std::optional<SimulationResult> evaluate_uncontended(const StepSchedule& schedule, const SimPlatform& platform,
                                                     int steps) {
  if (steps < 1) throw Error(fmt::format("simulation: {} steps; at least 1", steps));
  if (!platform.platform_file.empty() || platform.send_buffer_bytes > 0) return std::nullopt;
  platform.check(static_cast<int>(schedule.ranks().size()));
  schedule.check_matched();
  const auto t0 = std::chrono::steady_clock::now();
  Evaluator evaluator(schedule, platform, steps);
  if (!evaluator.run()) return std::nullopt;
  SimulationResult r = evaluator.result();
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.config = {{"engine", "critical path (no link carried two transfers at once)"}, {"steps", steps}};
  return r;
}

SimulationResult simulate_fast(const StepSchedule& schedule, const SimPlatform& platform, int steps,
                               double max_simgrid_messages) {
  if (auto r = evaluate_uncontended(schedule, platform, steps)) return *std::move(r);
  const double messages = static_cast<double>(schedule.messages());
  if (messages > max_simgrid_messages) {
    throw Error(fmt::format("{:.1f} million messages over shared links, which SimGrid plays one by one: more than "
                            "the {:.1f} million allowed",
                            messages / 1e6, max_simgrid_messages / 1e6));
  }
  return simulate(schedule, platform, steps);
}

}  // namespace dpbench
