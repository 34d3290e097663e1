// Tests of the `local` backend's collectives: exact results on integer-valued floats for world
// sizes 1-8 and awkward lengths, byte counts against the algorithms' formulas, and failures
// that abort the group instead of hanging.
#include <chrono>
#include <functional>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "core/local_comm.hpp"

namespace dpbench {
namespace {

// Runs fn(comm) on p threads of one group; returns each rank's stats.
std::vector<CommStats> on_ranks(int p, const std::function<void(LocalCommunicator&)>& fn,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  auto group = std::make_shared<LocalGroup>(p, timeout);
  std::vector<CommStats> stats(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicator comm(group, r, nullptr);
      fn(comm);
      stats[static_cast<std::size_t>(r)] = comm.stats();
    });
  }
  for (auto& t : threads) t.join();
  return stats;
}

// Integer-valued input of rank r, element i: sums over ranks are exact in float.
float value(int r, std::size_t i) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(r) * 13) % 101) - 50.0f;
}

std::vector<std::size_t> lengths_for(int p) {
  const auto up = static_cast<std::size_t>(p);
  return {0, 1, up - 1, up, up + 1, 100003};
}

TEST(RingAllReduce, SumsExactlyForWorldSizes1To8AndAwkwardLengths) {
  for (int p = 1; p <= 8; ++p) {
    for (std::size_t n : lengths_for(p)) {
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p));
      for (int r = 0; r < p; ++r) {
        bufs[static_cast<std::size_t>(r)].resize(n);
        for (std::size_t i = 0; i < n; ++i) bufs[static_cast<std::size_t>(r)][i] = value(r, i);
      }
      on_ranks(p, [&](LocalCommunicator& c) { c.allreduce_sum(bufs[static_cast<std::size_t>(c.rank())].data(), n); });
      for (int r = 0; r < p; ++r) {
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < n; ++i) {
          float expect = 0;
          for (int q = 0; q < p; ++q) expect += value(q, i);
          if (bufs[static_cast<std::size_t>(r)][i] != expect) ++wrong;
        }
        ASSERT_EQ(wrong, 0u) << "p=" << p << " n=" << n << " rank=" << r;
      }
    }
  }
}

TEST(RingAllReduce, ByteCountsMatchTwoTimesPMinusOneOverP) {
  for (int p = 2; p <= 8; ++p) {
    for (std::size_t n : {std::size_t{100003}, std::size_t{64}, static_cast<std::size_t>(p + 1)}) {
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p), std::vector<float>(n, 1.0f));
      const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
        c.allreduce_sum(bufs[static_cast<std::size_t>(c.rank())].data(), n);
      });
      std::int64_t total_sent = 0, total_recv = 0;
      const double ideal = 2.0 * (p - 1) / p * static_cast<double>(n) * sizeof(float);
      for (const auto& s : stats) {
        // Up to chunk rounding: each of the 2(p-1) steps moves floor(n/p) or ceil(n/p) elements.
        EXPECT_NEAR(static_cast<double>(s.bytes_sent), ideal, 2.0 * (p - 1) * sizeof(float));
        EXPECT_NEAR(static_cast<double>(s.bytes_received), ideal, 2.0 * (p - 1) * sizeof(float));
        total_sent += s.bytes_sent;
        total_recv += s.bytes_received;
      }
      // Every chunk crosses p-1 links in each phase: exactly 2(p-1)n elements in all.
      const auto exact = static_cast<std::int64_t>(2 * (p - 1) * n * sizeof(float));
      EXPECT_EQ(total_sent, exact) << "p=" << p << " n=" << n;
      EXPECT_EQ(total_recv, exact) << "p=" << p << " n=" << n;
    }
  }
}

