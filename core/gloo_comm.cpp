#include "core/gloo_comm.hpp"

#include <fmt/format.h>

#include "core/error.hpp"

#ifdef DPBENCH_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/net_interface.hpp"
#include "core/rendezvous.hpp"
#endif

namespace dpbench {

const char* gloo_allreduce_algorithm_name(GlooAllreduceAlgorithm algorithm) {
  switch (algorithm) {
    case GlooAllreduceAlgorithm::ring: return "ring";
    case GlooAllreduceAlgorithm::ring_chunked: return "ring_chunked";
    case GlooAllreduceAlgorithm::halving_doubling: return "halving_doubling";
  }
  return "unknown";
}

#ifndef DPBENCH_HAVE_GLOO

bool gloo_built() { return false; }

std::unique_ptr<Communicator> make_gloo_communicator(Rendezvous&, const std::string&, const std::string&,
                                                     std::chrono::milliseconds) {
  throw InputError("--comm gloo: this build has no gloo (apt-get install libgloo-dev, then rebuild)");
}

std::unique_ptr<GlooAllreduce> make_gloo_allreduce(Communicator&, GlooAllreduceAlgorithm, float*, std::size_t) {
  throw InputError("gloo all-reduce: this build has no gloo (apt-get install libgloo-dev, then rebuild)");
}

#else

bool gloo_built() { return true; }

namespace {

// gloo's rendezvous Store over dpbench's rendezvous. gloo connects its mesh by having every rank
// set its own keys and read the others', in an order that differs between ranks (rank r reads
// the host names of ranks below r only). Keys travel in exchange rounds, each a collective of
// the rendezvous (gathered on rank 0, broadcast back): a rank takes part in the next round when
// it has set keys since its last one, or needs a key it does not have yet, and repeats until it
// has it. Every rank of gloo's protocol ends up in the same rounds, as each either publishes or
// waits for a key another rank publishes.
class RendezvousStore final : public gloo::rendezvous::Store {
 public:
  RendezvousStore(Rendezvous& rendezvous, std::string tag) : rendezvous_(rendezvous), tag_(std::move(tag)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    pending_[key] = nlohmann::json::binary_t(std::vector<std::uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    have(key);
    return table_.at(key);
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override {
    for (const auto& key : keys) have(key);  // each round is bounded by the rendezvous' timeout
  }

 private:
  static constexpr int kMaxRounds = 16;

  void have(const std::string& key) {
    if (!pending_.empty()) exchange();
    while (table_.count(key) == 0) {
      if (rounds_ >= kMaxRounds) {
        throw Error(fmt::format("gloo rendezvous: no rank set the key '{}' in {} rounds", key, rounds_));
      }
      exchange();
    }
  }
  void exchange() {
    const std::string round = fmt::format("{} round {}", tag_, ++rounds_);
    const auto mine = nlohmann::json::to_cbor(pending_);
    pending_ = nlohmann::json::object();
    const auto all = rendezvous_.gather(round, std::string(mine.begin(), mine.end()));
    nlohmann::json merged = nlohmann::json::object();
    for (const auto& blob : all) merged.update(nlohmann::json::from_cbor(blob));
    const auto merged_bytes = nlohmann::json::to_cbor(merged);
    const std::string shared = rendezvous_.broadcast(round, std::string(merged_bytes.begin(), merged_bytes.end()));
    const nlohmann::json table = nlohmann::json::from_cbor(shared);
    for (const auto& [key, value] : table.items()) {
      const auto& bytes = value.get_binary();
      table_[key] = std::vector<char>(bytes.begin(), bytes.end());
    }
  }

  Rendezvous& rendezvous_;
  std::string tag_;
  int rounds_ = 0;
  nlohmann::json pending_ = nlohmann::json::object();
  std::map<std::string, std::vector<char>> table_;
};

// The slot of dpbench's point-to-point transfers. gloo's collectives build theirs from a nonzero
// prefix in the top byte, so this one cannot collide with them.
constexpr std::uint64_t kP2pSlot = 1;
// sendrecv's segment: 64 KiB of floats.
constexpr std::size_t kSendrecvSegment = 16 * 1024;

void sum_floats(void* c, const void* a, const void* b, std::size_t n) { gloo::sum<float>(c, a, b, n); }

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::rendezvous::Context> context, std::chrono::milliseconds timeout)
      : context_(std::move(context)), rank_(context_->rank), size_(context_->size), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  Backend backend() const override { return Backend::gloo; }
  const std::shared_ptr<gloo::rendezvous::Context>& context() const { return context_; }

