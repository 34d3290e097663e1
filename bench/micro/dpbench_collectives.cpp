// Micro-benchmarks of the `local` backend's collectives, in the manner of nccl-tests: ring
// all-reduce, chain reduce and broadcast, and the parameter server's point-to-point gradient push
// and parameter pull, for world_size (ranks) 2, 4, 8 and messages of 4 B to 256 MiB, plus
// std::memcpy on one and two threads as the machine's reference bandwidth.
// How: the ranks are threads of one LocalGroup, created once per benchmark run together with
// their buffers (filled with integer-valued floats before timing). Rank 0 is the benchmark
// thread. Each iteration: every rank does its untimed preparation, all ranks meet at a barrier,
// and rank 0 times (manual time) from leaving the barrier until every rank has returned from the
// operation. After the timed loop one more operation runs on inputs whose sums are exact and the
// wrong elements are counted (counter "wrong"; non-zero fails the benchmark). Counters, in GB/s
// (1e9 bytes/s) computed from the manual time: algbw = bytes / time and busbw = algbw * factor
// with the nccl-tests factors (all-reduce 2(p-1)/p; reduce, broadcast 1). For push and pull,
// algbw counts the bytes that pass through the root, (p-1) * bytes / time, and busbw = algbw.
// Ranks beyond the machine's cores are time-sliced (label "ranks>cores"): such figures say what
// the code costs when oversubscribed, not what the memory system can do.
// Not for: NCCL (nccl-tests measures it), or end-to-end training (see `dpbench`).
//
// Across processes: launched by mpirun with 2 or more processes (`mpirun -np 4
// dpbench_collectives`), the binary measures all-reduce between processes instead, at the same
// message sizes and with the same checks and counters, so that the library all-reduces stand
// beside the `local` ring's figures at the same rank count (BM_AllReduce, from a run without
// mpirun): BM_AllReduceMpi (MPI_Allreduce, Open MPI's choice of algorithm), BM_AllReduceGlooRing
// (gloo::allreduce's ring, what `--comm gloo` runs), BM_AllReduceGlooRingChunked and
// BM_AllReduceGlooHalvingDoubling (gloo over its TCP transport; loopback on one node; see
// core/gloo_comm.hpp). The gloo ranks meet through dpbench's rendezvous, its port passed on with
// MPI. Each iteration starts at an MPI barrier; its time is the slowest rank's (nccl-tests
// reports the same), which every rank hands to Google Benchmark, so that all make the same
// iteration decisions. Rank 0 alone prints and writes --benchmark_out. A rank whose collective
// fails ends the job (MPI_Abort) with a one-line message. Run it with `mpirun --bind-to none`:
// Open MPI binds each of up to 2 processes to one core by default, and gloo's network thread
// then waits for that core behind the caller (2-3x the time up to 1 MiB on 2 cores); the context
// records cpus_per_process.
//
// Run time: sizes are powers of 8 from 4 B to 64 MiB for every world size, and 256 MiB for
// world_size 2 only (8 ranks x 256 MiB would be 2-4 GiB of buffers and seconds per iteration when
// time-sliced on 2 cores), with a minimum of 0.1 s of measured time per benchmark (MinTime, so
// --benchmark_min_time does not override it); the two-thread memcpy starts at 128 KiB, below
// which the hand-off costs more than the copy. The default run takes under a minute on an idle
// 2-core machine (about 80 s on a busy one); filter and use --benchmark_repetitions for steadier
// figures.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "record/blas_core.hpp"
#include <fmt/format.h>

#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/local_comm.hpp"
#include "core/memory.hpp"
#include "core/mpi_comm.hpp"
#include "core/rendezvous.hpp"
#include "workloads/cpu_kernels.hpp"

namespace dpbench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr double kGB = 1e9;

// Inputs are integer-valued floats in [-50, 50] with period 101 (prime, so that no chunk or
// slice boundary lines up with it and a chunk read from the wrong offset is caught): rank r's
// element i is pattern[i % 101]. Sums over up to 8 ranks are exact in float.
constexpr std::size_t kPeriod = 101;
using Pattern = std::array<float, kPeriod>;

