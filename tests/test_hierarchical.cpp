// Tests of the hierarchical all-reduce (core/hierarchical.hpp) and of --hierarchy node in the
// allreduce mode: exact sums on integer-valued floats for several node layouts, every rank's
// bytes equal to its schedule's (core/schedule.hpp), 2(N-1)/N of the vector across each node's
// link where the flat ring sends 2(p-1)/p from the node's edge rank, training losses equal to the
// flat ring's within float tolerance, and bad layouts refused. The same for sharded_ps's
// hierarchical push (reduce-scatter) and pull (all-gather): exact sums per segment, (N-1)/N of
// the vector across each node's link per phase, losses equal to the flat sharded_ps's.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <functional>
#include <utility>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.hpp"
#include "core/hierarchical.hpp"
#include "core/local_comm.hpp"
#include "core/schedule.hpp"
#include "registry/strategies.hpp"
#include "train/training.hpp"
#include "tests/training_fixtures.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

// Integer-valued input of rank r, element i: sums over ranks are exact in float.
float hier_value(int r, std::size_t i) {
  return static_cast<float>((i * 5 + static_cast<std::size_t>(r) * 17) % 89) - 44.0f;
}

struct NodeLayout {
  int p, k;
};

// hierarchical_allreduce_sum on p threads of one local group, rank r starting from inputs[r];
// each rank's result and byte counts.
struct RanksOut {
  std::vector<std::vector<float>> out;
  std::vector<CommStats> stats;
};
RanksOut allreduce_on_threads(const std::vector<std::vector<float>>& inputs, int k, WireFormat format) {
  const int p = static_cast<int>(inputs.size());
  auto group = std::make_shared<LocalGroup>(p);
  RanksOut got{std::vector<std::vector<float>>(inputs.size()), std::vector<CommStats>(inputs.size())};
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      const auto ur = static_cast<std::size_t>(r);
      LocalCommunicator comm(group, r, nullptr);
      std::vector<float> buf = inputs[ur], scratch;
      hierarchical_allreduce_sum(comm, buf.data(), buf.size(), k, scratch, format);
      got.out[ur] = buf;
      got.stats[ur] = comm.stats();
    });
  }
  for (auto& t : threads) t.join();
  return got;
}
// inputs[r][i] = f(r, i), p ranks of n floats.
template <typename F>
std::vector<std::vector<float>> rank_inputs(int p, std::size_t n, F f) {
  std::vector<std::vector<float>> in(static_cast<std::size_t>(p), std::vector<float>(n));
  for (int r = 0; r < p; ++r) {
    for (std::size_t i = 0; i < n; ++i) in[static_cast<std::size_t>(r)][i] = f(r, i);
  }
  return in;
}

TEST(HierarchicalAllreduce, SumsExactlyAndMovesTheScheduledBytes) {
  for (const NodeLayout layout : {NodeLayout{2, 2}, NodeLayout{4, 2}, NodeLayout{6, 3}, NodeLayout{6, 2},
                                  NodeLayout{8, 2}, NodeLayout{4, 1}, NodeLayout{4, 4}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1001}}) {
      const auto [out, stats] = allreduce_on_threads(rank_inputs(layout.p, n, hier_value), layout.k, WireFormat::fp32);
      StepSchedule s(layout.p);
      Collectives(s, Backend::gloo).hierarchical_allreduce(n, layout.k);
      s.check_matched();
      for (int r = 0; r < layout.p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        for (std::size_t i = 0; i < n; ++i) {
          float sum = 0;
          for (int q = 0; q < layout.p; ++q) sum += hier_value(q, i);
          ASSERT_EQ(out[ur][i], sum) << "p=" << layout.p << " k=" << layout.k << " n=" << n << " rank " << r
                                     << " i=" << i;
        }
        EXPECT_EQ(static_cast<double>(stats[ur].bytes_sent), s.bytes_sent(r))
            << "p=" << layout.p << " k=" << layout.k << " n=" << n;
        EXPECT_EQ(static_cast<double>(stats[ur].bytes_received), s.bytes_received(r))
            << "p=" << layout.p << " k=" << layout.k;
      }
    }
  }
}

