#include "core/rendezvous.hpp"

#include <array>
#include <charconv>
#include <cstdint>
#include <functional>
#include <string_view>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "core/error.hpp"

namespace dpbench {

namespace {

using Clock = std::chrono::steady_clock;

// How long a closing socket keeps trying to deliver what it was last given (the acks of rank 0,
// a failure report): the process may exit right after.
constexpr int kLingerMs = 2000;

// Rank 0 refuses a single message larger than this (ZMQ_MAXMSGSIZE: the sender is disconnected),
// so that a stray sender cannot make it allocate without bound. Far above a rank's result record.
constexpr std::int64_t kMaxMessageBytes = std::int64_t{256} << 20;

// Dropped messages rank 0 warns about one by one; later ones are counted only.
constexpr int kMaxDropWarnings = 10;

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1"; }

// The decimal integer `s` is, or -1 when it is not one (signs, spaces and overflow included).
int parse_int(std::string_view s) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty() ? v : -1;
}

// `s` quoted for a one-line message: at most 32 bytes, bytes outside printable ASCII as \xNN.
std::string printable(std::string_view s) {
  constexpr std::size_t kMax = 32;
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kMax; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') ? std::string(1, static_cast<char>(c))
                                                             : fmt::format("\\x{:02x}", c);
  }
  return out + (s.size() > kMax ? fmt::format("'... ({} bytes)", s.size()) : "'");
}

}  // namespace

std::optional<RendezvousMessage> decode_rendezvous_message(const std::vector<std::string>& frames, int world_size,
                                                           std::string* why_dropped) {
  auto drop = [&](std::string why) -> std::optional<RendezvousMessage> {
    if (why_dropped != nullptr) *why_dropped = std::move(why);
    return std::nullopt;
  };
  // frames[0] is the routing id ZeroMQ adds; a sender gives op, tag, rank, world_size, payload.
  if (frames.size() != 6) {
    return drop(fmt::format("{} frames, not 6 (routing id, op, tag, rank, world size, payload)", frames.size()));
  }
  const std::string& op = frames[1];
  if (op != "join" && op != "result" && op != "failed") return drop("unknown op " + printable(op));
  const int rank = parse_int(frames[3]);
  const int size = parse_int(frames[4]);
  if (rank < 0 || size < 1) {
    return drop(fmt::format("RANK={} WORLD_SIZE={}: not numbers", printable(frames[3]), printable(frames[4])));
  }
  if (size != world_size) {
    return drop(fmt::format("a process joined as RANK={} with WORLD_SIZE={}, but this job has WORLD_SIZE={}", rank,
                            size, world_size));
  }
  if (rank < 1 || rank >= world_size) {
    return drop(fmt::format("RANK={} is out of range for WORLD_SIZE={} (ranks 1..{} connect to rank 0)", rank,
                            world_size, world_size - 1));
  }
  return RendezvousMessage{frames[0], op, frames[2], rank, size, frames[5]};
}

struct Rendezvous::State {
  std::string addr;
  int port = 0;
  int world_size = 1;
  int rank = 0;
  std::chrono::milliseconds timeout;
  zmq::context_t context{1};
  zmq::socket_t socket;
  // rank 0: messages read while waiting for others (a rank already at the next run), the routing
  // id of every rank heard from, and the failures reported.
  std::vector<RendezvousMessage> stash;
  std::map<int, std::string> identities;
  std::vector<std::string> failures;
  int dropped = 0;         // messages that were not this job's ...
  std::string first_drop;  // ... and why the first one was dropped
  std::mutex mutex;        // fail() may come from another thread than the exchanges

  std::string where() const { return fmt::format("{}:{}", addr, port); }

  // rank 0: warns (the first kMaxDropWarnings times) that a message was dropped, and why.
  void drop(const std::string& why) {
    if (dropped == 0) first_drop = why;
    ++dropped;
    if (dropped <= kMaxDropWarnings) {
      fmt::print(stderr, "dpbench: warning: rendezvous on {}: dropped a message that is not this job's: {}{}\n",
                 where(), why, dropped == kMaxDropWarnings ? " (further ones are not shown)" : "");
    }
  }