Pattern input_pattern(int r) {
  Pattern pat;
  for (std::size_t i = 0; i < kPeriod; ++i) {
    pat[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % kPeriod) - 50.0f;
  }
  return pat;
}
// Element-wise sum of ranks 0..world_size-1's inputs.
Pattern sum_pattern(int world_size) {
  Pattern sum{};
  for (int r = 0; r < world_size; ++r) {
    const Pattern in = input_pattern(r);
    for (std::size_t i = 0; i < kPeriod; ++i) sum[i] += in[i];
  }
  return sum;
}
Pattern constant_pattern(float v) {
  Pattern pat;
  pat.fill(v);
  return pat;
}

void fill(float* buf, std::size_t n, const Pattern& pat) {
  for (std::size_t i = 0, k = 0; i < n; ++i) {
    buf[i] = pat[k];
    if (++k == kPeriod) k = 0;
  }
}
// Number of elements of buf: [n] that differ from the pattern.
std::size_t mismatches(const float* buf, std::size_t n, const Pattern& pat) {
  std::size_t wrong = 0;
  for (std::size_t i = 0, k = 0; i < n; ++i) {
    wrong += buf[i] != pat[k] ? 1 : 0;
    if (++k == kPeriod) k = 0;
  }
  return wrong;
}

// ---------------------------------------------------------------------------------------------
// RankTeam: world_size ranks as threads of one LocalGroup. Rank 0 is the thread that calls
// round() (the benchmark thread); ranks 1..p-1 are worker threads started once by the
// constructor and stopped (by aborting the group) by the destructor.

class RankTeam {
 public:
  // fn(rank, comm): one rank's part of a round.
  using RankFn = std::function<void(int, LocalCommunicator&)>;

  // world_size >= 2. A rank that waits more than 60 s for its peers aborts the group.
  explicit RankTeam(int world_size)
      : world_size_(world_size), group_(std::make_shared<LocalGroup>(world_size, std::chrono::seconds(60))) {
    for (int r = 0; r < world_size; ++r) {
      comms_.push_back(std::make_unique<LocalCommunicator>(group_, r, nullptr));
    }
    try {
      for (int r = 1; r < world_size; ++r) threads_.emplace_back(&RankTeam::worker, this, r);
    } catch (...) {
      stop("could not start the rank threads");
      throw;
    }
  }
  ~RankTeam() { stop("benchmark finished"); }
  RankTeam(const RankTeam&) = delete;
  RankTeam& operator=(const RankTeam&) = delete;

  // Runs prepare(rank) on every rank (untimed), then a barrier, then op(rank) on every rank.
  // Returns the seconds from rank 0 leaving that barrier until every rank has returned from op.
  // Throws Aborted (an Error) with the failing rank's message if any rank throws; the team is
  // then unusable.
  double round(const RankFn& prepare, const RankFn& op) {
    prepare_.store(&prepare);
    op_.store(&op);
    done_.store(0);
    group_->barrier(0);  // publishes the round to the workers
    prepare(0, *comms_[0]);
    group_->barrier(0);  // start line
    const Clock::time_point start = Clock::now();
    op(0, *comms_[0]);
    while (done_.load(std::memory_order_acquire) < world_size_ - 1) {
      if (group_->aborted()) group_->barrier(0);  // throws Aborted with the failing rank's reason
      std::this_thread::yield();
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  }

 private:
  // Ends the group, which wakes every worker at its barrier, and joins them.
  void stop(const std::string& reason) {
    group_->abort(reason);
    for (std::thread& t : threads_) t.join();
  }

  void worker(int rank) {
    LocalCommunicator& comm = *comms_[static_cast<std::size_t>(rank)];
    try {
      for (;;) {
        group_->barrier(rank);
        (*prepare_.load())(rank, comm);
        group_->barrier(rank);
        (*op_.load())(rank, comm);
        done_.fetch_add(1, std::memory_order_release);
      }
    } catch (const Aborted&) {
      // The group ended: the team is being destroyed, or another rank failed first.
    } catch (const std::exception& e) {
      group_->abort(fmt::format("rank {}: {}", rank, e.what()));
    }
  }

  const int world_size_;
  std::shared_ptr<LocalGroup> group_;
  std::vector<std::unique_ptr<LocalCommunicator>> comms_;
  std::atomic<const RankFn*> prepare_{nullptr};
  std::atomic<const RankFn*> op_{nullptr};
  std::atomic<int> done_{0};
  std::vector<std::thread> threads_;
};

// ---------------------------------------------------------------------------------------------
// One collective under test, filled in per operation as nccl-tests' plug-in struct is. Every
// method taking a rank runs on that rank's thread and touches only that rank's buffers.

class Collective {
 public:
  // world_size ranks, messages of n floats.
  Collective(int world_size, std::size_t n)
      : p_(world_size),
        n_(n),
        a_(static_cast<std::size_t>(world_size)),
        b_(static_cast<std::size_t>(world_size)),
        wrong_(static_cast<std::size_t>(world_size), 0) {}
  virtual ~Collective() = default;

