// Tests of the `local` backend between GPU ranks (cuda/cuda_local_ops.hpp): one thread per rank,
// rank r on device r % device_count (several virtual ranks share a GPU when there are fewer GPUs
// than ranks), each with its own allocator, stream and LocalCommunicator over make_cuda_mem_ops.
// The collectives must give exact results on integer-valued floats, as on the CPU
// (tests/test_comm.cpp), and count the same bytes. Skipped without a usable GPU.
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/comm.hpp"
#include "cuda/cuda_local_ops.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/memory.hpp"
#include "tests/cuda_test_util.hpp"

namespace dpbench {
namespace {

// What a rank's body gets: its communicator, and an allocator and stream on its device.
struct GpuRank {
  LocalCommunicator& comm;
  DeviceAllocator& allocator;
  cuda::Stream& stream;
  int device;

  int rank() const { return comm.rank(); }
  // n floats on this rank's device holding `host` (or zeros when host is empty).
  DeviceBuffer<float> upload(const std::vector<float>& host, std::size_t n) {
    DeviceBuffer<float> buf(allocator, MemoryCategory::gradients, n);
    if (!host.empty()) buf.copy_from_host(host.data(), std::min(n, host.size()), stream.handle());
    return buf;
  }
  // The buffer's contents, after the stream's work has finished.
  std::vector<float> download(const DeviceBuffer<float>& buf) {
    stream.synchronize();
    return buf.to_host(stream.handle());
  }
};

// Runs body on p GPU ranks (threads) of one group. Returns each rank's stats; a rank that throws
// aborts the group (so its peers do not hang) and its message is reported as a test failure.
std::vector<CommStats> on_gpu_ranks(int p, const std::function<void(GpuRank&)>& body,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  const int devices = cuda::device_count();
  if (devices < 1) {
    ADD_FAILURE() << "no CUDA device";
    return std::vector<CommStats>(static_cast<std::size_t>(p));
  }
  auto group = std::make_shared<LocalGroup>(p, timeout);
  std::vector<CommStats> stats(static_cast<std::size_t>(p));
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int device = r % devices;
        cuda::set_device(device);
        MemoryTracker tracker;
        DeviceAllocator allocator(device, tracker);
        cuda::Stream stream;
        LocalCommunicator comm(group, r, make_cuda_mem_ops(device, allocator, stream.handle(), std::min(p, devices)));
        GpuRank ctx{comm, allocator, stream, device};
        body(ctx);
        stream.synchronize();
        stats[static_cast<std::size_t>(r)] = comm.stats();
      } catch (const std::exception& e) {
        group->abort("rank " + std::to_string(r) + " failed: " + e.what());
        std::lock_guard<std::mutex> lock(failures_mutex);
        failures.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& f : failures) ADD_FAILURE() << "p=" << p << " " << f;
  return stats;
}

// Integer-valued input of rank r, element i: every sum over ranks is exact in float.
float value(int r, std::size_t i) { return static_cast<float>((r + 1) * static_cast<int>(i % 7 + 1)); }

std::vector<float> values(int r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(r, i);
  return v;
}

float sum_over_ranks(int p, std::size_t i) {
  float s = 0;
  for (int q = 0; q < p; ++q) s += value(q, i);
  return s;
}

std::int64_t bytes(std::size_t elems) { return static_cast<std::int64_t>(elems * sizeof(float)); }

class CudaComm : public testing::CudaStreamTest {};

TEST_F(CudaComm, RingAllReduceIsExactForWorldSizes1To8AndAwkwardLengths) {
  for (int p = 1; p <= 8; ++p) {
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, up - 1, up, up + 1, std::size_t{100003}}) {
      std::vector<std::size_t> wrong(up, 0);
      const auto stats = on_gpu_ranks(p, [&](GpuRank& g) {
        auto buf = g.upload(values(g.rank(), n), n);
        g.comm.allreduce_sum(buf.data(), n);
        const auto out = g.download(buf);
        for (std::size_t i = 0; i < n; ++i) {
          if (out[i] != sum_over_ranks(p, i)) ++wrong[static_cast<std::size_t>(g.rank())];
        }
      });
      for (int r = 0; r < p; ++r) {
        const auto i = static_cast<std::size_t>(r);
        EXPECT_EQ(wrong[i], 0u) << "p=" << p << " n=" << n << " rank=" << r;
        EXPECT_EQ(stats[i].bytes_sent, bytes(ring_allreduce_counts(n, p, r).sent))
            << "p=" << p << " n=" << n << " rank=" << r;
        EXPECT_EQ(stats[i].bytes_received, bytes(ring_allreduce_counts(n, p, r).received))
            << "p=" << p << " n=" << n << " rank=" << r;
      }
    }
  }
}