// Each node's link carries 2(N-1)/N of the vector each way (N nodes); the flat ring over the same
// ranks puts 2(p-1)/p of it on the node's edge rank. And the messages that cross it.
TEST(HierarchicalAllreduce, EachNodeLinkCarriesTwoNMinusOneOverNOfTheVector) {
  const std::size_t n = 1200;
  const double bytes = 4.0 * n;
  for (const NodeLayout layout : {NodeLayout{4, 2}, NodeLayout{8, 2}, NodeLayout{6, 3}}) {
    const int nodes = layout.p / layout.k;
    std::vector<int> node_of;
    for (int r = 0; r < layout.p; ++r) node_of.push_back(r / layout.k);
    StepSchedule hier(layout.p), flat(layout.p);
    Collectives(hier, Backend::gloo).hierarchical_allreduce(n, layout.k);
    Collectives(flat, Backend::gloo).allreduce(n);
    for (const auto& [out, in] : hier.node_link_bytes(node_of, nodes)) {
      EXPECT_DOUBLE_EQ(out, 2.0 * (nodes - 1) / nodes * bytes) << "p=" << layout.p << " k=" << layout.k;
      EXPECT_DOUBLE_EQ(in, 2.0 * (nodes - 1) / nodes * bytes);
    }
    for (const auto& [out, in] : flat.node_link_bytes(node_of, nodes)) {
      EXPECT_DOUBLE_EQ(out, 2.0 * (layout.p - 1) / layout.p * bytes) << "p=" << layout.p << " k=" << layout.k;
    }
    // Messages across the link: the nodes' rings run K of them (one per local rank), each
    // 2(N-1) steps; the flat ring's edge rank sends 2(p-1), its neighbour on the next node gets them.
    for (const auto& [out, in] : hier.node_link_messages(node_of, nodes)) {
      EXPECT_DOUBLE_EQ(out, 2.0 * (nodes - 1) * layout.k) << "p=" << layout.p << " k=" << layout.k;
      EXPECT_DOUBLE_EQ(in, 2.0 * (nodes - 1) * layout.k);
    }
    for (const auto& [out, in] : flat.node_link_messages(node_of, nodes)) {
      EXPECT_DOUBLE_EQ(out, 2.0 * (layout.p - 1)) << "p=" << layout.p << " k=" << layout.k;
      EXPECT_DOUBLE_EQ(in, 2.0 * (layout.p - 1));
    }
  }
}

// fp16 and bf16 on the wire: integer-valued inputs small enough that every partial sum is exact
// in both sum exactly, in half the bytes (each rank's counted bytes its schedule's); a value
// neither format holds comes back rounded to it (relative error at most 2^-11 and 2^-8).
TEST(CompressedAllreduce, SumsInSixteenBitsOverHalfTheBytes) {
  for (const WireFormat format : {WireFormat::fp16, WireFormat::bf16}) {
    for (const NodeLayout layout : {NodeLayout{2, 2}, NodeLayout{4, 2}, NodeLayout{4, 4}, NodeLayout{6, 3}}) {
      const std::size_t n = 1001;
      const auto small = [](int r, std::size_t i) {
        return static_cast<float>((i * 5 + static_cast<std::size_t>(r) * 3) % 33) - 16.0f;
      };
      const auto [out, stats] = allreduce_on_threads(rank_inputs(layout.p, n, small), layout.k, format);
      StepSchedule s(layout.p), plain(layout.p);
      Collectives c(s, Backend::gloo);
      c.set_node_hierarchy(layout.k);
      c.set_wire_format(format);
      c.allreduce(n);
      Collectives(plain, Backend::gloo).hierarchical_allreduce(n, layout.k);
      for (int r = 0; r < layout.p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        for (std::size_t i = 0; i < n; ++i) {
          float sum = 0;
          for (int q = 0; q < layout.p; ++q) sum += small(q, i);
          ASSERT_EQ(out[ur][i], sum) << "p=" << layout.p << " k=" << layout.k << " rank " << r << " i=" << i;
        }
        EXPECT_EQ(static_cast<double>(stats[ur].bytes_sent), s.bytes_sent(r));
        EXPECT_NEAR(s.bytes_sent(r), 0.5 * plain.bytes_sent(r), 8.0 * layout.p)
            << "p=" << layout.p << " k=" << layout.k;
      }
    }
  }
  for (const auto& [format, bound] : {std::pair{WireFormat::fp16, 0x1p-11}, std::pair{WireFormat::bf16, 0x1p-8}}) {
    const RanksOut r = allreduce_on_threads({{1.0f / 3.0f, 0.0f}, {0.0f, 0.0f}}, 2, format);
    const std::vector<float> got = {r.out[0][0], r.out[1][0]};
    EXPECT_NE(got[0], 1.0f / 3.0f);
    EXPECT_LE(std::abs(got[0] - 1.0f / 3.0f), bound / 3.0);
    EXPECT_EQ(got[0], got[1]);
  }
}

