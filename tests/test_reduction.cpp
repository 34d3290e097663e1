// The host's reductions (core/reduction.hpp): the cost by size, its probe, and the schedules'
// "reduce" computes where each engine sums what it receives (core/schedule.hpp Collectives and
// the strategies' p2p pushes), against the elements each rank sums in closed form.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/reduction.hpp"
#include "core/schedule.hpp"
#include "sim/simulate.hpp"
#include "train/engine_probe.hpp"
#include "train/step_schedule.hpp"
#include "train/strategy.hpp"
#include "registry/strategies.hpp"

namespace dpbench {
namespace {

// One byte a second at every size: a reduce compute's seconds are the bytes it sums.
ReductionCost byte_per_second() { return ReductionCost{{{4.0, 1.0}}}; }

// Rank r's "reduce" computes on every stream: their seconds summed, and their count.
std::pair<double, int> reduced(const StepSchedule& s, int r) {
  double seconds = 0;
  int ops = 0;
  for (const auto& stream : s.ranks().at(static_cast<std::size_t>(r)).streams) {
    for (const ScheduleOp& op : stream) {
      if (op.kind != ScheduleOpKind::compute || std::string(op.label()) != "reduce") continue;
      seconds += op.seconds();
      ++ops;
    }
  }
  return {seconds, ops};
}

TEST(Reduction, CostInterpolatesInLogBytesAndHoldsTheEndRatesOutside) {
  const ReductionCost c{{{1e3, 1e9}, {1e5, 2e9}}};
  EXPECT_DOUBLE_EQ(c.seconds(1e3), 1e3 / 1e9);
  EXPECT_DOUBLE_EQ(c.seconds(1e5), 1e5 / 2e9);
  EXPECT_NEAR(c.seconds(1e4), 1e4 / 1.5e9, 1e-18) << "halfway in log(bytes): the mean rate";
  EXPECT_DOUBLE_EQ(c.seconds(10.0), 10.0 / 1e9) << "below the smallest size: its rate";
  EXPECT_DOUBLE_EQ(c.seconds(1e7), 1e7 / 2e9) << "above the largest: its rate";
  EXPECT_EQ(c.seconds(0.0), 0.0);
  EXPECT_EQ(ReductionCost{}.seconds(1e6), 0.0) << "no measured host: the adds cost nothing";
  const ReductionCost back = reduction_cost_from_json(c.to_json(), "test");
  ASSERT_EQ(back.rates.size(), 2u);
  EXPECT_EQ(back.rates[1].bytes, 1e5);
  EXPECT_EQ(back.rates[1].bytes_per_s, 2e9);
}

TEST(Reduction, ARateListThatIsNotOneIsNamed) {
  const auto refused = [](const nlohmann::json& j, const std::string& expected) {
    try {
      reduction_cost_from_json(j, "h.json");
      ADD_FAILURE() << "accepted " << j.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), expected);
    }
  };
  refused(nlohmann::json::object(), "h.json: the reduction's rates are not a list");
  refused(nlohmann::json::parse(R"([{"bytes": 16, "bytes_per_s": -1}])"),
          "h.json: a reduction rate's bytes_per_s is missing or not a positive number");
  refused(nlohmann::json::parse(R"([{"bytes_per_s": 1e9}])"),
          "h.json: a reduction rate's bytes is missing or not a positive number");
  refused(nlohmann::json::parse(R"([{"bytes": 64, "bytes_per_s": 1e9}, {"bytes": 16, "bytes_per_s": 1e9}])"),
          "h.json: the reduction's rates are not in ascending bytes");
}

// The probe times the add at each size asked for: a rate per size, at those sizes, between 10 MB/s
// (no host here is slower) and 10 TB/s (no memory is faster); a size under one float is refused.
TEST(Reduction, TheProbeTimesTheAddAtEachSize) {
  const ReductionCost c = probe_reduction({4096.0, 1024.0 * 1024}, 2);
  ASSERT_EQ(c.rates.size(), 2u);
  EXPECT_EQ(c.rates[0].bytes, 4096.0);
  EXPECT_EQ(c.rates[1].bytes, 1024.0 * 1024);
  for (const ReductionRate& r : c.rates) {
    EXPECT_GT(r.bytes_per_s, 1e7);
    EXPECT_LT(r.bytes_per_s, 1e13);
  }
  EXPECT_THROW(probe_reduction({2.0}, 1), Error);
  EXPECT_THROW(probe_reduction({4096.0}, 0), Error);
}

TEST(Reduction, PooledProbesTakeEachSizesMedian) {
  const ReductionCost a{{{16, 1.0}, {64, 10.0}}}, b{{{16, 3.0}, {64, 30.0}}}, c{{{16, 2.0}, {64, 50.0}}};
  const ReductionCost m = median_reduction({&a, &b, &c});
  ASSERT_EQ(m.rates.size(), 2u);
  EXPECT_EQ(m.rates[0].bytes_per_s, 2.0);
  EXPECT_EQ(m.rates[1].bytes_per_s, 30.0);
  const ReductionCost other{{{16, 5.0}}};
  EXPECT_EQ(median_reduction({&a, &other}).rates.size(), 1u) << "only the sizes every probe has";
  EXPECT_TRUE(median_reduction({}).empty());

  EngineProbe p1, p2;
  p1.reduction = a;
  p2.reduction = b;
  const auto pooled = pool_probes({&p1, &p2});
  ASSERT_TRUE(pooled.has_value());
  EXPECT_EQ(pooled->reduction.rates.at(1).bytes_per_s, 20.0);
}