  // rank 0: the next message, from the stash or the socket, until `deadline`; nullopt on timeout.
  // Messages that are not this job's are dropped with a warning (drop()); a stashed message is
  // the one a rank sent before waiting for rank 0's answer, so a second one for the same rank
  // means two processes use that rank: Error.
  std::optional<RendezvousMessage> next(Clock::time_point deadline,
                                        const std::function<bool(const RendezvousMessage&)>& wanted) {
    for (auto it = stash.begin(); it != stash.end(); ++it) {
      if (wanted(*it)) {
        RendezvousMessage m = std::move(*it);
        stash.erase(it);
        return m;
      }
    }
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return std::nullopt;
      zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) continue;
      std::vector<std::string> strings;
      for (const auto& f : frames) strings.push_back(f.to_string());
      std::string why;
      std::optional<RendezvousMessage> decoded = decode_rendezvous_message(strings, world_size, &why);
      if (!decoded) {
        drop(why);
        continue;
      }
      RendezvousMessage& m = *decoded;
      identities[m.rank] = m.identity;
      if (m.op == "failed") {
        failures.push_back(fmt::format("rank {} failed: {}", m.rank, m.payload));
        throw Error(failures.back());
      }
      if (wanted(m)) return std::move(m);
      for (const RendezvousMessage& held : stash) {
        if (held.rank == m.rank) throw Error(two_processes(m.rank));
      }
      stash.push_back(std::move(m));
    }
  }

  std::string two_processes(int r) const {
    return fmt::format("rendezvous on {}: two processes joined as RANK={}", where(), r);
  }

  // rank 0: one message of `op` under `tag` from every other rank, in rank order.
  std::vector<RendezvousMessage> collect(const std::string& op, const std::string& tag) {
    if (!failures.empty()) throw Error(failures.front());
    std::vector<std::optional<RendezvousMessage>> got(static_cast<std::size_t>(world_size));
    const auto deadline = Clock::now() + timeout;
    int missing = world_size - 1;
    while (missing > 0) {
      auto m = next(deadline, [&](const RendezvousMessage& x) { return x.op == op && x.tag == tag; });
      if (!m) {
        std::vector<int> absent;
        for (int r = 1; r < world_size; ++r) {
          if (!got[static_cast<std::size_t>(r)]) absent.push_back(r);
        }
        const std::string drops = dropped == 0 ? ""
                                               : fmt::format("; {} message{} dropped meanwhile, the first: {}", dropped,
                                                             dropped == 1 ? "" : "s", first_drop);
        throw Error(fmt::format("rendezvous on {}: rank{} {} did not {} within {} s{}", where(),
                                absent.size() == 1 ? "" : "s", fmt::join(absent, ", "),
                                op == "join" ? "join" : "send its result", timeout.count() / 1000.0, drops));
      }
      auto& slot = got[static_cast<std::size_t>(m->rank)];
      if (slot) throw Error(two_processes(m->rank));
      slot = std::move(m);
      --missing;
    }
    std::vector<RendezvousMessage> out;
    for (int r = 1; r < world_size; ++r) out.push_back(std::move(*got[static_cast<std::size_t>(r)]));
    return out;
  }

  // rank 0: frames op, tag, payload to the rank behind `identity`.
  void reply(const std::string& identity, const std::string& op, const std::string& tag, const std::string& payload) {
    std::array<zmq::const_buffer, 4> frames{zmq::buffer(identity), zmq::buffer(op), zmq::buffer(tag),
                                            zmq::buffer(payload)};
    zmq::send_multipart(socket, frames);
  }

  // other ranks: frames op, tag, rank, world_size, payload to rank 0.
  void send(const std::string& op, const std::string& tag, const std::string& payload, bool dontwait = false) {
    const std::string r = std::to_string(rank), w = std::to_string(world_size);
    std::array<zmq::const_buffer, 5> frames{zmq::buffer(op), zmq::buffer(tag), zmq::buffer(r), zmq::buffer(w),
                                            zmq::buffer(payload)};
    zmq::send_multipart(socket, frames, dontwait ? zmq::send_flags::dontwait : zmq::send_flags::none);
  }

  // other ranks: rank 0's answer `op` under `tag` (frames op, tag, payload), until the timeout.
  std::string await(const std::string& op, const std::string& tag) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        throw Error(fmt::format("rendezvous: no answer from rank 0 at MASTER_ADDR:MASTER_PORT {} within {} s "
                                "(is rank 0 running, and are MASTER_ADDR and MASTER_PORT its address?)",
                                where(), timeout.count() / 1000.0));
      }
      zmq::pollitem_t item{static_cast<void*>(socket), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, left);
      if ((item.revents & ZMQ_POLLIN) == 0) continue;
      std::vector<zmq::message_t> frames;
      if (!zmq::recv_multipart(socket, std::back_inserter(frames), zmq::recv_flags::dontwait)) continue;
      if (frames.size() != 3) continue;
      if (frames[0].to_string() == "failed") throw Error("rank 0 failed: " + frames[2].to_string());
      if (frames[0].to_string() == op && frames[1].to_string() == tag) return frames[2].to_string();
    }
  }
};