TEST(ByteCounts, LocalBackendCountsEqualTheSharedFormulas) {
  // MPI and NCCL cannot count what their libraries move; they report these formulas. The local
  // backend counts what it really moves, step by step: the two must agree exactly.
  for (int p = 1; p <= 6; ++p) {
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(p + 1), std::size_t{100003}}) {
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p), std::vector<float>(n, 1.0f));
      const int root = p / 2;
      std::vector<CommStats> ar, red, bc;
      const auto a = on_ranks(p, [&](LocalCommunicator& c) {
        c.allreduce_sum(bufs[static_cast<std::size_t>(c.rank())].data(), n);
      });
      const auto r = on_ranks(p, [&](LocalCommunicator& c) {
        c.reduce_sum(bufs[static_cast<std::size_t>(c.rank())].data(), n, root);
      });
      const auto b = on_ranks(p, [&](LocalCommunicator& c) {
        c.broadcast(bufs[static_cast<std::size_t>(c.rank())].data(), n, root);
      });
      for (int rank = 0; rank < p; ++rank) {
        const auto i = static_cast<std::size_t>(rank);
        const auto bytes = [](std::size_t elems) { return static_cast<std::int64_t>(elems * sizeof(float)); };
        EXPECT_EQ(a[i].bytes_sent, bytes(ring_allreduce_counts(n, p, rank).sent)) << p << " " << n;
        EXPECT_EQ(a[i].bytes_received, bytes(ring_allreduce_counts(n, p, rank).received));
        EXPECT_EQ(r[i].bytes_sent, bytes(chain_reduce_counts(n, p, rank, root).sent));
        EXPECT_EQ(r[i].bytes_received, bytes(chain_reduce_counts(n, p, rank, root).received));
        EXPECT_EQ(b[i].bytes_sent, bytes(chain_broadcast_counts(n, p, rank, root).sent));
        EXPECT_EQ(b[i].bytes_received, bytes(chain_broadcast_counts(n, p, rank, root).received));
      }
    }
  }
}

TEST(ChainReduce, SumsOntoRootAndLeavesOthersUnchanged) {
  for (int p = 1; p <= 6; ++p) {
    for (int root = 0; root < p; ++root) {
      // Longer than two slices so that the pipeline and the scratch double-buffer are exercised.
      const std::size_t n = 2 * LocalCommunicator::kSliceElems + 77;
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p), std::vector<float>(n));
      for (int r = 0; r < p; ++r) {
        for (std::size_t i = 0; i < n; ++i) bufs[static_cast<std::size_t>(r)][i] = value(r, i);
      }
      const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
        c.reduce_sum(bufs[static_cast<std::size_t>(c.rank())].data(), n, root);
      });
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) {
        float expect = 0;
        for (int q = 0; q < p; ++q) expect += value(q, i);
        if (bufs[static_cast<std::size_t>(root)][i] != expect) ++wrong;
        for (int r = 0; r < p; ++r) {
          if (r != root && bufs[static_cast<std::size_t>(r)][i] != value(r, i)) ++wrong;
        }
      }
      EXPECT_EQ(wrong, 0u) << "p=" << p << " root=" << root;
      // Each rank moves the vector at most once in each direction; the root only receives.
      const auto nb = static_cast<std::int64_t>(n * sizeof(float));
      if (p > 1) {
        EXPECT_EQ(stats[static_cast<std::size_t>(root)].bytes_sent, 0);
        EXPECT_EQ(stats[static_cast<std::size_t>(root)].bytes_received, nb);
        EXPECT_EQ(stats[static_cast<std::size_t>((root + 1) % p)].bytes_sent, nb);
      }
    }
  }
}

TEST(ChainBroadcast, CopiesRootToEveryRank) {
  for (int p = 1; p <= 6; ++p) {
    const int root = p - 1;
    const std::size_t n = LocalCommunicator::kSliceElems * 3 + 5;
    std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p), std::vector<float>(n, -1.0f));
    for (std::size_t i = 0; i < n; ++i) bufs[static_cast<std::size_t>(root)][i] = value(root, i);
    const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
      c.broadcast(bufs[static_cast<std::size_t>(c.rank())].data(), n, root);
    });
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(bufs[static_cast<std::size_t>(r)], bufs[static_cast<std::size_t>(root)]) << "rank " << r;
    }
    std::int64_t total = 0;
    for (const auto& s : stats) total += s.bytes_received;
    EXPECT_EQ(total, static_cast<std::int64_t>((p - 1) * n * sizeof(float)));
  }
}

