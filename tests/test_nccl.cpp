// Tests of the `nccl` backend on device buffers: exact results on integer-valued floats, byte
// counts against core/comm.hpp's formulas, and failures that throw instead of hanging.
// Without a usable GPU, or in a build without NCCL, every GPU test is skipped with the reason.
// Two ranks run as two threads (two GPUs, or one GPU with NCCL >= 2.30) or as two processes of
// this binary (any GPU count: each child gets its own NCCL_HOSTID, so NCCL treats them as two
// hosts and talks over loopback sockets). Each rank allocates and fills its buffers before
// creating its communicator, so no rank allocates while a peer's NCCL kernels run on the same
// device (NCCL's kernels wait for their peers, and allocations may synchronise the device).
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/comm.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "cuda/nccl_comm.hpp"
#include "tests/process_util.hpp"

#ifdef DPBENCH_HAVE_NCCL
#include <cuda_runtime.h>
#endif

namespace dpbench {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// Device helpers (where the build has NCCL; the tests that use them are skipped otherwise).

#ifdef DPBENCH_HAVE_NCCL

void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

void set_device(int device) { cuda_ok(cudaSetDevice(device), "cudaSetDevice"); }

// n floats on the current device, filled from the host and complete on return.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>& host) : n_(host.size()) {
    if (n_ == 0) return;
    cuda_ok(cudaMalloc(&data_, n_ * sizeof(float)), "cudaMalloc");
    cuda_ok(cudaMemcpy(data_, host.data(), n_ * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
    // A pageable upload may return before its DMA has landed; the communication stream does not
    // wait for the legacy stream, so finish it here.
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept : data_(other.data_), n_(other.n_) {
    other.data_ = nullptr;
    other.n_ = 0;
  }

  float* data() const { return data_; }
  std::vector<float> host() const {
    std::vector<float> out(n_);
    if (n_ > 0) {
      cuda_ok(cudaMemcpy(out.data(), data_, n_ * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
    }
    return out;
  }

 private:
  float* data_ = nullptr;
  std::size_t n_ = 0;
};

// Holds a stream back with a host function until release() (or destruction), as a peer that
// never arrives holds back an NCCL kernel.
class StreamBlocker {
 public:
  explicit StreamBlocker(void* stream) {
    cuda_ok(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream), &StreamBlocker::hold, this), "cudaLaunchHostFunc");
  }
  ~StreamBlocker() {
    release();
    while (!finished_.load()) std::this_thread::sleep_for(1ms);
  }
  StreamBlocker(const StreamBlocker&) = delete;
  StreamBlocker& operator=(const StreamBlocker&) = delete;
  void release() { released_.store(true); }

 private:
  static void hold(void* self_ptr) {
    auto* self = static_cast<StreamBlocker*>(self_ptr);
    while (!self->released_.load()) std::this_thread::sleep_for(1ms);
    self->finished_.store(true);
  }
  std::atomic<bool> released_{false};
  std::atomic<bool> finished_{false};
};

#else  // no NCCL: never called, the fixtures skip first

void set_device(int) { throw std::logic_error("built without NCCL"); }

class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<float>&) { throw std::logic_error("built without NCCL"); }
  float* data() const { return nullptr; }
  std::vector<float> host() const { return {}; }
};

class StreamBlocker {
 public:
  explicit StreamBlocker(void*) { throw std::logic_error("built without NCCL"); }
  void release() {}
};

#endif  // DPBENCH_HAVE_NCCL

// ---------------------------------------------------------------------------------------------
// Values, expectations, skips

// Integer-valued input of rank r, element i: sums over ranks are exact in float.
float value(int r, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50.0f;
}

std::vector<float> values(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

// Elements of got that differ from expect(i) (nccl-tests' wrong-element count).
std::size_t wrong(const std::vector<float>& got, const std::function<float(std::size_t)>& expect) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expect(i)) ++bad;
  }
  return bad;
}

std::vector<std::size_t> prefix_offsets(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> offsets(counts.size(), 0);
  std::exclusive_scan(counts.begin(), counts.end(), offsets.begin(), std::size_t{0});
  return offsets;
}