// The CPU's own F16C conversions, the reference the fp16 tests hold dpbench's to.
#if defined(__x86_64__)
__attribute__((target("f16c"))) std::uint16_t f16c_bits(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) float f16c_value(std::uint16_t h) { return _cvtsh_ss(h); }
#else
std::uint16_t f16c_bits(float) { return 0; }
float f16c_value(std::uint16_t) { return 0; }
#endif

#define SKIP_WITHOUT_F16C() \
  if (!cpu_has_f16c()) GTEST_SKIP() << "this CPU has no F16C instructions to check the fp16 conversions against"

// The software conversions (CPUs without F16C, and the tails of the F16C loops) against F16C:
// every one of the 65,536 halves widened, and 2^20 floats across fp16's range (subnormals,
// ties, overflow, NaN, infinities) rounded, bit for bit.
TEST(CompressedAllreduce, SoftwareFp16IsTheCpusBitForBit) {
  SKIP_WITHOUT_F16C();
  std::size_t wrong = 0;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float a = fp16_value(static_cast<std::uint16_t>(h)), b = f16c_value(static_cast<std::uint16_t>(h));
    wrong += (std::isnan(b) ? !std::isnan(a) : std::memcmp(&a, &b, sizeof a) != 0) ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0u) << "halves widened differently";
  std::uint32_t x = 7;
  std::vector<float> probes = {0.0f,
                               -0.0f,
                               65504.0f,
                               65519.99f,
                               65520.0f,
                               1e9f,
                               0x1p-24f,
                               0x1p-25f,
                               0x1.8p-25f,
                               0x1p-26f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               1.0f + 0x1p-11f,
                               1.0f + 0x1.8p-11f};
  for (int i = 0; i < (1 << 20); ++i) {
    x = x * 1664525u + 1013904223u;
    float f = 0;
    std::memcpy(&f, &x, sizeof f);
    if (std::abs(f) > 0x1p-30f && std::abs(f) < 0x1p17f) probes.push_back(f);
    probes.push_back(std::ldexp(static_cast<float>(x >> 8) / 16777216.0f - 0.5f, static_cast<int>(x % 48) - 30));
  }
  wrong = 0;
  for (const float f : probes) {
    const std::uint16_t a = fp16_bits(f), b = f16c_bits(f);
    const bool both_nan = (a & 0x7C00) == 0x7C00 && (a & 0x3FF) != 0 && (b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0;
    wrong += (a != b && !both_nan) ? 1 : 0;
  }
  EXPECT_EQ(wrong, 0u) << "floats rounded differently, of " << probes.size();
}

// fp16 on two ranks, values across fp16's range (subnormals, ties, beyond 65504): each element is
// fp16(fp16(a) + fp16(b)), as the CPU's F16C instructions round it.
TEST(CompressedAllreduce, Fp16RoundsAsIeeeHalfDoes) {
  SKIP_WITHOUT_F16C();
  const std::size_t n = 4099;
  std::vector<std::vector<float>> in(2, std::vector<float>(n));
  std::uint32_t x = 12345;
  for (auto& v : in) {
    for (std::size_t i = 0; i < n; ++i) {
      x = x * 1664525u + 1013904223u;
      const float mant = static_cast<float>(x >> 8) / 16777216.0f - 0.5f;
      v[i] = std::ldexp(mant, static_cast<int>(x % 48) - 30);  // 2^-31 .. 2^17
    }
  }
  const std::vector<std::vector<float>> out = allreduce_on_threads(in, 2, WireFormat::fp16).out;
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const auto h = [](float f) { return f16c_value(f16c_bits(f)); };
    const float want = h(h(in[0][i]) + h(in[1][i]));
    for (int r = 0; r < 2; ++r) {
      const float got = out[static_cast<std::size_t>(r)][i];
      wrong += (std::isnan(want) ? !std::isnan(got) : got != want) ? 1 : 0;
    }
  }
  EXPECT_EQ(wrong, 0u);
}