TEST(AllGather, PlacesRankDataAtRankOffset) {
  for (int p = 1; p <= 5; ++p) {
    const std::size_t n = 3;
    std::vector<std::vector<float>> out(static_cast<std::size_t>(p),
                                        std::vector<float>(n * static_cast<std::size_t>(p)));
    on_ranks(p, [&](LocalCommunicator& c) {
      std::vector<float> mine(n);
      for (std::size_t i = 0; i < n; ++i) mine[i] = value(c.rank(), i);
      c.allgather(mine.data(), out[static_cast<std::size_t>(c.rank())].data(), n);
    });
    for (int r = 0; r < p; ++r) {
      for (int q = 0; q < p; ++q) {
        for (std::size_t i = 0; i < n; ++i) {
          EXPECT_EQ(out[static_cast<std::size_t>(r)][static_cast<std::size_t>(q) * n + i], value(q, i));
        }
      }
    }
  }
}

// Segment layouts for world size p: even, uneven (first larger), with empty segments (as the
// sharded parameter server's non-server ranks have), and all empty.
std::vector<std::vector<std::size_t>> layouts_for(int p) {
  const auto up = static_cast<std::size_t>(p);
  std::vector<std::vector<std::size_t>> out;
  out.push_back(std::vector<std::size_t>(up, 5));
  std::vector<std::size_t> uneven(up);
  for (std::size_t i = 0; i < up; ++i) uneven[i] = 1000 + 37 * i + (i == 0 ? 1 : 0);
  out.push_back(uneven);
  std::vector<std::size_t> holes(up, 0);
  holes[0] = 7;
  if (p > 2) holes[up - 2] = 3;
  out.push_back(holes);
  out.push_back(std::vector<std::size_t>(up, 0));
  return out;
}

TEST(ReduceScatterV, EveryRankGetsTheSumOfItsSegmentForAnyLayout) {
  for (int p = 1; p <= 6; ++p) {
    for (const auto& counts : layouts_for(p)) {
      const std::size_t n = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      std::vector<std::vector<float>> out(static_cast<std::size_t>(p));
      const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
        std::vector<float> send(n);
        for (std::size_t i = 0; i < n; ++i) send[i] = value(c.rank(), i);
        auto& mine = out[static_cast<std::size_t>(c.rank())];
        mine.assign(counts[static_cast<std::size_t>(c.rank())], -1.0f);
        c.reduce_scatterv_sum(send.data(), counts, mine.data());
      });
      std::size_t offset = 0;
      for (int r = 0; r < p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        for (std::size_t i = 0; i < counts[ur]; ++i) {
          float expect = 0;
          for (int q = 0; q < p; ++q) expect += value(q, offset + i);
          ASSERT_EQ(out[ur][i], expect) << "p=" << p << " rank=" << r << " i=" << i;
        }
        offset += counts[ur];
        // What the ring moved, step by step, is the formula MPI and NCCL report.
        const ElementCounts f = ring_reduce_scatter_counts(counts, r);
        EXPECT_EQ(stats[ur].bytes_sent, static_cast<std::int64_t>(f.sent * sizeof(float))) << "p=" << p;
        EXPECT_EQ(stats[ur].bytes_received, static_cast<std::int64_t>(f.received * sizeof(float))) << "p=" << p;
      }
    }
  }
}

TEST(AllGatherV, EveryRankEndsWithEverySegmentInPlace) {
  for (int p = 1; p <= 6; ++p) {
    for (const auto& counts : layouts_for(p)) {
      const std::size_t n = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      std::vector<std::vector<float>> bufs(static_cast<std::size_t>(p));
      const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
        auto& buf = bufs[static_cast<std::size_t>(c.rank())];
        buf.assign(n, -1.0f);
        std::size_t offset = 0;
        for (int q = 0; q < c.rank(); ++q) offset += counts[static_cast<std::size_t>(q)];
        for (std::size_t i = 0; i < counts[static_cast<std::size_t>(c.rank())]; ++i) {
          buf[offset + i] = value(c.rank(), offset + i);
        }
        c.allgatherv(buf.data(), counts);
      });
      for (int r = 0; r < p; ++r) {
        std::size_t offset = 0;
        for (int q = 0; q < p; ++q) {
          for (std::size_t i = 0; i < counts[static_cast<std::size_t>(q)]; ++i) {
            ASSERT_EQ(bufs[static_cast<std::size_t>(r)][offset + i], value(q, offset + i))
                << "p=" << p << " rank=" << r << " segment=" << q;
          }
          offset += counts[static_cast<std::size_t>(q)];
        }
        const ElementCounts f = ring_allgather_counts(counts, r);
        EXPECT_EQ(stats[static_cast<std::size_t>(r)].bytes_sent, static_cast<std::int64_t>(f.sent * sizeof(float)));
        EXPECT_EQ(stats[static_cast<std::size_t>(r)].bytes_received,
                  static_cast<std::int64_t>(f.received * sizeof(float)));
      }
    }
  }
}