  // Allocates rank's buffers (first touch on its own thread) and fills them with timing inputs.
  virtual void setup(int rank) = 0;
  // Untimed work before each timed operation, e.g. restoring an in-place input.
  virtual void before_op(int /*rank*/) {}
  // The timed operation.
  virtual void op(int rank, LocalCommunicator& comm) = 0;
  // Writes inputs whose result is known exactly.
  virtual void set_check_inputs(int rank) = 0;
  // Number of wrong elements on rank after op() ran on the check inputs.
  virtual std::size_t count_wrong(int rank) const = 0;
  // algbw numerator for a message of `bytes`, and busbw / algbw (nccl-tests factors).
  virtual double moved_bytes(double bytes) const { return bytes; }
  virtual double bus_factor() const { return 1.0; }

  // Runs setup, a warm-up operation, the timed loop and the check; sets the counters.
  void run(benchmark::State& state);

 protected:
  TrackedBuffer<float> alloc() { return TrackedBuffer<float>(tracker_, MemoryCategory::comm_buffers, n_); }
  static void fill(TrackedBuffer<float>& buf, const Pattern& pat) { dpbench::fill(buf.data(), buf.size(), pat); }
  std::size_t mismatches(const TrackedBuffer<float>& buf, const Pattern& pat) const {
    return dpbench::mismatches(buf.data(), n_, pat);
  }
  std::size_t at(int rank) const { return static_cast<std::size_t>(rank); }

  const int p_;
  const std::size_t n_;  // floats per message
  MemoryTracker tracker_;
  // Two buffers per rank, a_[rank] and b_[rank], [n_] floats each; their role is the
  // collective's. Each rank allocates and touches only its own.
  std::vector<TrackedBuffer<float>> a_, b_;