  void allreduce_sum(float* buf, std::size_t n) override {
    if (size_ == 1 || n == 0) return;
    call("allreduce", [&] {
      gloo::AllreduceOptions o(context_);
      o.setOutput(buf, n);
      o.setReduceFunction(&sum_floats);
      o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
      o.setTimeout(timeout_);
      gloo::allreduce(o);
    });
    count(ring_allreduce_counts(n, size_, rank_));
  }
  void reduce_sum(float* buf, std::size_t n, int root) override {
    check_root(root, "reduce");
    if (size_ == 1 || n == 0) return;
    call("reduce", [&] { reduce_into(buf, rank_ == root ? buf : scratch(n), n, root); });
    count(gloo_reduce_counts(n, size_, rank_, root));
  }
  void broadcast(float* buf, std::size_t n, int root) override {
    check_root(root, "broadcast");
    if (size_ == 1 || n == 0) return;
    call("broadcast", [&] {
      gloo::BroadcastOptions o(context_);
      o.setOutput(buf, n);
      o.setRoot(root);
      o.setTimeout(timeout_);
      gloo::broadcast(o);
    });
    count(binomial_broadcast_counts(n, size_, rank_, root));
  }
  void allgather(const float* send, float* recv, std::size_t n) override {
    if (n == 0) return;
    call("allgather", [&] {
      gloo::AllgatherOptions o(context_);
      o.setInput(const_cast<float*>(send), n);
      o.setOutput(recv, n * static_cast<std::size_t>(size_));
      o.setTimeout(timeout_);
      gloo::allgather(o);
    });
    count(static_cast<std::size_t>(size_ - 1) * n, static_cast<std::size_t>(size_ - 1) * n);
  }
  void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override {
    check_root(root, "scatterv");
    check_counts(counts, "scatterv");
    const std::vector<std::size_t> offsets = segment_offsets(counts);
    call("scatterv", [&] {
      if (rank_ != root) return receive(recv, counts[static_cast<std::size_t>(rank_)], root);
      for (int r = 0; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (r == root) {
          std::copy_n(send + offsets[i], counts[i], recv);
        } else {
          transmit(send + offsets[i], counts[i], r);
        }
      }
    });
    count(root_scatter_counts(counts, rank_, root));
  }
  void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override {
    check_root(root, "gatherv");
    check_counts(counts, "gatherv");
    const std::vector<std::size_t> offsets = segment_offsets(counts);
    call("gatherv", [&] {
      if (rank_ != root) return transmit(send, counts[static_cast<std::size_t>(rank_)], root);
      for (int r = 0; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (r == root) {
          std::copy_n(send, counts[i], recv + offsets[i]);
        } else {
          receive(recv + offsets[i], counts[i], r);
        }
      }
    });
    count(root_gather_counts(counts, rank_, root));
  }
  void reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) override {
    check_counts(counts, "reduce_scatterv");
    const std::vector<std::size_t> offsets = segment_offsets(counts);
    // gloo has no reduce-scatter over uneven segments: one reduce per segment, to its owner.
    call("reduce_scatterv", [&] {
      for (int r = 0; r < size_; ++r) {
        const auto i = static_cast<std::size_t>(r);
        if (counts[i] == 0) continue;
        if (size_ == 1) {
          std::copy_n(send + offsets[i], counts[i], recv);
          continue;
        }
        reduce_into(send + offsets[i], r == rank_ ? recv : send + offsets[i], counts[i], r);
      }
    });
    ElementCounts c;  // one gloo reduce per segment
    for (int r = 0; r < size_; ++r) {
      const ElementCounts one = gloo_reduce_counts(counts[static_cast<std::size_t>(r)], size_, rank_, r);
      c.sent += one.sent;
      c.received += one.received;
    }
    count(c);
  }
  void allgatherv(float* buf, const std::vector<std::size_t>& counts) override {
    check_counts(counts, "allgatherv");
    if (size_ == 1) return;
    call("allgatherv", [&] {
      gloo::AllgathervOptions o(context_);
      o.setOutput(buf, std::vector<std::size_t>(counts.begin(), counts.end()));  // in place: no input
      o.setTimeout(timeout_);
      gloo::allgatherv(o);
    });
    count(ring_allgather_counts(counts, rank_));
  }
  void send(const float* buf, std::size_t n, int dst) override {
    check_peer(dst, "send", "destination");
    call("send", [&] { transmit(buf, n, dst); });
    count(n, 0);
  }
  void recv(float* buf, std::size_t n, int src) override {
    check_peer(src, "recv", "source");
    call("recv", [&] { receive(buf, n, src); });
    count(0, n);
  }
  void sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n, int src) override {
    check_peer(dst, "sendrecv", "destination");
    check_peer(src, "sendrecv", "source");
    // In segments of kSendrecvSegment floats, one in flight each way: on the emulated cluster's
    // tbf links a whole 1 MiB message each way ran at half the link's rate (53 % of the bound,
    // 2 nodes at 100 Mbit/s), and so did 64 KiB segments all posted at once; one 64 KiB segment
    // at a time ran at 100 % (256 KiB: 66 %).
    call("sendrecv", [&] {
      for (std::size_t off = 0; off < std::max(send_n, recv_n); off += kSendrecvSegment) {
        std::unique_ptr<gloo::transport::UnboundBuffer> out, in;
        if (off < send_n) {
          out = context_->createUnboundBuffer(const_cast<float*>(send) + off,
                                              std::min(kSendrecvSegment, send_n - off) * sizeof(float));
          out->send(dst, kP2pSlot);
        }
        if (off < recv_n) {
          in = context_->createUnboundBuffer(recv + off, std::min(kSendrecvSegment, recv_n - off) * sizeof(float));
          in->recv(src, kP2pSlot);
          in->waitRecv(timeout_);
        }
        if (out) out->waitSend(timeout_);
      }
    });
    count(send_n, recv_n);
  }
  void barrier() override {
    call("barrier", [&] {
      gloo::BarrierOptions o(context_);
      o.setTimeout(timeout_);
      gloo::barrier(o);
    });
  }
  // gloo cannot interrupt an operation in progress: it ends at its timeout, or at once when the
  // failing process exits and its connections close. Later calls throw Aborted.
  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (abort_reason_.empty()) abort_reason_ = reason;
  }

 private:
  // Runs one gloo operation, turning gloo's exceptions (a timeout, a peer that closed its
  // connection) into one-line Errors naming the rank and the operation.
  template <typename F>
  void call(const char* op, F&& f) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!abort_reason_.empty()) throw Aborted(abort_reason_);
    }
    try {
      f();
    } catch (const gloo::Exception& e) {
      throw Error(fmt::format("rank {}: gloo {}: {}", rank_, op, one_line(e.what())));
    }
  }
  // gloo::reduce of in[n] from every rank into out[n] on root (out is scratch elsewhere).
  void reduce_into(float* in, float* out, std::size_t n, int root) {
    gloo::ReduceOptions o(context_);
    if (in != out) o.setInput(in, n);
    o.setOutput(out, n);
    o.setRoot(root);
    o.setReduceFunction(&sum_floats);
    o.setTimeout(timeout_);
    gloo::reduce(o);
  }
  void transmit(const float* buf, std::size_t n, int dst) {
    if (n == 0) return;
    auto ub = context_->createUnboundBuffer(const_cast<float*>(buf), n * sizeof(float));
    ub->send(dst, kP2pSlot);
    ub->waitSend(timeout_);
  }
  void receive(float* buf, std::size_t n, int src) {
    if (n == 0) return;
    auto ub = context_->createUnboundBuffer(buf, n * sizeof(float));
    ub->recv(src, kP2pSlot);
    ub->waitRecv(timeout_);
  }
  float* scratch(std::size_t n) {
    if (scratch_.size() < n) scratch_.resize(n);
    return scratch_.data();
  }

  std::shared_ptr<gloo::rendezvous::Context> context_;
  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::vector<float> scratch_;
  std::mutex mutex_;
  std::string abort_reason_;  // guarded by mutex_
};