// Each collective sums, in floats, what its engine's algorithm sums: the ring's reduce-scatter
// n (p-1)/p on every rank; a chain reduce n on every rank but its first; gloo's reduce its ring's
// p-1 chunks; libnbc's binomial reduce n per child; a broadcast and an all-gather nothing; and no
// reduce computes at all without a cost.
TEST(Reduction, CollectivesPayForTheSumsTheirEngineDoes) {
  const int p = 4;
  const std::size_t n = 4000;  // floats: chunks of 1,000
  const auto schedule = [&](Backend engine, const auto& build, bool with_cost = true) {
    StepSchedule s(p);
    if (with_cost) s.set_reduction(byte_per_second());
    Collectives c(s, engine);
    build(c);
    s.check_matched();
    return s;
  };
  const StepSchedule ring = schedule(Backend::local, [&](Collectives& c) { c.allreduce(n); });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(reduced(ring, r), std::make_pair(4.0 * 3 * 1000, 3)) << "ring rank " << r;
  }
  const StepSchedule chain = schedule(Backend::local, [&](Collectives& c) { c.reduce(n, 0); });
  int summing = 0;
  for (int r = 0; r < p; ++r) {
    const double s = reduced(chain, r).first;
    EXPECT_TRUE(s == 0.0 || s == 4.0 * n) << "chain rank " << r << ": " << s;
    summing += s > 0 ? 1 : 0;
  }
  EXPECT_EQ(summing, p - 1) << "every rank of the chain but its first sums the whole vector";
  EXPECT_EQ(reduced(chain, 0).first, 4.0 * n) << "the root ends the chain";
  const StepSchedule gloo = schedule(Backend::gloo, [&](Collectives& c) { c.reduce(n, 0); });
  for (int r = 0; r < p; ++r) EXPECT_EQ(reduced(gloo, r).first, 4.0 * 3 * 1000) << "gloo rank " << r;
  const StepSchedule nbc = schedule(Backend::mpi, [&](Collectives& c) { c.reduce_scatterv(even_counts(n, p)); });
  // Binomial over 4: rank 0 receives from 1 and 2, rank 2 from 3, ranks 1 and 3 from none.
  EXPECT_EQ(reduced(nbc, 0).first, 2 * 4.0 * n);
  EXPECT_EQ(reduced(nbc, 1).first, 0.0);
  EXPECT_EQ(reduced(nbc, 2).first, 4.0 * n);
  EXPECT_EQ(reduced(nbc, 3).first, 0.0);
  const StepSchedule moves = schedule(Backend::local, [&](Collectives& c) {
    c.broadcast(n, 0);
    c.allgatherv(even_counts(n, p));
  });
  const StepSchedule free = schedule(
      Backend::local, [&](Collectives& c) { c.allreduce(n); }, false);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(reduced(moves, r).second, 0) << "broadcast and all-gather move, they do not sum";
    EXPECT_EQ(reduced(free, r).second, 0) << "no cost, no reduce computes";
  }
  // The node hierarchy: 2 nodes of 2; the node's ring sums half of n, the nodes' ring half of that.
  const StepSchedule nodes = schedule(Backend::local, [&](Collectives& c) {
    c.set_node_hierarchy(2);
    c.allreduce(n);
  });
  for (int r = 0; r < p; ++r) EXPECT_EQ(reduced(nodes, r).first, 4.0 * (1000 + 2000)) << "hierarchy rank " << r;
}

// The strategies' p2p pushes: ps's root sums each worker's gradient; each sharded_ps server each
// other worker's shard. The schedule's reduction comes from ScheduleInputs.
TEST(Reduction, PointToPointRootsAndServersSumWhatTheyReceive) {
  const int p = 3;
  ScheduleInputs in;
  in.config.world_size = p;
  in.config.global_batch = 6;
  in.config.transport = Transport::p2p;
  in.engine = Backend::local;
  in.num_params = 3000;
  in.input_floats = 4;
  in.classes = 2;
  in.compute.assign(p, RankCompute{});
  in.reduction = byte_per_second();
  in.config.mode = Mode::ps;
  StepSchedule ps(p);
  find_strategy(Mode::ps).schedule(in, ps);
  EXPECT_EQ(reduced(ps, 0).first, 4.0 * 2 * 3000) << "the root sums both workers' gradients";
  EXPECT_EQ(reduced(ps, 1).first, 0.0);
  in.config.mode = Mode::sharded_ps;
  StepSchedule sharded(p);
  find_strategy(Mode::sharded_ps).schedule(in, sharded);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(reduced(sharded, r).first, 4.0 * 2 * 1000) << "server " << r << " sums two workers' shards";
  }
}

// Played, the sums lengthen a 2-rank ring all-reduce by exactly its reduce computes (every rank
// sums one chunk, then sends it on).
TEST(Reduction, TheSimulationPaysForTheSums) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  SimPlatform pf;
  pf.nodes.assign(2, SimNode{1e8, 1e8, 1e-5});
  const std::size_t n = 1'000'000;
  StepSchedule plain(2), summed(2);
  summed.set_reduction(ReductionCost{{{4.0, 1e9}}});
  Collectives(plain, Backend::local).allreduce(n);
  Collectives(summed, Backend::local).allreduce(n);
  const double t0 = simulate(plain, pf, 1).step_s, t1 = simulate(summed, pf, 1).step_s;
  EXPECT_NEAR(t1 - t0, 4.0 * n / 2 / 1e9, 1e-9);
}

}  // namespace
}  // namespace dpbench