 private:
  std::vector<std::size_t> wrong_;  // per rank, written by that rank's thread
};

void Collective::run(benchmark::State& state) {
  const double bytes = static_cast<double>(n_ * sizeof(float));
  if (static_cast<unsigned>(p_) > std::thread::hardware_concurrency()) state.SetLabel("ranks>cores");
  try {
    RankTeam team(p_);
    const RankTeam::RankFn nothing = [](int, LocalCommunicator&) {};
    const RankTeam::RankFn setup_fn = [this](int r, LocalCommunicator&) { setup(r); };
    const RankTeam::RankFn before_fn = [this](int r, LocalCommunicator&) { before_op(r); };
    const RankTeam::RankFn op_fn = [this](int r, LocalCommunicator& c) { op(r, c); };
    team.round(setup_fn, nothing);
    team.round(before_fn, op_fn);  // warm-up: first use of the peers' buffers and mailboxes

    double total_s = 0;
    for (auto _ : state) {
      const double s = team.round(before_fn, op_fn);
      state.SetIterationTime(s);
      total_s += s;
    }

    // Correctness, untimed, as nccl-tests -c: one operation on exact inputs.
    const RankTeam::RankFn check_inputs = [this](int r, LocalCommunicator&) { set_check_inputs(r); };
    const RankTeam::RankFn op_and_count = [this](int r, LocalCommunicator& c) {
      op(r, c);
      wrong_[at(r)] = count_wrong(r);
    };
    team.round(check_inputs, op_and_count);
    std::size_t wrong = 0;
    for (std::size_t w : wrong_) wrong += w;

    const auto iterations = static_cast<double>(state.iterations());
    const double algbw = total_s > 0 ? moved_bytes(bytes) * iterations / total_s / kGB : 0.0;
    state.counters["algbw"] = algbw;
    state.counters["busbw"] = algbw * bus_factor();
    state.counters["wrong"] = static_cast<double>(wrong);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(n_ * sizeof(float)));
    if (wrong != 0) {
      state.SkipWithError(fmt::format("{} wrong elements after the check operation", wrong).c_str());
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// Ring all-reduce in place (reduce-scatter + all-gather). a_: the buffer reduced; b_: an
// untouched copy of the input. In-place sums grow p-fold per iteration, so before_op restores
// the input from b_ (untimed) and every iteration sums the same integer values.
class AllReduce final : public Collective {
 public:
  using Collective::Collective;
  void setup(int r) override {
    b_[at(r)] = alloc();
    fill(b_[at(r)], input_pattern(r));
    a_[at(r)] = alloc();
    before_op(r);
  }
  void before_op(int r) override { std::memcpy(a_[at(r)].data(), b_[at(r)].data(), n_ * sizeof(float)); }
  void op(int r, LocalCommunicator& comm) override { comm.allreduce_sum(a_[at(r)].data(), n_); }
  void set_check_inputs(int r) override { before_op(r); }
  std::size_t count_wrong(int r) const override { return mismatches(a_[at(r)], sum_pattern(p_)); }
  double bus_factor() const override { return 2.0 * (p_ - 1) / p_; }
};

// Pipelined chain reduce to root 0. a_: each rank's input; the root's becomes the sum (and keeps
// growing linearly over iterations, which stays finite). The check also verifies that non-root
// inputs are left unchanged, as the interface promises.
class Reduce final : public Collective {
 public:
  using Collective::Collective;
  void setup(int r) override {
    a_[at(r)] = alloc();
    set_check_inputs(r);
  }
  void op(int r, LocalCommunicator& comm) override { comm.reduce_sum(a_[at(r)].data(), n_, 0); }
  void set_check_inputs(int r) override { fill(a_[at(r)], input_pattern(r)); }
  std::size_t count_wrong(int r) const override {
    if (r == 0) return mismatches(a_[0], sum_pattern(p_));
    return mismatches(a_[at(r)], input_pattern(r));
  }
};

// Pipelined chain broadcast from root 0. a_: the root's data, the others' destination.
class Broadcast final : public Collective {
 public:
  using Collective::Collective;
  void setup(int r) override {
    a_[at(r)] = alloc();
    fill(a_[at(r)], input_pattern(r));
  }
  void op(int r, LocalCommunicator& comm) override { comm.broadcast(a_[at(r)].data(), n_, 0); }
  void set_check_inputs(int r) override { fill(a_[at(r)], r == 0 ? input_pattern(0) : constant_pattern(-1000.0f)); }
  std::size_t count_wrong(int r) const override { return mismatches(a_[at(r)], input_pattern(0)); }
};

// Parameter-server gradient push over point-to-point: every worker send()s its n gradients to the
// root (rank 0), which recv()s them one worker after another into a staging buffer and adds
// each into its own gradients (the classic incast). a_: gradients (on rank 0, the accumulated
// sum, growing linearly over iterations); b_: rank 0's receive staging.
class RootPush final : public Collective {
 public:
  using Collective::Collective;
  void setup(int r) override {
    a_[at(r)] = alloc();
    if (r == 0) b_[0] = alloc();
    set_check_inputs(r);
  }
  void op(int r, LocalCommunicator& comm) override {
    if (r != 0) {
      comm.send(a_[at(r)].data(), n_, 0);
      return;
    }
    for (int src = 1; src < p_; ++src) {
      comm.recv(b_[0].data(), n_, src);
      cpu::add_inplace(a_[0].data(), b_[0].data(), n_);
    }
  }
  void set_check_inputs(int r) override { fill(a_[at(r)], input_pattern(r)); }
  std::size_t count_wrong(int r) const override {
    if (r != 0) return 0;
    return mismatches(a_[0], sum_pattern(p_));
  }
  double moved_bytes(double bytes) const override { return (p_ - 1) * bytes; }
};

// Parameter-server parameter pull over point-to-point: the root (rank 0) send()s its n
// parameters to every worker in turn, each recv()ing them. a_: parameters / destination.
class RootPull final : public Collective {
 public:
  using Collective::Collective;
  void setup(int r) override {
    a_[at(r)] = alloc();
    fill(a_[at(r)], input_pattern(r));
  }
  void op(int r, LocalCommunicator& comm) override {
    if (r != 0) {
      comm.recv(a_[at(r)].data(), n_, 0);
      return;
    }
    for (int dst = 1; dst < p_; ++dst) comm.send(a_[0].data(), n_, dst);
  }
  void set_check_inputs(int r) override { fill(a_[at(r)], r == 0 ? input_pattern(0) : constant_pattern(-1000.0f)); }
  std::size_t count_wrong(int r) const override { return mismatches(a_[at(r)], input_pattern(0)); }
  double moved_bytes(double bytes) const override { return (p_ - 1) * bytes; }
};

// ranks: state.range(0); bytes: state.range(1), a multiple of 4.
template <typename C>
void run_collective(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const std::int64_t bytes = state.range(1);
  if (ranks < 2 || bytes < 4 || bytes % 4 != 0) {
    state.SkipWithError("needs ranks >= 2 and bytes a positive multiple of 4");
    return;
  }
  C collective(ranks, static_cast<std::size_t>(bytes / 4));
  collective.run(state);
}

// Message sizes in bytes from `from`: 4, 32, 256, ... (x8) up to 64 MiB.
std::vector<std::int64_t> message_sizes(std::int64_t from = 4) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t bytes = 4; bytes <= 64 * kMiB; bytes *= 8) {
    if (bytes >= from) sizes.push_back(bytes);
  }
  return sizes;
}
constexpr std::int64_t kLargest = 256 * kMiB;

// ranks 2, 4, 8 x message_sizes(); 256 MiB for ranks 2 only.
void collective_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ranks", "bytes"});
  for (int ranks : {2, 4, 8}) {
    for (std::int64_t bytes : message_sizes()) b->Args({ranks, bytes});
  }
  b->Args({2, kLargest});
  b->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
}