// The options-based ring (a fresh set of unbound buffers per call) or one of gloo's class
// algorithms (buffers registered once, in the constructor).
class GlooAllreduceImpl final : public GlooAllreduce {
 public:
  GlooAllreduceImpl(GlooCommunicator& comm, GlooAllreduceAlgorithm algorithm, float* buf, std::size_t n)
      : comm_(comm), algorithm_(algorithm), buf_(buf), n_(n) {
    const auto count = static_cast<int>(n);
    guard([&] {
      if (algorithm == GlooAllreduceAlgorithm::ring_chunked) {
        class_algorithm_ = std::make_unique<gloo::AllreduceRingChunked<float>>(comm.context(), std::vector<float*>{buf},
                                                                               count);
      } else if (algorithm == GlooAllreduceAlgorithm::halving_doubling) {
        class_algorithm_ = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(comm.context(),
                                                                                   std::vector<float*>{buf}, count);
      }
    });
  }
  void run() override {
    if (class_algorithm_) {
      guard([&] { class_algorithm_->run(); });
    } else {
      comm_.allreduce_sum(buf_, n_);
    }
  }

 private:
  template <typename F>
  void guard(F&& f) {
    try {
      f();
    } catch (const gloo::Exception& e) {
      throw Error(fmt::format("rank {}: gloo all-reduce ({}): {}", comm_.rank(),
                              gloo_allreduce_algorithm_name(algorithm_), one_line(e.what())));
    }
  }

