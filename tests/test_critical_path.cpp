// The fast paths of the simulation against SimGrid itself: the critical-path evaluation
// (sim/critical_path.hpp) gives SimGrid's step to the rounding wherever it accepts a schedule,
// and declines the schedules whose transfers share a link; the extrapolation in nodes
// (sim/extrapolate.hpp) extends affine figures exactly and refuses the others; a projected point
// extrapolated from three smaller simulations equals the whole simulation.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "analysis/simulated_projection.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"
#include "core/schedule.hpp"
#include "sim/critical_path.hpp"
#include "sim/extrapolate.hpp"
#include "sim/simulate.hpp"
#include "train/strategy.hpp"

namespace dpbench {
namespace {

#define SKIP_WITHOUT_SIMGRID()                                                               \
  if (!simulation_available()) {                                                             \
    GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable"; \
  }

// 4 nodes of 8 ranks, two per leaf switch (every kind of route: inside a node, across a leaf,
// across the spine), NICs of different rates.
SimPlatform two_leaves() {
  SimPlatform pf;
  pf.nodes = {{12.5e9, 12.5e9, 2e-6}, {6.25e9, 12.5e9, 3e-6}, {12.5e9, 5e9, 2e-6}, {12.5e9, 12.5e9, 1e-6}};
  pf.ranks_per_node = 8;
  pf.intra_bytes_per_s = 150e9;
  pf.intra_latency_s = 1e-6;
  pf.nodes_per_leaf = 2;
  pf.leaf_up_bytes_per_s = 20e9;
  pf.leaf_latency_s = 4e-6;
  return pf;
}

ScheduleInputs inputs(Mode mode, Transport transport, Backend engine, int p) {
  ScheduleInputs in;
  in.config.mode = mode;
  in.config.transport = transport;
  in.config.world_size = p;
  in.config.global_batch = 8 * static_cast<std::size_t>(p);
  in.engine = engine;
  in.num_params = 3'000'001;
  in.buckets = {{2'000'000, 1'000'001, {}, 0.3}, {500'000, 1'500'000, {}, 0.5}, {0, 500'000, {}, 0.2}};
  in.input_floats = 784;
  in.classes = 10;
  in.compute.assign(static_cast<std::size_t>(p), RankCompute{0.0, 0.002, 0.004, 0.001});
  return in;
}

// Every rank's step from the evaluation equals SimGrid's, on the tree above, with and without the
// engine's calibration; the evaluation accepts DDP's flat ring (the local engine's and gloo's) and
// sharded_ps's reduce-scatter, declines the node hierarchy (its 8 rings between nodes cross each
// NIC at once), and takes ps's root where its scatter to the far ranks does not meet its reduce
// chain on node 0's NIC (GPT-2's does: the projection then extrapolates it).
TEST(CriticalPath, EqualsSimGridWhereverNoLinkIsShared) {
  SKIP_WITHOUT_SIMGRID();
  struct Case {
    Mode mode;
    Backend engine;
    Hierarchy hierarchy;
    int accepted;  // 1: must be, 0: must not be, -1: either (compared when it is)
  };
  const std::vector<Case> cases = {{Mode::allreduce, Backend::local, Hierarchy::none, 1},
                                   {Mode::allreduce, Backend::gloo, Hierarchy::none, 1},
                                   {Mode::allreduce, Backend::local, Hierarchy::node, 0},
                                   {Mode::sharded_ps, Backend::local, Hierarchy::none, 1},
                                   {Mode::ps, Backend::local, Hierarchy::none, -1}};
  for (const bool calibrated : {false, true}) {
    for (const Case& c : cases) {
      const int p = 32;
      ScheduleInputs in = inputs(c.mode, Transport::collective, c.engine, p);
      in.config.hierarchy = c.hierarchy;
      in.config.process.ranks_on_this_node = 8;
      StepSchedule s(p);
      find_strategy(c.mode).schedule(in, s);
      SimPlatform pf = two_leaves();
      if (calibrated) {
        pf.engine_efficiency.assign(kCollectiveKinds, 0.6);
        pf.engine_overhead_s.assign(kCollectiveKinds, 20e-6);
      }
      const std::string what = fmt::format("{} {} {} calibrated {}", name(c.mode), name(c.engine), c.hierarchy,
                                           calibrated);
      const auto fast = evaluate_uncontended(s, pf, 2);
      if (c.accepted >= 0) ASSERT_EQ(fast.has_value(), c.accepted == 1) << what;
      if (!fast) continue;
      const SimulationResult slow = simulate(s, pf, 2);
      EXPECT_EQ(fast->messages, slow.messages) << what;
      ASSERT_EQ(fast->rank_step_s.size(), slow.rank_step_s.size()) << what;
      for (std::size_t r = 0; r < slow.rank_step_s.size(); ++r) {
        EXPECT_NEAR(fast->rank_step_s[r] / slow.rank_step_s[r], 1.0, 1e-6) << what << " rank " << r;
      }
      EXPECT_NEAR(fast->simulated_s / slow.simulated_s, 1.0, 1e-6) << what;
    }
  }
}

// Ranks 1 and 2 each send 1 MB to rank 0 over 1 MB/s links of `latency`; rank 0 receives from
// both at once, or (one_at_a_time) waits for the first before it takes the second.
std::pair<StepSchedule, SimPlatform> two_into_one(bool one_at_a_time, double latency) {
  StepSchedule s(3);
  for (int r : {1, 2}) {
    s.send(r, 0, 0, 1e6);
    s.wait_all(r, 0);
    s.recv(0, 0, r, 1e6);
    if (one_at_a_time) s.wait_all(0, 0);
  }
  s.wait_all(0, 0);
  SimPlatform pf;
  pf.nodes.assign(3, SimNode{1e6, 1e6, latency});
  return {std::move(s), std::move(pf)};
}

// Two senders into one receiver at once share its link: the evaluation declines, and
// simulate_fast() gives SimGrid's shared-link answer (1 MB each at half of the receiver's 1 MB/s:
// both end at 2 s, where alone each would take 1 s).
TEST(CriticalPath, DeclinesTransfersThatShareALink) {
  SKIP_WITHOUT_SIMGRID();
  const auto [s, pf] = two_into_one(false, 0.0);
  EXPECT_FALSE(evaluate_uncontended(s, pf, 1).has_value());
  EXPECT_NEAR(simulate_fast(s, pf, 1).step_s, 2.0, 1e-6);
}

// One sender after the other into the same receiver: nothing shared, 1 s each plus the two
// links' latencies.
TEST(CriticalPath, TransfersOneAfterTheOtherTakeTheirLoneCost) {
  const auto [s, pf] = two_into_one(true, 0.25);
  const auto r = evaluate_uncontended(s, pf, 1);
  ASSERT_TRUE(r.has_value());
  EXPECT_DOUBLE_EQ(r->step_s, 2 * (0.5 + 1.0));
  EXPECT_EQ(r->messages, 2);
}

TEST(CriticalPath, ADeadlockIsLeftToSimGridToReport) {
  StepSchedule s(2);
  for (int r = 0; r < 2; ++r) {  // both wait for an event nobody records
    const int e = s.new_event(r);
    s.wait_event(r, 0, e);
  }
  SimPlatform pf;
  pf.nodes.assign(2, SimNode{1e6, 1e6, 0});
  EXPECT_FALSE(evaluate_uncontended(s, pf, 1).has_value());
}

// A model of 2 million parameters (8 MB), 0.2 ms per sample, 1 ms of optimizer.
StepModel small_model() {
  StepModel model;
  model.per_sample_compute_s = 2e-4;
  model.optimizer_s = 1e-3;
  model.param_bytes = 8e6;
  model.sample_bytes = 3136;
  model.logit_bytes = 40;
  return model;
}

// `nodes` nodes of 8 ranks on NVLink (370 GB/s), each with a 400 Gbit/s NIC, on one switch.
SimPlatform nodes_of_8(int nodes) {
  SimPlatform pf;
  pf.nodes.assign(static_cast<std::size_t>(nodes), SimNode{50e9, 50e9, 1.5e-6});
  pf.ranks_per_node = 8;
  pf.intra_bytes_per_s = 370e9;
  pf.intra_latency_s = 1e-6;
  return pf;
}

TEST(NodeExtrapolation, AffineFiguresExtendExactlyFromTheFirstThreeSizes) {
  std::vector<int> asked;
  const auto x = extrapolate_in_nodes(128, [&](int n) {
    asked.push_back(n);
    return std::vector<double>{0.5 + 0.25 * n, 3.0 * n};
  });
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->from_nodes, (std::vector<int>{4, 8, 16}));
  EXPECT_EQ(asked, (std::vector<int>{4, 8, 16}));
  EXPECT_DOUBLE_EQ(x->figures[0], 0.5 + 0.25 * 128);
  EXPECT_DOUBLE_EQ(x->figures[1], 3.0 * 128);
}

// A figure whose slope settles only later: refused at 4-8-16 nodes, taken from 8-16-32 (each size
// simulated once); a quadratic one never settles and is refused outright.
TEST(NodeExtrapolation, FiguresThatDoNotGrowAffinelyAreRefused) {
  std::vector<int> asked;
  const auto settles = extrapolate_in_nodes(256, [&](int n) {
    asked.push_back(n);
    return std::vector<double>{n <= 8 ? 1.0 * n : 8.0 + 2.0 * (n - 8)};
  });
  ASSERT_TRUE(settles.has_value());
  EXPECT_EQ(settles->from_nodes, (std::vector<int>{8, 16, 32}));
  EXPECT_EQ(asked, (std::vector<int>{4, 8, 16, 32}));
  EXPECT_DOUBLE_EQ(settles->figures[0], 8.0 + 2.0 * 248);
  EXPECT_FALSE(extrapolate_in_nodes(1024, [](int n) { return std::vector<double>{1.0 * n * n}; }).has_value());
  EXPECT_FALSE(extrapolate_in_nodes(16, [](int n) { return std::vector<double>{1.0 * n}; }).has_value());
}

// `mode`'s collective point at p ranks on nodes of 8 is extrapolated from `from` ranks and equals
// the whole simulation (what_if plays it whole) within 0.1 %, node 0's NIC share too.
void expect_extrapolated_as_whole(Mode mode, int p, double bucket_cap_mb, const std::vector<int>& from) {
  const StepModel model = small_model();
  const LinkModel link = link_preset("nvlink4");
  const SimPlatform pf = nodes_of_8(p / 8);
  TrainConfig config;
  config.mode = mode;
  config.transport = Transport::collective;
  config.allreduce.bucket_cap_mb = bucket_cap_mb;
  const Strategy& strategy = find_strategy(mode);
  const nlohmann::json x = simulate_point(strategy, config, model, link, pf, p, 8, false);
  ASSERT_TRUE(x.contains("extrapolated_from_ranks")) << x.dump();
  EXPECT_EQ(x["extrapolated_from_ranks"], nlohmann::json(from));
  const nlohmann::json whole = simulate_point(strategy, config, model, link, pf, p, 8, true);
  ASSERT_FALSE(whole.contains("extrapolated_from_ranks")) << whole.dump();
  EXPECT_NEAR(x["simulated_step_s"].get<double>() / whole["simulated_step_s"].get<double>(), 1.0, 1e-3);
  EXPECT_NEAR(x["node0_nic_time_fraction"].get<double>() / whole["node0_nic_time_fraction"].get<double>(), 1.0, 1e-3);
}

// ps over 32 nodes of 8 ranks: extrapolated from 32, 64 and 128 ranks.
TEST(NodeExtrapolation, AProjectedPointEqualsTheWholeSimulation) {
  SKIP_WITHOUT_SIMGRID();
  expect_extrapolated_as_whole(Mode::ps, 256, TrainConfig{}.allreduce.bucket_cap_mb, {32, 64, 128});
}

// Two senders into one receiver share its link: no critical path, so SimGrid plays them, within
// the budget only; past it the error names the count.
TEST(CriticalPath, SimGridPlaysASharedLinkOnlyWithinItsBudget) {
  SKIP_WITHOUT_SIMGRID();
  StepSchedule s(3);
  for (int r : {1, 2}) {
    s.send(r, 0, 0, 1e6);
    s.wait_all(r, 0);
    s.recv(0, 0, r, 1e6);
  }
  s.wait_all(0, 0);
  SimPlatform pf;
  pf.nodes.assign(3, SimNode{1e8, 1e8, 1e-6});
  EXPECT_FALSE(evaluate_uncontended(s, pf).has_value());
  EXPECT_NEAR(simulate_fast(s, pf, 1, 2).step_s, 0.02, 0.002);  // 2 MB through a 100 MB/s link
  try {
    (void)simulate_fast(s, pf, 1, 1);
    ADD_FAILURE() << "2 messages played on a budget of 1";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0.0 million messages over shared links"), std::string::npos) << e.what();
  }
}

// sharded_ps's bucketed reduce-scatter over 128 nodes of 8 ranks (3 rings of 1,023 steps): not
// folded (its buckets cover some servers' shards only), and affine only once its chain of ring
// steps outweighs the rest (from about 16 nodes on), it is extrapolated from 128, 256 and 512
// ranks (node 0's NIC bytes counted at 1,024 ranks from node 0's programs).
TEST(NodeExtrapolation, AShardedPointEqualsTheWholeSimulation) {
  SKIP_WITHOUT_SIMGRID();
  expect_extrapolated_as_whole(Mode::sharded_ps, 1024, 4, {128, 256, 512});
}

// A whole schedule beyond kMaxPlayedMessages is refused before it is built, with its estimate:
// sharded_ps's p2p push at 16,384 ranks holds 2 x 16,384 x 16,383 messages (537 million; the
// estimate from 16 and 32 ranks errs high).
TEST(NodeExtrapolation, AScheduleBeyondTheBudgetIsUnavailableWithItsSize) {
  SKIP_WITHOUT_SIMGRID();
  const StepModel model = small_model();
  const SimPlatform pf = nodes_of_8(2048);
  TrainConfig config;
  config.mode = Mode::sharded_ps;
  config.transport = Transport::p2p;
  const nlohmann::json x = simulate_point(find_strategy(Mode::sharded_ps), config, model, link_preset("nvlink4"), pf,
                                          16384, 8, true);
  ASSERT_TRUE(x.contains("unavailable")) << x.dump();
  const std::string why = x["unavailable"];
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(why, m, std::regex(R"(about (\d+) million messages in the whole schedule of 16384 ranks)")))
      << why;
  EXPECT_GE(std::stod(m[1].str()), 537.0) << why;
  EXPECT_LE(std::stod(m[1].str()), 1.5 * 537.0) << why;
}

// allreduce under --nccl-algo tree (LinkModel::tree_allreduce): the ring folds onto two nodes, the
// tree does not and is played whole (8 nodes of 8 ranks); beyond kMaxTreeRanks it is unavailable,
// saying why, before anything is built.
TEST(NodeExtrapolation, TheTreeIsPlayedWholeAndNotBeyondItsRanks) {
  SKIP_WITHOUT_SIMGRID();
  const StepModel model = small_model();
  TrainConfig config;
  config.mode = Mode::allreduce;
  const Strategy& strategy = find_strategy(Mode::allreduce);
  LinkModel link = link_preset("nvlink4");
  const nlohmann::json ring = simulate_point(strategy, config, model, link, nodes_of_8(8), 64, 8, false);
  EXPECT_TRUE(ring.contains("folded_onto_ranks")) << ring.dump();
  link.tree_allreduce = true;
  const nlohmann::json tree = simulate_point(strategy, config, model, link, nodes_of_8(8), 64, 8, false);
  ASSERT_TRUE(tree.contains("simulated_step_s")) << tree.dump();
  EXPECT_FALSE(tree.contains("folded_onto_ranks")) << tree.dump();
  EXPECT_NE(tree["simulated_step_s"].get<double>(), ring["simulated_step_s"].get<double>());
  const int beyond = 2 * kMaxTreeRanks;
  const nlohmann::json x = simulate_point(strategy, config, model, link, nodes_of_8(beyond / 8), beyond, 8, false);
  ASSERT_TRUE(x.contains("unavailable")) << x.dump();
  EXPECT_NE(x["unavailable"].get<std::string>().find(fmt::format("NCCL's tree at {} ranks", beyond)), std::string::npos)
      << x.dump();
}

}  // namespace
}  // namespace dpbench