// bytes: message_sizes() and 256 MiB.
void memcpy_args(benchmark::internal::Benchmark* b) {
  b->ArgName("bytes");
  for (std::int64_t bytes : message_sizes()) b->Arg(bytes);
  b->Arg(kLargest);
  b->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
}

// threads 2 x bytes from 128 KiB: below that the hand-off between threads costs more than the
// copy, and each iteration's wall time is many times the time measured.
void memcpy_parallel_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"threads", "bytes"});
  for (std::int64_t bytes : message_sizes(128 * 1024)) b->Args({2, bytes});
  b->Args({2, kLargest});
  b->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
}

// ---------------------------------------------------------------------------------------------
// Memory bandwidth reference. "GBps" counts the bytes copied per second: each byte is read once
// and written once, so the memory traffic is at least twice that (three times when the stores
// first read the destination lines into cache).

// bytes: state.range(0). One thread, std::memcpy between two buffers.
void memcpy_single(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  MemoryTracker tracker;
  TrackedBuffer<float> src(tracker, MemoryCategory::comm_buffers, bytes / sizeof(float));
  TrackedBuffer<float> dst(tracker, MemoryCategory::comm_buffers, bytes / sizeof(float));
  fill(src.data(), src.size(), input_pattern(0));
  std::memcpy(dst.data(), src.data(), bytes);  // warm-up
  double total_s = 0;
  for (auto _ : state) {
    const Clock::time_point start = Clock::now();
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    const double s = std::chrono::duration<double>(Clock::now() - start).count();
    state.SetIterationTime(s);
    total_s += s;
  }
  const std::size_t wrong = static_cast<std::size_t>(std::memcmp(dst.data(), src.data(), bytes) != 0);
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GBps"] = total_s > 0 ? static_cast<double>(bytes) * iterations / total_s / kGB : 0;
  state.counters["wrong"] = static_cast<double>(wrong);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
  if (wrong != 0) state.SkipWithError("memcpy produced a different buffer");
}