// hierarchical_reduce_scatterv_sum then hierarchical_allgatherv on p threads: the first's
// segment of each rank (after the reduce-scatter) and the whole buffer after the all-gather.
struct ScatterGatherOut {
  std::vector<std::vector<float>> segment, gathered;
  std::vector<CommStats> scatter_stats, gather_stats;
};
ScatterGatherOut scatter_gather_on_threads(const std::vector<std::vector<float>>& inputs,
                                           const std::vector<std::size_t>& counts, int k) {
  const int p = static_cast<int>(inputs.size());
  const std::vector<int> order = hierarchical_segment_order(p, k);
  auto group = std::make_shared<LocalGroup>(p);
  const auto up = static_cast<std::size_t>(p);
  ScatterGatherOut got{std::vector<std::vector<float>>(up), std::vector<std::vector<float>>(up),
                       std::vector<CommStats>(up), std::vector<CommStats>(up)};
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      const auto ur = static_cast<std::size_t>(r);
      LocalCommunicator comm(group, r, nullptr);
      std::vector<float> buf = inputs[ur], scratch;
      hierarchical_reduce_scatterv_sum(comm, buf.data(), counts, k, scratch);
      std::size_t at = 0;
      for (std::size_t q = 0; order[q] != r; ++q) at += counts[static_cast<std::size_t>(order[q])];
      got.segment[ur].assign(buf.begin() + static_cast<std::ptrdiff_t>(at),
                             buf.begin() + static_cast<std::ptrdiff_t>(at + counts[ur]));
      got.scatter_stats[ur] = comm.stats();
      comm.reset_stats();
      // Every rank's segment now holds rank r's own values, the rest zeros: the gather fills it.
      std::vector<float> mine(buf.size(), 0.0f);
      std::copy(inputs[ur].begin() + static_cast<std::ptrdiff_t>(at),
                inputs[ur].begin() + static_cast<std::ptrdiff_t>(at + counts[ur]),
                mine.begin() + static_cast<std::ptrdiff_t>(at));
      hierarchical_allgatherv(comm, mine.data(), counts, k);
      got.gathered[ur] = mine;
      got.gather_stats[ur] = comm.stats();
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

// sharded_ps --hierarchy node's push and pull: every rank's segment holds the exact sum of that
// segment (integer-valued floats), the all-gather gives every rank every rank's segment, zero
// counts included; each rank's bytes equal its schedule's for both.
TEST(HierarchicalReduceScatter, SumsEachRanksSegmentAndGathersThemBack) {
  for (const NodeLayout layout :
       {NodeLayout{4, 2}, NodeLayout{6, 3}, NodeLayout{6, 2}, NodeLayout{8, 2}, NodeLayout{4, 1}, NodeLayout{4, 4}}) {
    for (const std::size_t unit : {std::size_t{0}, std::size_t{1}, std::size_t{37}}) {
      std::vector<std::size_t> counts;
      for (int r = 0; r < layout.p; ++r) counts.push_back(unit * static_cast<std::size_t>(r % 3) + (r == 1 ? 2 : 0));
      std::size_t n = 0;
      for (std::size_t c : counts) n += c;
      const auto inputs = rank_inputs(layout.p, n, hier_value);
      const ScatterGatherOut got = scatter_gather_on_threads(inputs, counts, layout.k);
      const std::vector<int> order = hierarchical_segment_order(layout.p, layout.k);
      StepSchedule scatter(layout.p), gather(layout.p);
      Collectives rs(scatter, Backend::gloo), ag(gather, Backend::gloo);
      rs.set_node_hierarchy(layout.k);
      ag.set_node_hierarchy(layout.k);
      rs.reduce_scatterv(counts);
      ag.allgatherv(counts);
      scatter.check_matched();
      gather.check_matched();
      std::vector<float> owners(n);  // the input of the rank that owns each element
      std::size_t at = 0;
      for (int q = 0; q < layout.p; ++q) {
        const auto owner = static_cast<std::size_t>(order[static_cast<std::size_t>(q)]);
        for (std::size_t i = 0; i < counts[owner]; ++i, ++at) {
          float sum = 0;
          for (int r = 0; r < layout.p; ++r) sum += hier_value(r, at);
          ASSERT_EQ(got.segment[owner][i], sum)
              << "p=" << layout.p << " k=" << layout.k << " rank " << owner << " i=" << i;
          owners[at] = inputs[owner][at];
        }
      }
      for (int r = 0; r < layout.p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        EXPECT_EQ(got.gathered[ur], owners) << "p=" << layout.p << " k=" << layout.k << " rank " << r;
        EXPECT_EQ(static_cast<double>(got.scatter_stats[ur].bytes_sent), scatter.bytes_sent(r))
            << "p=" << layout.p << " k=" << layout.k;
        EXPECT_EQ(static_cast<double>(got.scatter_stats[ur].bytes_received), scatter.bytes_received(r))
            << "p=" << layout.p;
        EXPECT_EQ(static_cast<double>(got.gather_stats[ur].bytes_sent), gather.bytes_sent(r))
            << "p=" << layout.p << " k=" << layout.k;
        EXPECT_EQ(static_cast<double>(got.gather_stats[ur].bytes_received), gather.bytes_received(r))
            << "p=" << layout.p;
      }
    }
  }
  EXPECT_EQ(hierarchical_segment_order(6, 2), (std::vector<int>{0, 2, 4, 1, 3, 5}));
  EXPECT_THROW(hierarchical_segment_order(6, 4), InputError);
}

// ps --hierarchy node's reduce to rank 0 and broadcast from it: rank 0 gets the exact sum, every
// rank rank 0's vector, each rank's bytes its schedule's; per reduce + broadcast each node link
// but rank 0's carries (2N-1)/N n floats each way, rank 0's 3(N-1)/N n, less in all than the flat
// gloo reduce and broadcast put on the links.
TEST(HierarchicalReduce, SumsOnRankZeroAndBroadcastsFromIt) {
  for (const NodeLayout layout :
       {NodeLayout{4, 2}, NodeLayout{6, 3}, NodeLayout{6, 2}, NodeLayout{8, 2}, NodeLayout{4, 1}, NodeLayout{4, 4}}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
      const int p = layout.p;
      const auto inputs = rank_inputs(p, n, hier_value);
      auto group = std::make_shared<LocalGroup>(p);
      std::vector<std::vector<float>> reduced(static_cast<std::size_t>(p)), broadcast(static_cast<std::size_t>(p));
      std::vector<CommStats> stats(static_cast<std::size_t>(p));
      std::vector<std::thread> threads;
      for (int r = 0; r < p; ++r) {
        threads.emplace_back([&, r] {
          const auto ur = static_cast<std::size_t>(r);
          LocalCommunicator comm(group, r, nullptr);
          std::vector<float> buf = inputs[ur], scratch;
          hierarchical_reduce_sum(comm, buf.data(), n, layout.k, scratch);
          reduced[ur] = buf;
          std::vector<float> b = r == 0 ? inputs[1 % p] : std::vector<float>(n, 0.0f);
          hierarchical_broadcast(comm, b.data(), n, layout.k);
          broadcast[ur] = b;
          stats[ur] = comm.stats();
        });
      }
      for (auto& t : threads) t.join();
      StepSchedule s(p);
      Collectives c(s, Backend::gloo);
      c.set_node_hierarchy(layout.k);
      c.reduce(n, 0);
      c.broadcast(n, 0);
      s.check_matched();
      for (std::size_t i = 0; i < n; ++i) {
        float sum = 0;
        for (int q = 0; q < p; ++q) sum += hier_value(q, i);
        ASSERT_EQ(reduced[0][i], sum) << "p=" << p << " k=" << layout.k << " n=" << n << " i=" << i;
      }
      for (int r = 0; r < p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        EXPECT_EQ(broadcast[ur], inputs[1 % p]) << "p=" << p << " k=" << layout.k << " rank " << r;
        EXPECT_EQ(static_cast<double>(stats[ur].bytes_sent), s.bytes_sent(r))
            << "p=" << p << " k=" << layout.k << " n=" << n;
        EXPECT_EQ(static_cast<double>(stats[ur].bytes_received), s.bytes_received(r)) << "p=" << p << " k=" << layout.k;
      }
      if (n != 1001 || layout.k == 1 || layout.k == p) continue;
      const int nodes = p / layout.k;
      std::vector<int> node_of;
      for (int r = 0; r < p; ++r) node_of.push_back(r / layout.k);
      StepSchedule flat(p);
      Collectives f(flat, Backend::gloo);
      f.reduce(n, 0);
      f.broadcast(n, 0);
      const auto hier_links = s.node_link_bytes(node_of, nodes), flat_links = flat.node_link_bytes(node_of, nodes);
      for (int node = 0; node < nodes; ++node) {
        // Rank 0's node: the rings' (N-1)/N n each way twice, and the other nodes' segments in
        // and out; every other node: the rings', and its own segments (n/N) out and in.
        const double floats = node == 0 ? 3.0 * (nodes - 1) / nodes * n : (2.0 * nodes - 1) / nodes * n;
        const auto& [out, in] = hier_links[static_cast<std::size_t>(node)];
        EXPECT_NEAR(out, 4.0 * floats, 4.0 * p) << "p=" << p << " k=" << layout.k << " node " << node;
        EXPECT_NEAR(in, 4.0 * floats, 4.0 * p) << "p=" << p << " k=" << layout.k << " node " << node;
      }
      double hier_total = 0, flat_total = 0;
      for (std::size_t node = 0; node < hier_links.size(); ++node) {
        hier_total += hier_links[node].first + hier_links[node].second;
        flat_total += flat_links[node].first + flat_links[node].second;
      }
      EXPECT_LT(hier_total, flat_total) << "p=" << p << " k=" << layout.k;
    }
  }
}