TEST_F(CudaComm, ChainReduceAndBroadcastAreExact) {
  for (int p : {2, 3, 5}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{100003}, 3 * LocalCommunicator::kSliceElems + 5}) {
      std::vector<int> roots = {0};
      if (p > 2) roots.push_back(2);
      for (int root : roots) {
        // Reduce: the root holds the sum, every other rank its own input, unchanged.
        std::vector<std::size_t> wrong(static_cast<std::size_t>(p), 0);
        const auto stats = on_gpu_ranks(p, [&](GpuRank& g) {
          auto buf = g.upload(values(g.rank(), n), n);
          g.comm.reduce_sum(buf.data(), n, root);
          const auto out = g.download(buf);
          for (std::size_t i = 0; i < n; ++i) {
            const float expect = g.rank() == root ? sum_over_ranks(p, i) : value(g.rank(), i);
            if (out[i] != expect) ++wrong[static_cast<std::size_t>(g.rank())];
          }
        });
        for (int r = 0; r < p; ++r) {
          const auto i = static_cast<std::size_t>(r);
          EXPECT_EQ(wrong[i], 0u) << "reduce p=" << p << " n=" << n << " root=" << root << " rank=" << r;
          EXPECT_EQ(stats[i].bytes_sent, bytes(chain_reduce_counts(n, p, r, root).sent));
          EXPECT_EQ(stats[i].bytes_received, bytes(chain_reduce_counts(n, p, r, root).received));
        }
      }

      // Broadcast from the last rank: every rank ends with the root's data.
      const int root = p - 1;
      std::vector<std::size_t> wrong(static_cast<std::size_t>(p), 0);
      const auto stats = on_gpu_ranks(p, [&](GpuRank& g) {
        auto buf = g.upload(g.rank() == root ? values(root, n) : std::vector<float>(n, -1.0f), n);
        g.comm.broadcast(buf.data(), n, root);
        const auto out = g.download(buf);
        for (std::size_t i = 0; i < n; ++i) {
          if (out[i] != value(root, i)) ++wrong[static_cast<std::size_t>(g.rank())];
        }
      });
      for (int r = 0; r < p; ++r) {
        const auto i = static_cast<std::size_t>(r);
        EXPECT_EQ(wrong[i], 0u) << "broadcast p=" << p << " n=" << n << " rank=" << r;
        EXPECT_EQ(stats[i].bytes_sent, bytes(chain_broadcast_counts(n, p, r, root).sent));
        EXPECT_EQ(stats[i].bytes_received, bytes(chain_broadcast_counts(n, p, r, root).received));
      }
    }
  }
}