Rendezvous::Rendezvous(std::string master_addr, int master_port, int world_size, int rank,
                       std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  if (world_size < 1) throw InputError(fmt::format("WORLD_SIZE={}: must be at least 1", world_size));
  if (rank < 0 || rank >= world_size) {
    throw InputError(fmt::format("RANK={}: out of range for a world size of {}", rank, world_size));
  }
  if (master_port < 0 || master_port > 65535 || (master_port == 0 && rank != 0)) {
    throw InputError(fmt::format("MASTER_PORT={}: not a TCP port (1..65535)", master_port));
  }
  if (master_addr.empty()) throw InputError("MASTER_ADDR: empty");
  State& s = *state_;
  s.addr = std::move(master_addr);
  s.port = master_port;
  s.world_size = world_size;
  s.rank = rank;
  s.timeout = timeout;
  try {
    s.socket = zmq::socket_t(s.context, rank == 0 ? zmq::socket_type::router : zmq::socket_type::dealer);
    s.socket.set(zmq::sockopt::linger, kLingerMs);
    if (rank == 0) {
      s.socket.set(zmq::sockopt::router_mandatory, 1);
      s.socket.set(zmq::sockopt::maxmsgsize, kMaxMessageBytes);
      const std::string host = !is_loopback(s.addr) ? "*" : (s.addr == "localhost" ? "127.0.0.1" : s.addr);
      s.socket.bind(fmt::format("tcp://{}:{}", host, master_port == 0 ? "*" : std::to_string(master_port)));
      const std::string endpoint = s.socket.get(zmq::sockopt::last_endpoint);
      s.port = parse_int(endpoint.substr(endpoint.rfind(':') + 1));
    } else {
      s.socket.connect(fmt::format("tcp://{}:{}", s.addr, master_port));
    }
  } catch (const zmq::error_t& e) {
    throw Error(fmt::format("rendezvous: rank {} cannot {} MASTER_ADDR:MASTER_PORT {}:{}: {}", rank,
                            rank == 0 ? "listen on" : "connect to", s.addr, master_port, e.what()));
  }
}

Rendezvous::~Rendezvous() = default;

int Rendezvous::rank() const { return state_->rank; }
int Rendezvous::world_size() const { return state_->world_size; }
int Rendezvous::port() const { return state_->port; }

std::string Rendezvous::broadcast(const std::string& tag, const std::string& bytes) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  try {
    if (s.rank != 0) {
      s.send("join", tag, "");
      return s.await("data", tag);
    }
    for (const RendezvousMessage& m : s.collect("join", tag)) s.reply(m.identity, "data", tag, bytes);
    return bytes;
  } catch (const zmq::error_t& e) {
    throw Error(fmt::format("rendezvous on {}: {}", s.where(), e.what()));
  }
}

std::vector<std::string> Rendezvous::gather(const std::string& tag, const std::string& mine) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  try {
    if (s.rank != 0) {
      s.send("result", tag, mine);
      s.await("ack", tag);
      return {};
    }
    std::vector<std::string> all{mine};
    for (RendezvousMessage& m : s.collect("result", tag)) {
      s.reply(m.identity, "ack", tag, "");
      all.push_back(std::move(m.payload));
    }
    return all;
  } catch (const zmq::error_t& e) {
    throw Error(fmt::format("rendezvous on {}: {}", s.where(), e.what()));
  }
}

void Rendezvous::fail(const std::string& reason) noexcept {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  try {
    if (s.rank != 0) {
      s.send("failed", "", reason, /*dontwait=*/true);
      return;
    }
    for (const auto& [r, identity] : s.identities) {
      try {
        s.reply(identity, "failed", "", reason);
      } catch (const zmq::error_t&) {
        // that rank is gone already
      }
    }
  } catch (...) {
    // best effort: the caller is failing already
  }
}

std::optional<std::string> Rendezvous::peer_failure(std::chrono::milliseconds wait) {
  State& s = *state_;
  if (s.rank != 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.failures.empty()) return s.failures.front();
  try {
    s.next(Clock::now() + wait, [](const RendezvousMessage&) { return false; });
  } catch (const Error&) {
    // a failure report (recorded) or a stray process
  } catch (const zmq::error_t&) {
  }
  if (!s.failures.empty()) return s.failures.front();
  return std::nullopt;
}

Rendezvous& process_rendezvous(const std::string& master_addr, int master_port, int world_size, int rank,
                               std::chrono::milliseconds timeout) {
  static std::mutex mutex;
  static std::unique_ptr<Rendezvous> instance;
  static std::string key;
  std::lock_guard<std::mutex> lock(mutex);
  const std::string want = fmt::format("{}:{} world {} rank {}", master_addr, master_port, world_size, rank);
  if (!instance) {
    instance = std::make_unique<Rendezvous>(master_addr, master_port, world_size, rank, timeout);
    key = want;
  } else if (key != want) {
    throw Error(fmt::format("rendezvous: this process joined {} already, not {}", key, want));
  }
  return *instance;
}

}  // namespace dpbench