// The push and the pull each put (N-1)/N of the vector on every node's link, each way; the flat
// ring (gloo's reduce per segment for the push) puts more on it.
TEST(HierarchicalReduceScatter, EachNodeLinkCarriesNMinusOneOverNOfTheVectorEachWay) {
  const std::size_t n = 1200;
  for (const NodeLayout layout : {NodeLayout{4, 2}, NodeLayout{8, 2}, NodeLayout{6, 3}}) {
    const int nodes = layout.p / layout.k;
    std::vector<int> node_of;
    for (int r = 0; r < layout.p; ++r) node_of.push_back(r / layout.k);
    const std::vector<std::size_t> counts = even_counts(n, layout.p);
    StepSchedule hier(layout.p), flat(layout.p);
    Collectives h(hier, Backend::local), f(flat, Backend::local);
    h.set_node_hierarchy(layout.k);
    h.reduce_scatterv(counts);
    h.allgatherv(counts);
    f.reduce_scatterv(counts);
    f.allgatherv(counts);
    const auto flat_bytes = flat.node_link_bytes(node_of, nodes);
    for (const auto& [out, in] : hier.node_link_bytes(node_of, nodes)) {
      EXPECT_DOUBLE_EQ(out, 2.0 * (nodes - 1) / nodes * 4.0 * n) << "p=" << layout.p << " k=" << layout.k;
      EXPECT_DOUBLE_EQ(in, 2.0 * (nodes - 1) / nodes * 4.0 * n);
      EXPECT_LT(out, flat_bytes.front().first);
    }
  }
}