TEST_F(CudaComm, ScatterGatherWithUnevenCountsAndAllGatherAreExact) {
  // Scatter from root 1, scale by 10 on each rank, gather back to root 1; one rank gets nothing.
  const int p = 4;
  const int root = 1;
  const std::vector<std::size_t> counts = {5, 0, 40000, 3};
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  std::vector<float> source(total);
  std::iota(source.begin(), source.end(), 1.0f);
  std::vector<std::vector<float>> parts(static_cast<std::size_t>(p));
  std::vector<float> gathered;
  on_gpu_ranks(p, [&](GpuRank& g) {
    const auto r = static_cast<std::size_t>(g.rank());
    DeviceBuffer<float> send;
    DeviceBuffer<float> recv_all;
    if (g.rank() == root) {
      send = g.upload(source, total);
      recv_all = g.upload({}, total);
    }
    auto mine = g.upload({}, counts[r]);
    g.comm.scatterv(g.rank() == root ? send.data() : nullptr, counts, mine.data(), root);
    auto host = g.download(mine);
    parts[r] = host;
    for (float& v : host) v *= 10.0f;
    mine.copy_from_host(host.data(), host.size(), g.stream.handle());
    g.comm.gatherv(mine.data(), counts, g.rank() == root ? recv_all.data() : nullptr, root);
    if (g.rank() == root) gathered = g.download(recv_all);
  });
  std::size_t offset = 0;
  for (int r = 0; r < p; ++r) {
    const auto c = counts[static_cast<std::size_t>(r)];
    const std::vector<float> expect(source.begin() + static_cast<long>(offset),
                                    source.begin() + static_cast<long>(offset + c));
    EXPECT_EQ(parts[static_cast<std::size_t>(r)], expect) << "scatter to rank " << r;
    offset += c;
  }
  ASSERT_EQ(gathered.size(), total);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < total; ++i) wrong += gathered[i] != 10.0f * source[i] ? 1 : 0;
  EXPECT_EQ(wrong, 0u) << "gather";

  // All-gather: rank q's n values land at offset q*n on every rank.
  for (int world : {1, 3, 5}) {
    for (std::size_t n : {std::size_t{3}, std::size_t{10007}}) {
      std::vector<std::size_t> bad(static_cast<std::size_t>(world), 0);
      on_gpu_ranks(world, [&](GpuRank& g) {
        auto send = g.upload(values(g.rank(), n), n);
        auto recv = g.upload({}, n * static_cast<std::size_t>(world));
        g.comm.allgather(send.data(), recv.data(), n);
        const auto out = g.download(recv);
        for (int q = 0; q < world; ++q) {
          for (std::size_t i = 0; i < n; ++i) {
            if (out[static_cast<std::size_t>(q) * n + i] != value(q, i)) {
              ++bad[static_cast<std::size_t>(g.rank())];
            }
          }
        }
      });
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(bad[static_cast<std::size_t>(r)], 0u) << "allgather p=" << world << " n=" << n << " rank=" << r;
      }
    }
  }
}

TEST_F(CudaComm, SendRecvBetweenTwoGpuRanksIsExact) {
  // Rank 1 sends to rank 0, which adds 1 on the host and sends the result back.
  const std::size_t n = 100003;
  std::vector<float> at_zero;
  std::vector<float> back_at_one;
  const auto stats = on_gpu_ranks(2, [&](GpuRank& g) {
    auto buf = g.upload(g.rank() == 1 ? values(1, n) : std::vector<float>(n, -1.0f), n);
    if (g.rank() == 1) {
      g.comm.send(buf.data(), n, 0);
      auto reply = g.upload({}, n);
      g.comm.recv(reply.data(), n, 0);
      back_at_one = g.download(reply);
    } else {
      g.comm.recv(buf.data(), n, 1);
      at_zero = g.download(buf);
      std::vector<float> plus_one = at_zero;
      for (float& v : plus_one) v += 1.0f;
      buf.copy_from_host(plus_one.data(), n, g.stream.handle());
      g.comm.send(buf.data(), n, 1);
    }
  });
  ASSERT_EQ(at_zero.size(), n);
  ASSERT_EQ(back_at_one.size(), n);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    wrong += at_zero[i] != value(1, i) ? 1 : 0;
    wrong += back_at_one[i] != value(1, i) + 1.0f ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(stats[0].bytes_received, bytes(n));
  EXPECT_EQ(stats[0].bytes_sent, bytes(n));
  EXPECT_EQ(stats[1].bytes_sent, bytes(n));
  EXPECT_EQ(stats[1].bytes_received, bytes(n));
}

}  // namespace
}  // namespace dpbench