// threads: state.range(0), bytes: state.range(1). Each thread copies its contiguous part
// (bytes / threads, the last one the remainder); timed with the same RankTeam round as the
// collectives, so barrier and hand-off costs are included as they are there.
void memcpy_parallel(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const auto bytes = static_cast<std::size_t>(state.range(1));
  if (threads < 2) {
    state.SkipWithError("needs threads >= 2");
    return;
  }
  try {
    MemoryTracker tracker;
    TrackedBuffer<float> src(tracker, MemoryCategory::comm_buffers, bytes / sizeof(float));
    TrackedBuffer<float> dst(tracker, MemoryCategory::comm_buffers, bytes / sizeof(float));
    auto* s8 = reinterpret_cast<const unsigned char*>(src.data());
    auto* d8 = reinterpret_cast<unsigned char*>(dst.data());
    const std::size_t part = bytes / static_cast<std::size_t>(threads);
    RankTeam team(threads);
    const RankTeam::RankFn nothing = [](int, LocalCommunicator&) {};
    // First touch of each part on the thread that copies it.
    const RankTeam::RankFn init = [&](int r, LocalCommunicator&) {
      const std::size_t begin = static_cast<std::size_t>(r) * part;
      const std::size_t end = r == threads - 1 ? bytes : begin + part;
      fill(src.data() + begin / 4, end / 4 - begin / 4, input_pattern(r));
    };
    const RankTeam::RankFn copy = [&](int r, LocalCommunicator&) {
      const std::size_t begin = static_cast<std::size_t>(r) * part;
      const std::size_t end = r == threads - 1 ? bytes : begin + part;
      std::memcpy(d8 + begin, s8 + begin, end - begin);
    };
    team.round(init, copy);  // warm-up
    double total_s = 0;
    for (auto _ : state) {
      const double s = team.round(nothing, copy);
      state.SetIterationTime(s);
      total_s += s;
    }
    const std::size_t wrong = static_cast<std::size_t>(std::memcmp(d8, s8, bytes) != 0);
    const auto iterations = static_cast<double>(state.iterations());
    state.counters["GBps"] = total_s > 0 ? static_cast<double>(bytes) * iterations / total_s / kGB : 0;
    state.counters["wrong"] = static_cast<double>(wrong);
    state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(bytes));
    if (wrong != 0) state.SkipWithError("memcpy produced a different buffer");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

// ---------------------------------------------------------------------------------------------
// All-reduce across processes (under mpirun).

constexpr std::chrono::milliseconds kProcessTimeout{60000};

// The job's communicators: MPI for control (barriers, the slowest rank's time) and MPI_Allreduce,
// gloo for gloo's algorithms.
struct ProcessWorld {
  int rank = 0;
  int world_size = 1;
  bool oversubscribed = false;  // more processes on this node than cores
  int cpus_per_process = 0;     // CPUs in rank 0's affinity mask
  std::unique_ptr<Communicator> mpi;
  std::unique_ptr<Rendezvous> rendezvous;
  std::unique_ptr<Communicator> gloo;  // null in a build without gloo
};
ProcessWorld& process_world() {
  static ProcessWorld world;
  return world;
}

// Connects the job: MPI first, then gloo's mesh through a rendezvous on rank 0 (loopback when
// every process is on one node, rank 0's host name otherwise) on a port rank 0 picks.
void connect_process_world() {
  ProcessWorld& w = process_world();
  MpiRuntime::init();
  w.rank = MpiRuntime::rank();
  w.world_size = MpiRuntime::size();
  w.oversubscribed = static_cast<unsigned>(MpiRuntime::local_size()) > std::thread::hardware_concurrency();
  w.mpi = make_mpi_communicator(kProcessTimeout);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) w.cpus_per_process = CPU_COUNT(&mask);
  if (!gloo_built() || w.world_size < 2) return;
  if (w.rank == 0 && w.cpus_per_process == 1) {
    std::fprintf(stderr, "dpbench_collectives: note: each process is bound to one CPU, which gloo's network thread "
                         "shares with the caller; run mpirun with --bind-to none for gloo's figures\n");
  }
  std::array<char, 256> host{};
  if (MpiRuntime::local_size() == w.world_size) {
    std::snprintf(host.data(), host.size(), "127.0.0.1");
  } else if (w.rank == 0) {
    gethostname(host.data(), host.size() - 1);
  }
  mpi_broadcast_bytes(host.data(), host.size(), 0);
  const std::string master_addr(host.data());
  int port = 0;
  if (w.rank == 0) {
    w.rendezvous = std::make_unique<Rendezvous>(master_addr, 0, w.world_size, 0, kProcessTimeout);
    port = w.rendezvous->port();
  }
  mpi_broadcast_bytes(&port, sizeof(port), 0);
  if (w.rank != 0) {
    w.rendezvous = std::make_unique<Rendezvous>(master_addr, port, w.world_size, w.rank, kProcessTimeout);
  }
  w.gloo = make_gloo_communicator(*w.rendezvous, "dpbench_collectives", master_addr, kProcessTimeout);
}

// Closes gloo's connections, then MPI.
void disconnect_process_world() {
  ProcessWorld& w = process_world();
  w.gloo.reset();
  w.rendezvous.reset();
  w.mpi.reset();
  MpiRuntime::finalize();
}

enum class ProcessAllReduce { mpi, gloo_ring, gloo_ring_chunked, gloo_halving_doubling };