TEST(HierarchicalAllreduce, RingsFollowTheNodeLayout) {
  EXPECT_EQ(node_ring(6, 3, 4), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(cross_node_ring(6, 3, 4), (std::vector<int>{1, 4}));
  EXPECT_EQ(cross_node_ring(8, 2, 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_THROW(node_ring(6, 4, 0), InputError);
  EXPECT_THROW(cross_node_ring(4, 0, 0), InputError);
}

TrainConfig hier_config(int p, int k) {
  TrainConfig c;
  c.mode = Mode::allreduce;
  c.world_size = p;
  c.process.ranks_on_this_node = k;
  c.global_batch = 96;
  c.run.max_steps = 6;
  c.run.warmup_steps = 1;
  c.evaluate = false;
  c.allreduce.bucket_cap_mb = 0.5;  // several buckets
  c.keep_final_params = true;
  return c;
}

// Training under --hierarchy node: the per-step losses and the final parameters of the flat ring
// within float tolerance (the sums run in another order). Its counted bytes against its schedule:
// StepSchedule.EveryStrategyMovesTheBytesItsRunCounts.
// The in-run simulation's calibration: under --hierarchy node every step's collectives are timed
// (StepRecord::collectives), each inside the step, and together they move the whole gradient
// (allreduce: the all-reduces; ps: the broadcasts and the reduces on every rank; sharded_ps: the
// ranks' own segments of the reduce-scatters and the all-gathers summed over the ranks); the flat
// run times none.
void expect_hierarchy_timed(const RunResult& flat, const RunResult& hier) {
  std::map<CollectiveKind, std::size_t> over_ranks;
  for (std::size_t i = 0; i < hier.ranks.size(); ++i) {
    for (const StepRecord& st : flat.ranks[i].steps) EXPECT_TRUE(st.collectives.empty());
    const StepRecord& st = hier.ranks[i].steps.back();
    ASSERT_FALSE(st.collectives.empty()) << "rank " << i;
    std::map<CollectiveKind, std::size_t> floats;
    for (const CollectiveTiming& t : st.collectives) {
      EXPECT_LE(t.enter_s, t.exit_s);
      EXPECT_LE(t.exit_s - t.enter_s, st.step_time);
      floats[t.kind] += t.floats;
      over_ranks[t.kind] += t.floats;
    }
    const Mode mode = hier.config.mode;
    const std::size_t n = hier.num_params;
    if (mode == Mode::allreduce)
      EXPECT_EQ(floats, (std::map<CollectiveKind, std::size_t>{{CollectiveKind::allreduce, n}}));
    if (mode == Mode::ps) {
      EXPECT_EQ(floats,
                (std::map<CollectiveKind, std::size_t>{{CollectiveKind::broadcast, n}, {CollectiveKind::reduce, n}}));
      EXPECT_EQ(st.collectives.front().kind, CollectiveKind::broadcast);  // replicate() before forward
    }
  }
  if (hier.config.mode == Mode::sharded_ps) {
    const std::size_t n = hier.num_params;
    EXPECT_EQ(over_ranks, (std::map<CollectiveKind, std::size_t>{{CollectiveKind::reduce_scatter, n},
                                                                 {CollectiveKind::allgather, n}}));
  }
}

// Trains `flat` and the same config under --hierarchy node: six steps each, the per-step losses
// within 1e-5 relative, the final parameters within 1e-5 relative L2 and not equal (the
// hierarchy ran: its sums take another order).
void expect_hierarchy_trains_as_flat(const TrainConfig& flat, const Dataset& data) {
  TrainConfig hier = flat;
  hier.hierarchy = Hierarchy::node;
  const RunResult a = testing::train_mode(flat, data);
  const RunResult b = testing::train_mode(hier, data);
  ASSERT_EQ(a.step_train_loss.size(), 6u);
  ASSERT_EQ(a.step_train_loss.size(), b.step_train_loss.size());
  for (std::size_t i = 0; i < a.step_train_loss.size(); ++i) {
    EXPECT_NEAR(b.step_train_loss[i], a.step_train_loss[i], 1e-5 * std::abs(a.step_train_loss[i])) << "step " << i;
  }
  ASSERT_EQ(a.final_params.size(), b.final_params.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.final_params.size(); ++i) {
    diff += std::pow(a.final_params[i] - b.final_params[i], 2);
    norm += std::pow(a.final_params[i], 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  EXPECT_GT(std::sqrt(diff / norm), 0.0);
  EXPECT_EQ(b.ranks.size(), static_cast<std::size_t>(flat.world_size));
  expect_hierarchy_timed(a, b);
}

TEST(HierarchicalAllreduce, TrainsAsTheFlatRingDoes) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 2048, 3);
  expect_hierarchy_trains_as_flat(hier_config(4, 2), *data);
}

// --comm-hook powersgd:4: a compressed step's all-reduces are timed for the in-run simulation (the
// hook's P and Q and uncompressed tensors, far fewer floats than the gradient's); a step before
// --start-powersgd-iter, whose buckets go through DDP's own all-reduce, times none.
TEST(CompressedAllreduce, PowerSgdStepsTimeTheHooksAllReduces) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 2048, 3);
  TrainConfig c = hier_config(2, 1);
  c.allreduce.comm_hook = parse_comm_hook("powersgd:4");
  c.allreduce.start_powersgd_iter = 4;
  const RunResult r = testing::train_mode(c, *data);
  for (const RankResult& rank : r.ranks) {
    ASSERT_EQ(rank.steps.size(), 5u);
    EXPECT_TRUE(rank.steps.front().collectives.empty());
    const std::vector<CollectiveTiming>& t = rank.steps.back().collectives;
    ASSERT_GE(t.size(), 2u);
    std::size_t floats = 0;
    for (const CollectiveTiming& x : t) {
      EXPECT_EQ(x.kind, CollectiveKind::allreduce);
      EXPECT_GT(x.floats, 0u);
      floats += x.floats;
    }
    EXPECT_LT(floats, r.num_params / 4);
  }
}

// sharded_ps and ps --hierarchy node: the flat mode's per-step losses and final parameters within
// float tolerance (sums in another order; sharded_ps's ranges laid out differently). Counted
// bytes against the schedule: StepSchedule.EveryStrategyMovesTheBytesItsRunCounts.
TEST(HierarchicalParameterServers, TrainAsTheFlatModesDo) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 2048, 3);
  for (const NodeLayout layout : {NodeLayout{4, 2}, NodeLayout{6, 3}}) {
    for (const char* mode : {"sharded_ps", "ps"}) {
      SCOPED_TRACE(fmt::format("{} p={} k={}", mode, layout.p, layout.k));
      TrainConfig flat = hier_config(layout.p, layout.k);
      flat.mode = parse_mode(mode);
      flat.ps.coalesce_mb = 0.5;  // ps: several groups
      expect_hierarchy_trains_as_flat(flat, *data);
    }
  }
}