TEST(ReduceScatterV, EvenSegmentsMoveHalfOfARingAllReduce) {
  // With equal segments, reduce-scatter + all-gather moves exactly what ring all-reduce does.
  for (int p = 2; p <= 6; ++p) {
    const std::vector<std::size_t> counts(static_cast<std::size_t>(p), 11);
    const std::size_t n = 11 * static_cast<std::size_t>(p);
    for (int r = 0; r < p; ++r) {
      const ElementCounts rs = ring_reduce_scatter_counts(counts, r);
      const ElementCounts ag = ring_allgather_counts(counts, r);
      EXPECT_EQ(rs.sent + ag.sent, ring_allreduce_counts(n, p, r).sent);
      EXPECT_EQ(rs.received + ag.received, ring_allreduce_counts(n, p, r).received);
      EXPECT_EQ(rs.sent, static_cast<std::size_t>(p - 1) * 11);
    }
  }
}

TEST(ScatterGather, ChunksRoundTripWithUnevenCounts) {
  const int p = 4;
  const std::vector<std::size_t> counts = {3, 3, 3, 1};
  std::vector<float> source(10);
  std::iota(source.begin(), source.end(), 1.0f);
  std::vector<float> gathered(10, 0.0f);
  std::vector<std::vector<float>> parts(p);
  const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
    auto& mine = parts[static_cast<std::size_t>(c.rank())];
    mine.assign(counts[static_cast<std::size_t>(c.rank())], 0.0f);
    c.scatterv(c.rank() == 0 ? source.data() : nullptr, counts, mine.data(), 0);
    for (float& v : mine) v *= 10.0f;
    c.gatherv(mine.data(), counts, c.rank() == 0 ? gathered.data() : nullptr, 0);
  });
  EXPECT_EQ(parts[3], std::vector<float>{100.0f});  // received 10, scaled by 10
  EXPECT_EQ(parts[1], (std::vector<float>{40.0f, 50.0f, 60.0f}));
  for (std::size_t i = 0; i < 10; ++i) EXPECT_EQ(gathered[i], 10.0f * source[i]);
  // Root sends the 7 elements it does not keep and receives the same 7 back.
  EXPECT_EQ(stats[0].bytes_sent, 7 * 4);
  EXPECT_EQ(stats[0].bytes_received, 7 * 4);
  EXPECT_EQ(stats[3].bytes_received, 1 * 4);
}

TEST(PointToPoint, IncastToRootCountsPMinusOneTimesN) {
  const int p = 5;
  const std::size_t n = 1000;
  std::vector<float> sum(n, 0.0f);
  const auto stats = on_ranks(p, [&](LocalCommunicator& c) {
    std::vector<float> buf(n, static_cast<float>(c.rank()));
    if (c.rank() == 0) {
      for (int r = 1; r < p; ++r) {
        c.recv(buf.data(), n, r);
        for (std::size_t i = 0; i < n; ++i) sum[i] += buf[i];
      }
    } else {
      c.send(buf.data(), n, 0);
    }
  });
  EXPECT_EQ(sum[0], 1.0f + 2.0f + 3.0f + 4.0f);
  EXPECT_EQ(stats[0].bytes_received, static_cast<std::int64_t>((p - 1) * n * sizeof(float)));
  EXPECT_EQ(stats[0].bytes_sent, 0);
  EXPECT_EQ(stats[2].bytes_sent, static_cast<std::int64_t>(n * sizeof(float)));
}