// The slowest rank's `seconds`, on every rank: an all-reduce over `control` of a vector holding
// each rank's time at its own index (exact, as every other entry is zero).
double slowest(ProcessWorld& w, Communicator& control, double seconds) {
  std::vector<float> times(static_cast<std::size_t>(w.world_size), 0.0f);
  times[static_cast<std::size_t>(w.rank)] = static_cast<float>(seconds);
  control.allreduce_sum(times.data(), times.size());
  return *std::max_element(times.begin(), times.end());
}

// bytes: state.range(1) (state.range(0) is the world size, for the name). In-place sum of the
// rank's input pattern, restored (untimed) before every operation as BM_AllReduce does. The
// barrier and the time exchange around each operation run on the library under test: Open MPI's
// waits spin, gloo's sleep, and a rank spinning in MPI while its peer waits for gloo's network
// thread to wake would take the core that thread needs (on 2 cores, milliseconds per message).
void process_allreduce(benchmark::State& state, ProcessAllReduce impl) {
  ProcessWorld& w = process_world();
  Communicator& control = impl == ProcessAllReduce::mpi ? *w.mpi : *w.gloo;
  const auto n = static_cast<std::size_t>(state.range(1) / 4);
  if (w.oversubscribed) state.SetLabel("ranks>cores");
  std::vector<float> input(n), buf(n);
  fill(input.data(), n, input_pattern(w.rank));
  const auto restore = [&] { std::memcpy(buf.data(), input.data(), n * sizeof(float)); };
  std::unique_ptr<GlooAllreduce> gloo_algorithm;
  try {
    if (impl == ProcessAllReduce::gloo_ring_chunked) {
      gloo_algorithm = make_gloo_allreduce(*w.gloo, GlooAllreduceAlgorithm::ring_chunked, buf.data(), n);
    } else if (impl == ProcessAllReduce::gloo_halving_doubling) {
      gloo_algorithm = make_gloo_allreduce(*w.gloo, GlooAllreduceAlgorithm::halving_doubling, buf.data(), n);
    } else if (impl == ProcessAllReduce::gloo_ring) {
      gloo_algorithm = make_gloo_allreduce(*w.gloo, GlooAllreduceAlgorithm::ring, buf.data(), n);
    }
  } catch (const std::exception& e) {
    MpiRuntime::abort(1, fmt::format("dpbench_collectives: failed: rank {}: {}", w.rank, e.what()));
  }
  const auto op = [&] {
    try {
      if (gloo_algorithm) {
        gloo_algorithm->run();
      } else {
        w.mpi->allreduce_sum(buf.data(), n);
      }
    } catch (const std::exception& e) {
      MpiRuntime::abort(1, fmt::format("dpbench_collectives: failed: rank {}: {}", w.rank, e.what()));
    }
  };
  restore();
  op();  // warm-up
  double total_s = 0;
  for (auto _ : state) {
    restore();
    control.barrier();
    const Clock::time_point start = Clock::now();
    op();
    const double s = slowest(w, control, std::chrono::duration<double>(Clock::now() - start).count());
    state.SetIterationTime(s);
    total_s += s;
  }
  restore();
  op();
  float wrong = static_cast<float>(mismatches(buf.data(), n, sum_pattern(w.world_size)));
  control.allreduce_sum(&wrong, 1);  // any rank's wrong elements make the sum non-zero
  const double bytes = static_cast<double>(n * sizeof(float));
  const double algbw = total_s > 0 ? bytes * static_cast<double>(state.iterations()) / total_s / kGB : 0.0;
  state.counters["algbw"] = algbw;
  state.counters["busbw"] = algbw * 2.0 * (w.world_size - 1) / w.world_size;
  state.counters["wrong"] = wrong;
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n * sizeof(float)));
  if (wrong != 0) state.SkipWithError(fmt::format("{} wrong elements after the check operation", wrong).c_str());
}

// world_size x message_sizes(), and 256 MiB at world_size 2, as collective_args.
void process_args(benchmark::internal::Benchmark* b) {
  const int ranks = process_world().world_size;
  b->ArgNames({"ranks", "bytes"});
  for (std::int64_t bytes : message_sizes()) b->Args({ranks, bytes});
  if (ranks == 2) b->Args({ranks, kLargest});
  b->UseManualTime()->MinTime(0.1)->Unit(benchmark::kMicrosecond);
}