// Bytes a CommStats should hold for these element counts.
void expect_counts(const CommStats& s, std::size_t sent, std::size_t received, const char* op) {
  EXPECT_EQ(s.bytes_sent, static_cast<std::int64_t>(sent * sizeof(float))) << op;
  EXPECT_EQ(s.bytes_received, static_cast<std::int64_t>(received * sizeof(float))) << op;
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }
bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Why the GPU tests cannot run here, or "" when they can.
std::string gpu_skip_reason() {
  if (!nccl_available()) return "built without NCCL";
  const CudaProbe probe = probe_cuda();
  if (!probe.usable) return "no CUDA device: " + probe.reason;
  return "";
}

// {major, minor} of the NCCL library linked at run time ({0, 0} when unknown).
std::pair<int, int> nccl_major_minor() {
  int major = 0, minor = 0;
  if (std::sscanf(nccl_version().c_str(), "%d.%d", &major, &minor) != 2) return {0, 0};
  return {major, minor};
}

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = gpu_skip_reason();
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

using MakeComm = std::function<std::unique_ptr<NcclCommunicator>()>;

// One rank on device 0.
std::unique_ptr<NcclCommunicator> one_rank(std::chrono::milliseconds timeout = 60s) {
  return make_nccl_communicator(nccl_create_unique_id(), 1, 0, 0, timeout);
}

// ---------------------------------------------------------------------------------------------
// Multi-rank scenarios: rank `rank` of `p`. Each allocates and fills its buffers, then calls
// make() (the rendezvous of all ranks), then communicates and checks.

// Ring all-reduce on odd lengths, blocking and started/waited; bytes equal the ring's.
void scenario_allreduce(int rank, int p, const MakeComm& make) {
  const std::vector<std::size_t> lengths = {1, 3, 1001, 100003};
  std::vector<DeviceBuffer> bufs;
  for (std::size_t n : lengths) bufs.emplace_back(values(rank, n));
  DeviceBuffer async_a(values(rank, 4097));
  DeviceBuffer async_b(values(rank, 33));
  const auto sum = [p](std::size_t i) {
    float s = 0;
    for (int q = 0; q < p; ++q) s += value(q, i);
    return s;
  };

  auto comm = make();
  ASSERT_EQ(comm->rank(), rank);
  ASSERT_EQ(comm->world_size(), p);
  for (std::size_t k = 0; k < lengths.size(); ++k) {
    comm->reset_stats();
    comm->allreduce_sum(bufs[k].data(), lengths[k]);
    const ElementCounts ring = ring_allreduce_counts(lengths[k], p, rank);
    expect_counts(comm->stats(), ring.sent, ring.received, "allreduce");
    EXPECT_EQ(wrong(bufs[k].host(), sum), 0u) << "n=" << lengths[k] << " rank=" << rank;
  }
  ASSERT_TRUE(comm->supports_async());
  comm->reset_stats();
  comm->allreduce_sum_start(async_a.data(), 4097);
  comm->allreduce_sum_start(async_b.data(), 33);
  comm->progress();
  comm->wait_all();
  const ElementCounts a = ring_allreduce_counts(4097, p, rank);
  const ElementCounts b = ring_allreduce_counts(33, p, rank);
  expect_counts(comm->stats(), a.sent + b.sent, a.received + b.received, "async allreduce");
  EXPECT_EQ(wrong(async_a.host(), sum), 0u) << "async n=4097 rank=" << rank;
  EXPECT_EQ(wrong(async_b.host(), sum), 0u) << "async n=33 rank=" << rank;
}