TEST(LocalGroup, RankThatThrowsAbortsPeersInsteadOfHanging) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<int> aborted(4, 0);
  on_ranks(4, [&](LocalCommunicator& c) {
    std::vector<float> buf(100, 1.0f);
    try {
      if (c.rank() == 2) {
        c.abort("rank 2: injected failure");
        return;
      }
      c.allreduce_sum(buf.data(), buf.size());
    } catch (const Aborted& e) {
      EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos);
      aborted[static_cast<std::size_t>(c.rank())] = 1;
    }
  });
  EXPECT_EQ(aborted, (std::vector<int>{1, 1, 0, 1}));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(LocalGroup, SilentRankTimesOutAndNamesTheWaiter) {
  const auto t0 = std::chrono::steady_clock::now();
  int timeouts = 0;
  std::string message;
  on_ranks(
      2,
      [&](LocalCommunicator& c) {
    if (c.rank() == 1) return;  // never joins the collective
    std::vector<float> buf(10, 1.0f);
    try {
      c.allreduce_sum(buf.data(), buf.size());
    } catch (const Aborted& e) {
      ++timeouts;
      message = e.what();
    }
      },
      std::chrono::milliseconds(300));
  EXPECT_EQ(timeouts, 1);
  EXPECT_NE(message.find("rank 0 timed out"), std::string::npos) << message;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

// The hook that carries a group's abort to communicators outside it (NCCL): called once, with the
// first reason, for an explicit abort and for a timeout alike.
TEST(LocalGroup, AbortHookRunsOnceWithTheFirstReason) {
  std::vector<std::string> calls;
  LocalGroup group(2);
  group.set_abort_hook([&](const std::string& reason) { calls.push_back(reason); });
  group.abort("rank 1: first");
  group.abort("rank 0: second");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0], "rank 1: first");
  EXPECT_TRUE(group.aborted());

  std::vector<std::string> timeouts;
  LocalGroup silent(2, std::chrono::milliseconds(200));
  silent.set_abort_hook([&](const std::string& reason) { timeouts.push_back(reason); });
  EXPECT_THROW(silent.barrier(0), Aborted);  // rank 1 never arrives
  ASSERT_EQ(timeouts.size(), 1u);
  EXPECT_NE(timeouts[0].find("rank(s) 1 stopped answering"), std::string::npos) << timeouts[0];
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

TEST(SegmentHelpers, ForEachSegmentSkipsEmptyAndSkippedRanksAndStopsAtTheFirstFailure) {
  const std::vector<std::size_t> counts = {3, 0, 2, 4};
  std::vector<std::vector<std::size_t>> calls;
  const int result = for_each_segment(counts, 2, 0, [&](int r, std::size_t off, std::size_t c) {
    calls.push_back({static_cast<std::size_t>(r), off, c});
    return 0;
  });
  EXPECT_EQ(result, 0);
  EXPECT_EQ(calls, (std::vector<std::vector<std::size_t>>{{0, 0, 3}, {3, 5, 4}}));
  int seen = 0;
  EXPECT_EQ(for_each_segment(
                counts, -1, 0,
                [&](int r, std::size_t, std::size_t) {
    ++seen;
    return r == 2 ? 7 : 0;
                }),
            7);
  EXPECT_EQ(seen, 2);  // ranks 0 and 2: stopped at the failure, rank 1 empty
  EXPECT_TRUE(equal_counts({4, 4, 4}));
  EXPECT_FALSE(equal_counts({4, 4, 5}));
  EXPECT_TRUE(equal_counts({}));
}

TEST(SegmentHelpers, WorldAndRankChecksAndOneLineMessages) {
  EXPECT_NO_THROW(check_world_rank(4, 3));
  EXPECT_THROW(check_world_rank(4, 4), InputError);
  EXPECT_THROW(check_world_rank(4, -1), InputError);
  EXPECT_THROW(check_world_rank(0, 0), InputError);
  EXPECT_EQ(one_line("Duplicate GPU detected\nrank 1  \r\n"), "Duplicate GPU detected rank 1");
  EXPECT_EQ(one_line(""), "");
}

}  // namespace
}  // namespace dpbench