// Replaces the thread-level benchmarks with the process-level ones.
void register_process_benchmarks() {
  benchmark::ClearRegisteredBenchmarks();
  const std::vector<std::pair<const char*, ProcessAllReduce>> impls = {
      {"BM_AllReduceMpi", ProcessAllReduce::mpi},
      {"BM_AllReduceGlooRing", ProcessAllReduce::gloo_ring},
      {"BM_AllReduceGlooRingChunked", ProcessAllReduce::gloo_ring_chunked},
      {"BM_AllReduceGlooHalvingDoubling", ProcessAllReduce::gloo_halving_doubling},
  };
  for (const auto& [name, impl] : impls) {
    if (impl != ProcessAllReduce::mpi && !process_world().gloo) continue;
    benchmark::RegisterBenchmark(name, [impl = impl](benchmark::State& state) {
      process_allreduce(state, impl);
    })->Apply(process_args);
  }
}

// Prints and writes nothing: the reporter of ranks other than 0.
class SilentReporter final : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

// argv without --benchmark_out* (ranks other than 0 must not open rank 0's output file).
void drop_output_flags(int& argc, char** argv) {
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--benchmark_out", 15) != 0) argv[kept++] = argv[i];
  }
  argc = kept;
  argv[argc] = nullptr;
}

}  // namespace
}  // namespace dpbench

static void BM_AllReduce(benchmark::State& state) { dpbench::run_collective<dpbench::AllReduce>(state); }
static void BM_Reduce(benchmark::State& state) { dpbench::run_collective<dpbench::Reduce>(state); }
static void BM_Broadcast(benchmark::State& state) { dpbench::run_collective<dpbench::Broadcast>(state); }
static void BM_RootPush(benchmark::State& state) { dpbench::run_collective<dpbench::RootPush>(state); }
static void BM_RootPull(benchmark::State& state) { dpbench::run_collective<dpbench::RootPull>(state); }
static void BM_Memcpy(benchmark::State& state) { dpbench::memcpy_single(state); }
static void BM_MemcpyParallel(benchmark::State& state) { dpbench::memcpy_parallel(state); }

BENCHMARK(BM_AllReduce)->Apply(dpbench::collective_args);
BENCHMARK(BM_Reduce)->Apply(dpbench::collective_args);
BENCHMARK(BM_Broadcast)->Apply(dpbench::collective_args);
BENCHMARK(BM_RootPush)->Apply(dpbench::collective_args);
BENCHMARK(BM_RootPull)->Apply(dpbench::collective_args);
BENCHMARK(BM_Memcpy)->Apply(dpbench::memcpy_args);
BENCHMARK(BM_MemcpyParallel)->Apply(dpbench::memcpy_parallel_args);

// Google Benchmark's main, with the process-level benchmarks in place of the thread-level ones
// when mpirun started 2 or more processes.
int main(int argc, char** argv) {
  dpbench::select_blas_core(argv);
  bool processes = false;
  try {
    if (dpbench::mpi_launched() && !dpbench::mpi_built()) {
      throw dpbench::InputError(
          "started by an MPI launcher, but this build has no MPI (apt-get install libopenmpi-dev openmpi-bin, then "
          "rebuild)");
    }
    if (dpbench::mpi_launched()) {
      dpbench::connect_process_world();
      processes = dpbench::process_world().world_size >= 2;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dpbench_collectives: %s\n", dpbench::one_line(e.what()).c_str());
    return 2;
  }
  const int rank = dpbench::process_world().rank;
  if (processes) {
    dpbench::register_process_benchmarks();
    if (rank != 0) dpbench::drop_output_flags(argc, argv);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("blas_core_note", dpbench::blas_core_note());
  if (processes) {
    const auto& w = dpbench::process_world();
    benchmark::AddCustomContext("processes", std::to_string(w.world_size));
    benchmark::AddCustomContext("cpus_per_process", std::to_string(w.cpus_per_process));
    benchmark::AddCustomContext("mpi_library", dpbench::MpiRuntime::version());
    benchmark::AddCustomContext("gloo", w.gloo ? "tcp transport" : "not in this build (libgloo-dev)");
  }
  if (processes && rank != 0) {
    dpbench::SilentReporter silent;
    benchmark::RunSpecifiedBenchmarks(&silent);
  } else {
    benchmark::RunSpecifiedBenchmarks();
  }
  benchmark::Shutdown();
  if (dpbench::MpiRuntime::active()) dpbench::disconnect_process_world();
  return 0;
}