  GlooCommunicator& comm_;
  GlooAllreduceAlgorithm algorithm_;
  float* buf_;
  std::size_t n_;
  std::unique_ptr<gloo::Algorithm> class_algorithm_;
};

}  // namespace

std::unique_ptr<GlooAllreduce> make_gloo_allreduce(Communicator& comm, GlooAllreduceAlgorithm algorithm, float* buf,
                                                   std::size_t n) {
  auto* gloo_comm = dynamic_cast<GlooCommunicator*>(&comm);
  if (gloo_comm == nullptr) {
    throw InputError(
        fmt::format("gloo all-reduce: needs a gloo communicator, got the '{}' backend's", name(comm.backend())));
  }
  if (n > static_cast<std::size_t>(INT_MAX)) {
    throw InputError(fmt::format("gloo all-reduce: {} floats is above gloo's limit of {}", n, INT_MAX));
  }
  return std::make_unique<GlooAllreduceImpl>(*gloo_comm, algorithm, buf, n);
}

std::unique_ptr<Communicator> make_gloo_communicator(Rendezvous& rendezvous, const std::string& tag,
                                                     const std::string& master_addr,
                                                     std::chrono::milliseconds timeout) {
  try {
    gloo::transport::tcp::attr attr;
    // GLOO_SOCKET_IFNAME names the interface, as in PyTorch; else the address of the interface
    // that reaches rank 0's (loopback for a one-node job on 127.0.0.1), never the host name's
    // address, which Debian's /etc/hosts maps to 127.0.1.1.
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      attr.iface = ifname;
    } else {
      attr.hostname = master_addr == "localhost" ? "127.0.0.1" : address_toward(master_addr);
    }
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(rendezvous.rank(), rendezvous.world_size());
    context->setTimeout(timeout);
    RendezvousStore store(rendezvous, tag);
    context->connectFullMesh(store, device);
    return std::make_unique<GlooCommunicator>(std::move(context), timeout);
  } catch (const gloo::Exception& e) {
    throw Error(fmt::format("rank {}: gloo: connecting the ranks failed: {}", rendezvous.rank(), one_line(e.what())));
  }
}

#endif  // DPBENCH_HAVE_GLOO

}  // namespace dpbench