// Reduce and broadcast to/from the last rank, all-gather, scatterv/gatherv with uneven and zero
// counts, send/recv between ranks 0 and 1, barrier; exact results and the formulas' bytes.
void scenario_rooted(int rank, int p, const MakeComm& make) {
  const int root = p - 1;
  const std::size_t n_reduce = 1001, n_bcast = 777, n_gather = 513, n_p2p = 999;
  // Two scatter/gather rounds: every rank gets data; then some ranks get none.
  std::vector<std::vector<std::size_t>> rounds(2, std::vector<std::size_t>(static_cast<std::size_t>(p)));
  for (int q = 0; q < p; ++q) {
    rounds[0][static_cast<std::size_t>(q)] = 3 + 1000 * static_cast<std::size_t>(q);
    rounds[1][static_cast<std::size_t>(q)] = q % 2 == 0 ? 0 : 5;
  }

  DeviceBuffer reduce_buf(values(rank, n_reduce));
  DeviceBuffer bcast_buf(values(rank + 10, n_bcast));
  DeviceBuffer gather_send(values(rank, n_gather));
  DeviceBuffer gather_recv(std::vector<float>(static_cast<std::size_t>(p) * n_gather, -1.0f));
  std::vector<DeviceBuffer> scatter_send, scatter_recv, gatherv_send, gatherv_recv;
  for (const auto& counts : rounds) {
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::size_t mine = counts[static_cast<std::size_t>(rank)];
    scatter_send.emplace_back(values(100, total));
    scatter_recv.emplace_back(std::vector<float>(mine, -1.0f));
    gatherv_send.emplace_back(values(rank + 20, mine));
    gatherv_recv.emplace_back(std::vector<float>(total, -1.0f));
  }
  DeviceBuffer p2p_send(values(30 + rank, n_p2p));
  DeviceBuffer p2p_recv(std::vector<float>(n_p2p, -1.0f));

  auto comm = make();

  comm->reset_stats();
  comm->reduce_sum(reduce_buf.data(), n_reduce, root);
  ElementCounts c = chain_reduce_counts(n_reduce, p, rank, root);
  expect_counts(comm->stats(), c.sent, c.received, "reduce");
  if (rank == root) {
    EXPECT_EQ(wrong(
                  reduce_buf.host(),
                  [p](std::size_t i) {
      float s = 0;
      for (int q = 0; q < p; ++q) s += value(q, i);
      return s;
                  }),
              0u)
        << "reduce at root";
  } else {
    EXPECT_EQ(wrong(reduce_buf.host(), [rank](std::size_t i) { return value(rank, i); }), 0u)
        << "reduce must leave rank " << rank << " unchanged";
  }

  comm->reset_stats();
  comm->broadcast(bcast_buf.data(), n_bcast, root);
  c = chain_broadcast_counts(n_bcast, p, rank, root);
  expect_counts(comm->stats(), c.sent, c.received, "broadcast");
  EXPECT_EQ(wrong(bcast_buf.host(), [root](std::size_t i) { return value(root + 10, i); }), 0u)
      << "broadcast rank " << rank;

  comm->reset_stats();
  comm->allgather(gather_send.data(), gather_recv.data(), n_gather);
  const std::size_t others = static_cast<std::size_t>(p - 1) * n_gather;
  expect_counts(comm->stats(), others, others, "allgather");
  EXPECT_EQ(wrong(gather_recv.host(),
                  [n_gather](std::size_t i) { return value(static_cast<int>(i / n_gather), i % n_gather); }),
            0u)
      << "allgather rank " << rank;

  for (std::size_t k = 0; k < rounds.size(); ++k) {
    const auto& counts = rounds[k];
    const std::vector<std::size_t> offsets = prefix_offsets(counts);
    const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    const std::size_t mine = counts[static_cast<std::size_t>(rank)];
    const std::size_t my_offset = offsets[static_cast<std::size_t>(rank)];

    comm->reset_stats();
    comm->scatterv(scatter_send[k].data(), counts, scatter_recv[k].data(), root);
    if (rank == root)
      expect_counts(comm->stats(), total - mine, 0, "scatterv root");
    else
      expect_counts(comm->stats(), 0, mine, "scatterv");
    EXPECT_EQ(wrong(scatter_recv[k].host(), [my_offset](std::size_t i) { return value(100, my_offset + i); }), 0u)
        << "scatterv round " << k << " rank " << rank;

    comm->reset_stats();
    comm->gatherv(gatherv_send[k].data(), counts, gatherv_recv[k].data(), root);
    if (rank == root) {
      expect_counts(comm->stats(), 0, total - mine, "gatherv root");
      EXPECT_EQ(wrong(
                    gatherv_recv[k].host(),
                    [&](std::size_t i) {
        const auto q = static_cast<int>(std::upper_bound(offsets.begin(), offsets.end(), i) - offsets.begin()) - 1;
        return value(q + 20, i - offsets[static_cast<std::size_t>(q)]);
                    }),
                0u)
          << "gatherv round " << k;
    } else {
      expect_counts(comm->stats(), mine, 0, "gatherv");
    }
  }

  // Ranks 0 and 1 exchange in turn: 0 -> 1, then 1 -> 0; a zero-length pair costs nothing.
  if (rank <= 1) {
    const int peer = 1 - rank;
    comm->reset_stats();
    if (rank == 0) {
      comm->send(p2p_send.data(), n_p2p, peer);
      comm->recv(p2p_recv.data(), n_p2p, peer);
    } else {
      comm->recv(p2p_recv.data(), n_p2p, peer);
      comm->send(p2p_send.data(), n_p2p, peer);
    }
    comm->send(p2p_send.data(), 0, peer);
    comm->recv(p2p_recv.data(), 0, peer);
    expect_counts(comm->stats(), n_p2p, n_p2p, "send/recv");
    EXPECT_EQ(wrong(p2p_recv.host(), [peer](std::size_t i) { return value(30 + peer, i); }), 0u)
        << "recv on rank " << rank;
  }
  comm->reset_stats();
  comm->barrier();
  expect_counts(comm->stats(), 0, 0, "barrier");
}