// --comm-hook fp16 and bf16: the per-step losses within 1e-3 of the uncompressed hook's
// (gradients rounded to 16 bits), and not equal to them.
TEST(CompressedAllreduce, TrainsWithinABandOfTheUncompressedHook) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 2048, 3);
  TrainConfig plain = hier_config(4, 0);
  const RunResult a = testing::train_mode(plain, *data);
  for (const char* hook : {"fp16", "bf16"}) {
    TrainConfig c = plain;
    c.allreduce.comm_hook = parse_comm_hook(hook);
    const RunResult b = testing::train_mode(c, *data);
    ASSERT_EQ(a.step_train_loss.size(), b.step_train_loss.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.step_train_loss.size(); ++i) {
      worst = std::max(worst, std::abs(b.step_train_loss[i] - a.step_train_loss[i]) / std::abs(a.step_train_loss[i]));
    }
    EXPECT_LT(worst, 1e-3) << hook;
    EXPECT_NE(a.final_params, b.final_params) << hook;
  }
}

TEST(HierarchicalAllreduce, BadLayoutsAndModesAreInputErrors) {
  const auto data = make_synthetic_dataset(SampleShape{1, 8, 8}, 10, 256, 3);
  TrainConfig c = hier_config(4, 3);
  c.hierarchy = Hierarchy::node;
  EXPECT_THROW(testing::train_mode(c, *data), InputError);  // 4 ranks in nodes of 3
  c = hier_config(4, 2);
  EXPECT_THROW(parse_hierarchy("rack"), InputError);
  c.hierarchy = Hierarchy::node;
  c.mode = Mode::ps;
  c.transport = Transport::p2p;
  EXPECT_THROW(testing::train_mode(c, *data), InputError);  // no node reduction in p2p
  c.mode = Mode::sharded_ps;
  EXPECT_THROW(testing::train_mode(c, *data), InputError);
  c.transport = Transport::collective;
  c.sharded_ps.servers = 2;
  EXPECT_THROW(testing::train_mode(c, *data), InputError);  // every rank serves a range
  c.sharded_ps.servers = 0;
  c.process.ranks_on_this_node = 3;
  EXPECT_THROW(testing::train_mode(c, *data), InputError);
  c = hier_config(4, 2);
  EXPECT_THROW(parse_comm_hook("int8"), InputError);
  c.allreduce.comm_hook = parse_comm_hook("fp16");
  c.mode = Mode::sharded_ps;
  EXPECT_THROW(validate_point(c, *data), InputError);  // a hook is allreduce's (the registry's check)
}

}  // namespace
}  // namespace dpbench