// After a warm-up all-reduce (which connects the ranks), rank 1 stops answering: it waits,
// aborts its own communicator and leaves. Rank 0 is blocked in the next all-reduce and must
// throw Error within its timeout (or sooner, on an NCCL error), not hang; later calls throw
// Aborted. Run with a 5 s timeout.
void scenario_peer_stops(int rank, int p, const MakeComm& make) {
  ASSERT_EQ(p, 2);
  DeviceBuffer buf(values(rank, 4096));
  auto comm = make();
  comm->allreduce_sum(buf.data(), 4096);
  if (rank == 1) {
    std::this_thread::sleep_for(2s);  // let rank 0's warm-up finish receiving
    comm->abort("rank 1 stops answering");
    try {
      comm->allreduce_sum(buf.data(), 4096);
      ADD_FAILURE() << "allreduce after abort() did not throw";
    } catch (const Aborted& e) {
      EXPECT_EQ(std::string(e.what()), "rank 1 stops answering");
    }
    return;
  }
  const Clock::time_point start = Clock::now();
  std::string message;
  try {
    comm->allreduce_sum(buf.data(), 4096);
    ADD_FAILURE() << "allreduce with a silent peer returned";
  } catch (const Aborted& e) {
    ADD_FAILURE() << "expected Error, got Aborted: " << e.what();
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_LT(Clock::now() - start, 60s);
  EXPECT_TRUE(starts_with(message, "rank 0: allreduce: ")) << message;
  EXPECT_TRUE(contains(message, "communicator aborted")) << message;
  try {
    comm->barrier();
    ADD_FAILURE() << "barrier on an aborted communicator returned";
  } catch (const Aborted& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

struct Scenario {
  const char* name;
  void (*run)(int rank, int p, const MakeComm& make);
  std::chrono::milliseconds timeout;
};

const Scenario kScenarios[] = {
    {"allreduce", scenario_allreduce, 60s},
    {"rooted", scenario_rooted, 60s},
    {"peer_stops", scenario_peer_stops, 5s},
};

const Scenario& scenario(const std::string& name) {
  for (const Scenario& s : kScenarios) {
    if (name == s.name) return s;
  }
  throw std::invalid_argument("unknown scenario " + name);
}

// Runs a scenario on one thread per device (rank r on devices[r]).
void run_on_threads(const std::string& name, const std::vector<int>& devices) {
  const Scenario& s = scenario(name);
  const int p = static_cast<int>(devices.size());
  const NcclUniqueIdBytes id = nccl_create_unique_id();
  std::vector<std::string> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int device = devices[static_cast<std::size_t>(r)];
        set_device(device);  // the rank's buffers live on its device
        s.run(r, p, [&] { return make_nccl_communicator(id, p, r, device, s.timeout); });
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

// ---------------------------------------------------------------------------------------------
// Two processes: this binary again, running NcclChild.RunsOneRankOfATwoProcessTest with
// DPBENCH_NCCL_CHILD="<scenario> <rank> <world_size> <device> <id as hex>".

constexpr const char* kChildVariable = "DPBENCH_NCCL_CHILD";

using testing::exited_ok;
using testing::from_hex;
using testing::spawn_self;
using testing::to_hex;
using testing::wait_child;

void run_as_processes(const std::string& name, int p) {
  // The id names a bootstrap socket in this process; the children reach it over loopback.
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  const NcclUniqueIdBytes id = nccl_create_unique_id();
  const auto gpus = static_cast<int>(probe_cuda().gpus.size());

  std::vector<pid_t> pids;
  for (int r = 0; r < p; ++r) {
    const std::vector<std::string> add = {std::string(kChildVariable) + "=" + name + " " + std::to_string(r) + " " +
                                              std::to_string(p) + " " + std::to_string(r % std::max(gpus, 1)) + " " +
                                              to_hex(id),
                                          "NCCL_HOSTID=dpbench-test-host-" + std::to_string(r)};
    try {
      pids.push_back(spawn_self("NcclChild.RunsOneRankOfATwoProcessTest", add,
                                {std::string(kChildVariable) + "=", "NCCL_HOSTID="}));
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      for (pid_t started : pids) wait_child(started, Clock::now());  // kills and reaps
      return;
    }
  }
  const Clock::time_point deadline = Clock::now() + 180s;
  for (int r = 0; r < p; ++r) {
    const int status = wait_child(pids[static_cast<std::size_t>(r)], deadline);
    EXPECT_TRUE(exited_ok(status)) << "rank " << r << " child "
                                   << (status < 0 ? "hung and was killed" : "failed (see its output above)");
  }
}

// ---------------------------------------------------------------------------------------------
// Tests that need no GPU

TEST(NcclBuild, ReportsAvailabilityAndLinkedVersion) {
#ifdef DPBENCH_HAVE_NCCL
  EXPECT_TRUE(nccl_available());
  const auto [major, minor] = nccl_major_minor();
  EXPECT_GE(major, 2) << nccl_version();
  EXPECT_TRUE(minor > 0 || major > 2) << nccl_version();
#else
  EXPECT_FALSE(nccl_available());
  EXPECT_EQ(nccl_version(), "");
  try {
    make_nccl_communicator(NcclUniqueIdBytes{}, 1, 0, 0, 1s);
    ADD_FAILURE() << "make_nccl_communicator without NCCL returned";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "--comm nccl: this build has no NCCL");
  }
#endif
}

TEST(NcclBuild, RejectsBadRanksBeforeTouchingTheGpu) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  const NcclUniqueIdBytes id{};
  EXPECT_THROW(make_nccl_communicator(id, 0, 0, 0, 1s), InputError);
  EXPECT_THROW(make_nccl_communicator(id, 2, 2, 0, 1s), InputError);
  EXPECT_THROW(make_nccl_communicator(id, 2, -1, 0, 1s), InputError);
  EXPECT_THROW(make_nccl_communicator(id, 1, 0, -1, 1s), InputError);
  EXPECT_THROW(make_nccl_communicator(id, 1, 0, 0, 0s), InputError);
}

// ---------------------------------------------------------------------------------------------
// One rank on one GPU

class NcclOneRank : public NcclGpuTest {};

TEST_F(NcclOneRank, ReportsBackendDeviceAndStream) {
  auto comm = one_rank();
  EXPECT_EQ(comm->backend(), Backend::nccl);
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  EXPECT_EQ(comm->device(), 0);
  EXPECT_NE(comm->comm_stream_handle(), nullptr);
  EXPECT_TRUE(comm->supports_async());
}

TEST_F(NcclOneRank, AllReduceReduceBroadcastKeepExactValuesAndCountNoBytes) {
  const std::size_t n = 1001;
  DeviceBuffer a(values(0, n)), r(values(1, n)), b(values(2, n));
  auto comm = one_rank();
  comm->allreduce_sum(a.data(), n);
  comm->reduce_sum(r.data(), n, 0);
  comm->broadcast(b.data(), n, 0);
  comm->allreduce_sum(a.data(), 0);  // n = 0: nothing to do
  EXPECT_EQ(wrong(a.host(), [](std::size_t i) { return value(0, i); }), 0u);
  EXPECT_EQ(wrong(r.host(), [](std::size_t i) { return value(1, i); }), 0u);
  EXPECT_EQ(wrong(b.host(), [](std::size_t i) { return value(2, i); }), 0u);
  expect_counts(comm->stats(), 0, 0, "one rank");
  EXPECT_THROW(comm->reduce_sum(r.data(), n, 1), Error);
  EXPECT_THROW(comm->broadcast(b.data(), n, -1), Error);
}

TEST_F(NcclOneRank, AllGatherScatterGatherCopyTheOwnPart) {
  const std::size_t n = 777;
  DeviceBuffer send(values(3, n));
  DeviceBuffer gathered(std::vector<float>(n, -1.0f));
  DeviceBuffer scattered(std::vector<float>(n, -1.0f));
  DeviceBuffer regathered(std::vector<float>(n, -1.0f));
  auto comm = one_rank();
  comm->allgather(send.data(), gathered.data(), n);
  comm->scatterv(send.data(), {n}, scattered.data(), 0);
  comm->gatherv(scattered.data(), {n}, regathered.data(), 0);
  const auto expect = [](std::size_t i) { return value(3, i); };
  EXPECT_EQ(wrong(gathered.host(), expect), 0u);
  EXPECT_EQ(wrong(scattered.host(), expect), 0u);
  EXPECT_EQ(wrong(regathered.host(), expect), 0u);
  expect_counts(comm->stats(), 0, 0, "one rank");
  const std::vector<std::size_t> two_ranks_counts = {n, n};
  EXPECT_THROW(comm->scatterv(send.data(), two_ranks_counts, scattered.data(), 0), Error);
  EXPECT_THROW(comm->send(send.data(), n, 0), Error);
  EXPECT_THROW(comm->recv(send.data(), n, 0), Error);
  comm->barrier();
}

TEST_F(NcclOneRank, AsyncAllReduceCompletesAtWaitAll) {
  DeviceBuffer a(values(4, 4097)), b(values(5, 3));
  auto comm = one_rank();
  comm->allreduce_sum_start(a.data(), 4097);
  comm->allreduce_sum_start(b.data(), 3);
  comm->progress();
  comm->wait_all();
  EXPECT_EQ(wrong(a.host(), [](std::size_t i) { return value(4, i); }), 0u);
  EXPECT_EQ(wrong(b.host(), [](std::size_t i) { return value(5, i); }), 0u);
  comm->wait_all();  // nothing started: returns at once
}

// A stream held back (as by a peer that never arrives) makes the call throw after the timeout,
// naming rank and operation, instead of hanging; the communicator is aborted from then on.
TEST_F(NcclOneRank, TimeoutAbortsTheCommunicatorInsteadOfHanging) {
  DeviceBuffer buf(values(0, 64));
  auto comm = one_rank(1000ms);
  StreamBlocker blocker(comm->comm_stream_handle());
  // Releases the stream later, in case ncclCommAbort waits for work queued behind the blocker.
  std::thread releaser([&] {
    std::this_thread::sleep_for(3s);
    blocker.release();
  });
  const Clock::time_point start = Clock::now();
  std::string message;
  try {
    comm->allreduce_sum(buf.data(), 64);
    ADD_FAILURE() << "allreduce on a held-back stream returned";
  } catch (const Aborted& e) {
    ADD_FAILURE() << "expected Error, got Aborted: " << e.what();
  } catch (const Error& e) {
    message = e.what();
  }
  const auto waited = Clock::now() - start;
  releaser.join();
  EXPECT_EQ(message, "rank 0: allreduce: no progress for 1 s (a peer stopped answering); communicator aborted");
  EXPECT_GE(waited, 1s);
  EXPECT_LT(waited, 30s);
  try {
    comm->barrier();
    ADD_FAILURE() << "barrier after a timeout returned";
  } catch (const Aborted& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

// abort() from another thread ends the wait of the rank's thread with Aborted(reason).
TEST_F(NcclOneRank, AbortFromAnotherThreadEndsABlockedWait) {
  DeviceBuffer buf(values(0, 64));
  auto comm = one_rank(60s);
  StreamBlocker blocker(comm->comm_stream_handle());
  std::thread aborter([&] {
    std::this_thread::sleep_for(300ms);
    comm->abort("stopped by the test");
    std::this_thread::sleep_for(1s);
    blocker.release();
  });
  const Clock::time_point start = Clock::now();
  std::string message;
  try {
    comm->allreduce_sum(buf.data(), 64);
    ADD_FAILURE() << "allreduce returned although abort() was called";
  } catch (const Aborted& e) {
    message = e.what();
  }
  const auto waited = Clock::now() - start;
  aborter.join();
  EXPECT_EQ(message, "stopped by the test");
  EXPECT_LT(waited, 30s);
}

TEST_F(NcclOneRank, CallsAfterAbortThrowAbortedWithTheReason) {
  DeviceBuffer buf(values(0, 64));
  auto comm = one_rank();
  comm->allreduce_sum(buf.data(), 64);
  comm->abort("trainer failed on rank 0");
  comm->abort("a second reason is ignored");
  for (int i = 0; i < 3; ++i) {
    try {
      switch (i) {
        case 0: comm->allreduce_sum(buf.data(), 64); break;
        case 1: comm->broadcast(buf.data(), 64, 0); break;
        default: comm->wait_all(); break;
      }
      ADD_FAILURE() << "call " << i << " after abort() returned";
    } catch (const Aborted& e) {
      EXPECT_EQ(std::string(e.what()), "trainer failed on rank 0") << "call " << i;
    }
  }
}

TEST_F(NcclOneRank, BadDeviceNamesRankAndCall) {
  const auto gpus = static_cast<int>(probe_cuda().gpus.size());
  try {
    make_nccl_communicator(NcclUniqueIdBytes{}, 1, 0, gpus, 1s);  // fails before the id is used
    ADD_FAILURE() << "device " << gpus << " accepted";
  } catch (const InputError& e) {
    ADD_FAILURE() << "expected Error, got InputError: " << e.what();
  } catch (const Error& e) {
    EXPECT_TRUE(starts_with(e.what(), "rank 0: cudaSetDevice: ")) << e.what();
  }
}

// ---------------------------------------------------------------------------------------------
// Two ranks as threads of this process

// Devices of two in-process ranks, or why they cannot run here.
struct TwoRankPlan {
  std::vector<int> devices;
  std::string skip;
};

TwoRankPlan plan_two_ranks() {
  if (probe_cuda().gpus.size() >= 2) return {{0, 1}, ""};
  const auto [major, minor] = nccl_major_minor();
  if (major > 2 || (major == 2 && minor >= 30)) {
    // Read by NCCL when the communicator is created: must be set before (ctest runs each test
    // in its own process; export it when running the whole binary).
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
    return {{0, 0}, ""};
  }
  return {{},
          "NCCL " + std::to_string(major) + "." + std::to_string(minor) +
              " refuses two ranks of one communicator on one GPU; needs >= 2.30 or one "
              "process per rank with distinct NCCL_HOSTID"};
}

class NcclTwoRanks : public NcclGpuTest {
 protected:
  void SetUp() override {
    NcclGpuTest::SetUp();
    if (IsSkipped()) return;
    plan_ = plan_two_ranks();
    if (!plan_.skip.empty()) GTEST_SKIP() << plan_.skip;
  }
  TwoRankPlan plan_;
};

TEST_F(NcclTwoRanks, RingAllReduceExactForOddLengthsAndCountsRingBytes) { run_on_threads("allreduce", plan_.devices); }

TEST_F(NcclTwoRanks, RootedCollectivesScatterGatherAndSendRecvAreExact) { run_on_threads("rooted", plan_.devices); }

TEST_F(NcclTwoRanks, AbortMakesBlockedPeerThrowInsteadOfHanging) { run_on_threads("peer_stops", plan_.devices); }

// ---------------------------------------------------------------------------------------------
// Two ranks as two processes (one GPU is enough: NCCL_HOSTID per process, sockets over lo)

class NcclTwoProcesses : public NcclGpuTest {};

TEST_F(NcclTwoProcesses, RingAllReduceExactForOddLengthsAndCountsRingBytes) { run_as_processes("allreduce", 2); }

TEST_F(NcclTwoProcesses, RootedCollectivesScatterGatherAndSendRecvAreExact) { run_as_processes("rooted", 2); }

TEST_F(NcclTwoProcesses, DeadPeerMakesBlockedRankThrowInsteadOfHanging) { run_as_processes("peer_stops", 2); }

// The child side of NcclTwoProcesses: one rank of a scenario.
TEST(NcclChild, RunsOneRankOfATwoProcessTest) {
  const char* spec = std::getenv(kChildVariable);
  if (spec == nullptr) GTEST_SKIP() << "runs only as a child process of the NcclTwoProcesses tests";
  std::istringstream in(spec);
  std::string name, hex;
  int rank = -1, p = 0, device = -1;
  in >> name >> rank >> p >> device >> hex;
  ASSERT_TRUE(in && rank >= 0 && p > rank && device >= 0) << kChildVariable << "=" << spec;
  const NcclUniqueIdBytes id = from_hex(hex);
  const Scenario& s = scenario(name);
  set_device(device);
  s.run(rank, p, [&] { return make_nccl_communicator(id, p, rank, device, s.timeout); });
}

}  // namespace
}  // namespace dpbench
