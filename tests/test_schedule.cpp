// The message schedules (core/schedule.hpp) against the byte counts the communicators report, and
// the SimGrid player (sim/) against times the closed forms give exactly: one ring, one incast with
// a slow sender, two ranks of one node. The strategies' step schedules against their measured
// byte counts are in test_training.cpp's neighbourhood (StepSchedule.* below).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <numeric>

#include <fmt/format.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/comm.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/ring.hpp"
#include "core/schedule.hpp"
#include "sim/simulate.hpp"
#include "train/engine_probe.hpp"
#include "workloads/click_logs.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"
#include "train/buckets.hpp"
#include "train/strategy.hpp"
#include "registry/strategies.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using CountsFn = ElementCounts (*)(int rank);

// Every rank's scheduled bytes equal `expected(rank)` in floats, and every message is matched.
void expect_counts(const StepSchedule& s, const std::function<ElementCounts(int)>& expected, const std::string& what) {
  s.check_matched();
  for (int r = 0; r < s.world_size(); ++r) {
    const ElementCounts c = expected(r);
    EXPECT_EQ(s.bytes_sent(r), 4.0 * static_cast<double>(c.sent)) << what << " rank " << r;
    EXPECT_EQ(s.bytes_received(r), 4.0 * static_cast<double>(c.received)) << what << " rank " << r;
  }
}

TEST(Schedule, CollectivesMoveTheBytesTheCommunicatorsCount) {
  for (const Backend engine : {Backend::local, Backend::mpi, Backend::gloo}) {
    for (int p : {2, 3, 4, 5}) {
      for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{300001}}) {
        const std::string what = fmt::format("{} p={} n={}", name(engine), p, n);
        for (int root : {0, p - 1}) {
          StepSchedule reduce(p), bcast(p);
          Collectives(reduce, engine).reduce(n, root);
          Collectives(bcast, engine).broadcast(n, root);
          // Open MPI's chain runs the other way round the ring: the local chain's counts with
          // every rank mirrored (r -> -r mod p).
          auto mirror = [p](int r) { return (p - r) % p; };
          expect_counts(
              reduce,
              [&](int r) {
            if (engine == Backend::gloo) return gloo_reduce_counts(n, p, r, root);
            if (engine == Backend::mpi) return chain_reduce_counts(n, p, mirror(r), mirror(root));
            return chain_reduce_counts(n, p, r, root);
              },
              "reduce " + what);
          expect_counts(
              bcast,
              [&](int r) {
            return engine == Backend::gloo ? binomial_broadcast_counts(n, p, r, root)
                                           : chain_broadcast_counts(n, p, r, root);
              },
              "broadcast " + what);
        }
        StepSchedule all(p);
        Collectives(all, engine).allreduce(n);
        expect_counts(
            all, [&](int r) { return ring_allreduce_counts(n, p, r); }, "allreduce " + what);
        std::vector<std::size_t> counts;
        for (int r = 0; r < p; ++r) counts.push_back(n / static_cast<std::size_t>(r + 1));  // uneven, one maybe 0
        StepSchedule rs(p), ag(p), sc(p), ga(p);
        Collectives(rs, engine).reduce_scatterv(counts);
        Collectives(ag, engine).allgatherv(counts);
        Collectives(sc, engine).scatterv(counts, 0);
        Collectives(ga, engine).gatherv(counts, 0);
        expect_counts(
            rs,
            [&](int r) {
          if (engine == Backend::mpi) {  // libnbc: binomial reduce of everything to rank 0, then a scatter
            const std::size_t all = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
            ElementCounts c;
            for (int mask = 1; mask < p; mask <<= 1) {
              if ((r & mask) != 0) {
                c.sent += all;
                break;
              }
              if (r + mask < p) c.received += all;
            }
            const ElementCounts scatter = root_scatter_counts(counts, r, 0);
            return ElementCounts{c.sent + scatter.sent, c.received + scatter.received};
          }
          if (engine != Backend::gloo) return ring_reduce_scatter_counts(counts, r);
          ElementCounts c;
          for (int k = 0; k < p; ++k) {
            const ElementCounts one = gloo_reduce_counts(counts[static_cast<std::size_t>(k)], p, r, k);
            c.sent += one.sent;
            c.received += one.received;
          }
          return c;
            },
            "reduce_scatterv " + what);
        expect_counts(
            ag, [&](int r) { return ring_allgather_counts(counts, r); }, "allgatherv " + what);
        expect_counts(
            sc, [&](int r) { return root_scatter_counts(counts, r, 0); }, "scatterv " + what);
        expect_counts(
            ga, [&](int r) { return root_gather_counts(counts, r, 0); }, "gatherv " + what);
      }
    }
  }
}

TEST(Schedule, AnUnmatchedSendIsNamed) {
  StepSchedule s(2);
  s.send(0, 0, 1, 100);
  s.wait_all(0, 0);
  try {
    s.check_matched();
    FAIL() << "an unmatched send passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("from rank 0 to rank 1"), std::string::npos) << e.what();
  }
}

// The pairing is by order: the same bytes received in another order are a mismatch too.
TEST(Schedule, MessagesReceivedInAnotherOrderAreUnmatched) {
  StepSchedule s(2);
  s.send(0, 0, 1, 100);
  s.send(0, 0, 1, 200);
  s.wait_all(0, 0);
  s.recv(1, 0, 0, 200);
  s.recv(1, 0, 0, 100);
  s.wait_all(1, 0);
  EXPECT_THROW(s.check_matched(), Error);
  StepSchedule same(2);
  same.send(0, 0, 1, 100);
  same.send(0, 0, 1, 200);
  same.recv(1, 0, 0, 100);
  same.recv(1, 0, 0, 200);
  EXPECT_NO_THROW(same.check_matched());
  EXPECT_EQ(same.messages(), 2);
}

// A compute op keeps its label through the interned number; other ops have none.
TEST(Schedule, ComputeOpsKeepTheirLabels) {
  StepSchedule s(2);
  s.compute(0, 0, 0.5, "forward");
  s.compute(0, 0, 0.25, "backward");
  s.compute(1, 0, 0.5, "forward");
  s.send(0, 0, 1, 8);
  const auto& ops = s.ranks()[0].streams[0];
  EXPECT_STREQ(ops[0].label(), "forward");
  EXPECT_STREQ(ops[1].label(), "backward");
  EXPECT_DOUBLE_EQ(ops[1].seconds(), 0.25);
  EXPECT_EQ(ops[0].label_id, s.ranks()[1].streams[0][0].label_id);
  EXPECT_NE(ops[0].label_id, ops[1].label_id);
  EXPECT_STREQ(ops[2].label(), "");
  EXPECT_EQ(ops[2].peer(), 1);
}

TEST(Schedule, UnknownEngineIsAnInputError) {
  StepSchedule s(2);
  EXPECT_THROW(Collectives(s, Backend::nccl), InputError);
}

// The step schedule of every strategy moves, per rank, the bytes its trainer's communicator
// counts in a real run (thread ranks, the local engine), for both transports, 2 to 4 ranks, and
// allreduce under --hierarchy node and --comm-hook fp16 / bf16 / powersgd.
TEST(StepSchedule, EveryStrategyMovesTheBytesItsRunCounts) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 2048, 3);
  for (const std::string mode :
       {"ps", "sharded_ps", "allreduce", "allreduce --hierarchy node", "allreduce --comm-hook fp16",
        "allreduce --hierarchy node --comm-hook bf16", "allreduce --comm-hook powersgd:4",
        "allreduce --hierarchy node --comm-hook powersgd:1", "sharded_ps --hierarchy node", "ps --hierarchy node"}) {
    for (const std::string transport : {"collective", "p2p"}) {
      if ((mode.starts_with("allreduce") || mode.find("node") != std::string::npos) && transport == "p2p") continue;
      for (int p : {2, 3, 4}) {
        TrainConfig c;
        c.mode = parse_mode(mode.substr(0, mode.find(' ')));
        if (mode.find("fp16") != std::string::npos) c.allreduce.comm_hook = parse_comm_hook("fp16");
        if (mode.find("bf16") != std::string::npos) c.allreduce.comm_hook = parse_comm_hook("bf16");
        if (const auto at = mode.find("powersgd"); at != std::string::npos)
          c.allreduce.comm_hook = parse_comm_hook(mode.substr(at));
        if (mode.find("node") != std::string::npos) {
          c.hierarchy = Hierarchy::node;
          c.process.ranks_on_this_node = p == 3 ? 3 : 2;  // nodes of 2 ranks, or one node of 3
        }
        c.transport = parse_transport(transport);
        c.world_size = p;
        c.global_batch = 96;
        c.run.max_steps = c.allreduce.comm_hook.kind == CommHook::Kind::powersgd ? 4 : 3;
        c.run.warmup_steps = c.allreduce.comm_hook.kind == CommHook::Kind::powersgd ? 2
                                                                                    : 1;  // the timed steps compress
        c.evaluate = false;
        c.allreduce.bucket_cap_mb = 0.5;  // several buckets
        const RunResult run = testing::train_mode(c, *data);
        ScheduleInputs in;
        in.config = c;
        in.engine = Backend::local;
        in.num_params = run.num_params;
        auto model = make_model(c, data->shape(), 10);
        in.buckets = ddp_schedule_buckets(*model, c);
        in.input_floats = run.input_features;
        in.classes = run.num_classes;
        in.compute.assign(static_cast<std::size_t>(p), RankCompute{});
        StepSchedule s(p);
        find_strategy(c.mode).schedule(in, s);
        s.check_matched();
        // The engine probe runs exactly the collectives the schedule uses.
        std::vector<bool> probed(kCollectiveKinds, false);
        for (CollectiveKind k : find_strategy(c.mode).probed_collectives(c)) probed[static_cast<std::size_t>(k)] = true;
        std::vector<bool> used = s.collectives_used();
        used[static_cast<std::size_t>(CollectiveKind::p2p)] = false;
        EXPECT_EQ(used, probed) << mode << " " << transport;
        for (int r = 0; r < p; ++r) {
          const auto& counted = run.ranks[static_cast<std::size_t>(r)].comm_per_step;
          EXPECT_EQ(s.bytes_sent(r), static_cast<double>(counted.bytes_sent))
              << mode << " " << transport << " p=" << p << " rank " << r;
          EXPECT_EQ(s.bytes_received(r), static_cast<double>(counted.bytes_received))
              << mode << " " << transport << " p=" << p << " rank " << r;
        }
      }
    }
  }
}

// --sparse-grad's schedules size the rows a step exchanges from the measured bytes: a dlrm run on
// three thread ranks, its ranks' mean bytes sent per step handed to the schedule, gives that
// mean back (sharded_ps exactly; allreduce and ps to a row's bytes, their rows rounded to whole
// floats), every message matched, and the engine probe runs the kinds the schedule uses (p2p
// included).
TEST(StepSchedule, SparseStepsSendTheMeasuredBytes) {
  DlrmShape shape = testing::small_dlrm_shape(3, 400);
  shape.sparse_grad = true;
  const auto logs = make_click_logs(shape, {1.05}, 1024, 5);
  TrainConfig c = testing::small_dlrm_config(shape, 3, 96, 6);
  for (const Mode mode : {Mode::sharded_ps, Mode::allreduce, Mode::ps}) {
    c.mode = mode;
    const RunResult run = testing::train_mode(c, *logs);
    ScheduleInputs in;
    in.config = c;
    in.engine = Backend::local;
    in.num_params = run.num_params;
    in.input_floats = run.input_features;
    in.classes = 2;
    in.compute.assign(3, RankCompute{0.001, 0.001, 0.002, 0.001});
    for (const auto& rank : run.ranks) in.measured_bytes_sent += static_cast<double>(rank.comm_per_step.bytes_sent) / 3;
    StepSchedule s(3);
    find_strategy(mode).schedule(in, s);
    s.check_matched();
    const double sent = (s.bytes_sent(0) + s.bytes_sent(1) + s.bytes_sent(2)) / 3;
    EXPECT_GT(in.measured_bytes_sent, 0.0);
    EXPECT_NEAR(sent, in.measured_bytes_sent, mode == Mode::sharded_ps ? 1e-6 * sent : 2.0 * 4 * (2 + 2 * shape.dim))
        << mode;
    std::vector<bool> probed(kCollectiveKinds, false);
    for (CollectiveKind k : find_strategy(mode).probed_collectives(c)) probed[static_cast<std::size_t>(k)] = true;
    EXPECT_EQ(s.collectives_used(), probed) << mode;
    // Nothing measured: no rows.
    in.measured_bytes_sent = 0;
    EXPECT_EQ(sparse_rows_per_peer(in, 4.0, 40.0), 0.0);
    EXPECT_EQ(sparse_rows_from_bytes(in, [](Collectives& comm, double rows) { comm.allreduce(1 + 8 * rows); }), 0.0);
  }
}

// ---- the SimGrid player ----

#define SKIP_WITHOUT_SIMGRID()                                                               \
  if (!simulation_available()) {                                                             \
    GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable"; \
  }

SimPlatform star(int nodes, double rate, double latency) {
  SimPlatform pf;
  pf.nodes.assign(static_cast<std::size_t>(nodes), SimNode{rate, rate, latency});
  return pf;
}

// Folding (StepSchedule's played ranks): DDP's bucketed ring all-reduce of 96 ranks on 24 nodes of
// 4 alike, flat and over the node hierarchy, played as two nodes' 8 ranks, gives the whole
// simulation's step within 1 % (the chunks' remainders), with 1/12 of its messages; sharded_ps's
// segments and ps's root make their schedules not rotation-symmetric, so they are never folded.
TEST(Simulation, AFoldedRingPlaysLikeTheWholeOne) {
  SKIP_WITHOUT_SIMGRID();
  const int p = 96, per_node = 4, fold = 8;
  for (const Hierarchy hierarchy : {Hierarchy::none, Hierarchy::node}) {
    ScheduleInputs in;
    in.config.mode = Mode::allreduce;
    in.config.world_size = p;
    in.config.global_batch = 8 * p;
    in.config.hierarchy = hierarchy;
    in.config.process.ranks_on_this_node = per_node;
    in.engine = Backend::local;
    in.num_params = 3'000'001;
    in.buckets = {{2'000'000, 1'000'001, {}, 0.3}, {500'000, 1'500'000, {}, 0.5}, {0, 500'000, {}, 0.2}};
    in.input_floats = 784;
    in.classes = 10;
    in.compute.assign(static_cast<std::size_t>(p), RankCompute{0.0, 0.002, 0.004, 0.001});
    SimPlatform pf = star(p / per_node, 1.25e9, 2e-6);
    pf.ranks_per_node = per_node;
    pf.intra_bytes_per_s = 50e9;
    pf.intra_latency_s = 1e-6;
    StepSchedule whole(p), folded(p, fold);
    find_strategy(Mode::allreduce).schedule(in, whole);
    find_strategy(Mode::allreduce).schedule(in, folded);
    EXPECT_TRUE(whole.is_rotation_symmetric(fold)) << hierarchy;
    EXPECT_EQ(folded.ranks().size(), static_cast<std::size_t>(fold));
    EXPECT_EQ(folded.world_size(), p);
    folded.settle_folded_messages();
    SimPlatform two = pf;
    two.nodes.resize(fold / per_node);
    const SimulationResult a = simulate(whole, pf, 1), b = simulate(folded, two, 1);
    EXPECT_NEAR(b.step_s / a.step_s, 1.0, 0.01) << hierarchy << ": " << a.step_s << " s whole, " << b.step_s;
    EXPECT_LT(b.messages * 10, a.messages) << hierarchy;
  }
  for (const Mode mode : {Mode::sharded_ps, Mode::ps}) {
    ScheduleInputs in;
    in.config.mode = mode;
    in.config.world_size = 16;
    in.config.global_batch = 128;
    in.engine = Backend::local;
    in.num_params = 1'000'000;
    in.buckets = {{500'000, 500'000, {}, 0.5}, {0, 500'000, {}, 0.5}};
    in.input_floats = 784;
    in.classes = 10;
    in.compute.assign(16, RankCompute{0.0, 0.002, 0.004, 0.001});
    StepSchedule whole(16);
    find_strategy(mode).schedule(in, whole);
    EXPECT_FALSE(whole.is_rotation_symmetric(8)) << name(mode);
  }
}

// The programs of node 0's ranks alone (StepSchedule::only_ranks) count node 0's NIC bytes as the
// whole schedule does, for every strategy and transport at 64 ranks of 8 per node.
TEST(StepSchedule, NodeZerosRanksAloneCountItsNicBytes) {
  const int p = 64, per_node = 8;
  std::vector<int> node_of(p);
  for (int r = 0; r < p; ++r) node_of[static_cast<std::size_t>(r)] = r / per_node;
  for (const Mode mode : {Mode::ps, Mode::sharded_ps, Mode::allreduce}) {
    for (const Transport transport : {Transport::collective, Transport::p2p}) {
      ScheduleInputs in;
      in.config.mode = mode;
      in.config.transport = transport;
      in.config.world_size = p;
      in.config.global_batch = 8 * p;
      in.engine = Backend::local;
      in.num_params = 1'000'003;
      in.buckets = {{500'000, 500'003, {}, 0.5}, {0, 500'000, {}, 0.5}};
      in.input_floats = 784;
      in.classes = 10;
      in.compute.assign(static_cast<std::size_t>(p), RankCompute{0.0, 0.002, 0.004, 0.001});
      StepSchedule whole(p);
      StepSchedule node0 = StepSchedule::only_ranks(p, per_node);
      find_strategy(mode).schedule(in, whole);
      find_strategy(mode).schedule(in, node0);
      const auto a = whole.node_link_bytes(node_of, p / per_node).front();
      const auto b = node0.node_link_bytes(node_of, p / per_node).front();
      EXPECT_GT(a.first, 0.0) << mode << " " << transport;
      EXPECT_EQ(a, b) << mode << " " << transport;
      EXPECT_EQ(node0.ranks().size(), static_cast<std::size_t>(per_node));
    }
  }
  EXPECT_THROW(StepSchedule::only_ranks(4, 5), Error);
}

// A two-level tree routes every rank through its own node's NIC and its own intra-node link.
// 4 nodes, 2 per leaf, non-blocking uplinks: 0 -> 2 and 1 -> 3 cross the spine at once, each on
// its own NIC (0.1 s for 1 MB at 10 MB/s; through one shared NIC, 0.2 s). Nodes of 2 ranks on
// 1 MB/s intra-node links, a leaf each: rank 1's 1 MB to rank 3 crosses both ranks' intra-node
// links (1 s; 0.01 s on the NICs alone).
TEST(Simulation, TwoLeavesRouteEachNodeThroughItsOwnNic) {
  SKIP_WITHOUT_SIMGRID();
  auto pair_of_sends = [](StepSchedule& s, int from, int to) {
    s.send(from, 0, to, 1e6);
    s.wait_all(from, 0);
    s.recv(to, 0, from, 1e6);
    s.wait_all(to, 0);
  };
  SimPlatform tree = star(4, 10e6, 0);
  tree.nodes_per_leaf = 2;
  tree.leaf_up_bytes_per_s = 20e6;
  StepSchedule across(4);
  pair_of_sends(across, 0, 2);
  pair_of_sends(across, 1, 3);
  const auto ends = simulate(across, tree, 1).rank_step_s;
  EXPECT_NEAR(ends[2], 0.1, 1e-6);
  EXPECT_NEAR(ends[3], 0.1, 1e-6);
  SimPlatform nodes = star(2, 100e6, 0);
  nodes.ranks_per_node = 2;
  nodes.intra_bytes_per_s = 1e6;
  nodes.nodes_per_leaf = 1;
  nodes.leaf_up_bytes_per_s = 100e6;
  StepSchedule one(4);
  pair_of_sends(one, 1, 3);
  EXPECT_NEAR(simulate(one, nodes, 1).rank_step_s[3], 1.0, 1e-6);
}

// A SimGrid platform file: rank r on its r-th host in natural name order (node-2, node-9,
// node-10; by plain string order node-10 would come first and rank 0's send would take the slow
// link); more ranks than hosts, or a file that is not there, are errors.
TEST(Simulation, PlatformFilePutsRankROnItsRthHostInNaturalOrder) {
  SKIP_WITHOUT_SIMGRID();
  testing::TempDir dir;
  const auto file = dir.path() / "three.xml";
  std::ofstream(file) << R"(<?xml version='1.0'?>
<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">
<platform version="4.1">
  <zone id="world" routing="Full">
    <host id="node-10" speed="1Gf"/>
    <host id="node-2" speed="1Gf"/>
    <host id="node-9" speed="1Gf"/>
    <link id="fast" bandwidth="100MBps" latency="0"/>
    <link id="slow" bandwidth="10MBps" latency="0"/>
    <route src="node-2" dst="node-9"><link_ctn id="fast"/></route>
    <route src="node-2" dst="node-10"><link_ctn id="slow"/></route>
    <route src="node-9" dst="node-10"><link_ctn id="slow"/></route>
  </zone>
</platform>
)";
  SimPlatform pf;
  pf.platform_file = file.string();
  StepSchedule s(3);
  s.send(0, 0, 1, 1e6);  // node-2 -> node-9: 0.01 s
  s.wait_all(0, 0);
  s.recv(1, 0, 0, 1e6);
  s.wait_all(1, 0);
  s.send(1, 0, 2, 1e6);  // then node-9 -> node-10: 0.1 s more
  s.wait_all(1, 0);
  s.recv(2, 0, 1, 1e6);
  s.wait_all(2, 0);
  const auto ends = simulate(s, pf, 1).rank_step_s;
  EXPECT_NEAR(ends[0], 0.01, 1e-6);
  EXPECT_NEAR(ends[2], 0.11, 1e-6);
  EXPECT_EQ(pf.to_json()["platform_file"], file.string());
  try {
    simulate(StepSchedule(4), pf, 1);
    ADD_FAILURE() << "4 ranks on 3 hosts";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 hosts, fewer than the 4 ranks"), std::string::npos) << e.what();
  }
  pf.platform_file = (dir.path() / "missing.xml").string();
  EXPECT_THROW(simulate(StepSchedule(1), pf, 1), InputError);
}

TEST(Simulation, RingAllReduceOnEqualLinksTakesTheClosedForm) {
  SKIP_WITHOUT_SIMGRID();
  const int p = 4;
  const std::size_t n = 4'000'000;  // floats: 16 MB
  const double rate = 12.5e6, latency = 50e-6;
  StepSchedule s(p);
  Collectives(s, Backend::local).allreduce(n);
  const SimulationResult r = simulate(s, star(p, rate, latency));
  // 2(p-1) steps; in each, every rank sends one chunk of n/p floats over its up link and the next
  // rank's down link, each carrying only that transfer: 2 latencies + chunk / rate.
  const double expected = 2.0 * (p - 1) * (2.0 * latency + 4.0 * n / p / rate);
  EXPECT_NEAR(r.step_s, expected, 1e-6 * expected);
  EXPECT_EQ(r.messages, 3L * 2 * (p - 1) * p);
}

// NCCL's trees: in each, every member but one root has a parent that lists it as a child, and
// reaches the root in at most ceil(log2 n) hops; with an even count no member has children in
// both trees (the double tree's point: each member's links carry one tree's inner traffic).
TEST(Schedule, DoubleBinaryTreesAreTreesWhoseInnerMembersDiffer) {
  for (int n = 1; n <= 70; ++n) {
    std::array<std::vector<TreeLinks>, 2> trees;
    for (int t = 0; t < 2; ++t) {
      auto& tree = trees[static_cast<std::size_t>(t)];
      for (int m = 0; m < n; ++m) tree.push_back(double_tree_links(n, m, t));
      int roots = 0;
      for (int m = 0; m < n; ++m) {
        const TreeLinks& x = tree[static_cast<std::size_t>(m)];
        for (int child : {x.child0, x.child1}) {
          if (child >= 0) EXPECT_EQ(tree[static_cast<std::size_t>(child)].parent, m) << n << " " << t;
        }
        if (x.parent < 0) {
          ++roots;
          continue;
        }
        const TreeLinks& up = tree[static_cast<std::size_t>(x.parent)];
        EXPECT_TRUE(up.child0 == m || up.child1 == m) << "n " << n << " tree " << t << " member " << m;
        int hops = 0;
        for (int y = m; tree[static_cast<std::size_t>(y)].parent >= 0 && hops <= n; ++hops)
          y = tree[static_cast<std::size_t>(y)].parent;
        EXPECT_LE(hops, static_cast<int>(std::ceil(std::log2(n)))) << "n " << n << " tree " << t << " member " << m;
      }
      EXPECT_EQ(roots, 1) << n << " " << t;
    }
    for (int m = 0; m < n && n % 2 == 0; ++m) {
      const auto inner = [&](int t) {
        return trees[static_cast<std::size_t>(t)][static_cast<std::size_t>(m)].child0 >= 0;
      };
      EXPECT_FALSE(inner(0) && inner(1)) << "n " << n << " member " << m;
    }
  }
  // NCCL's drawing of 14 members (src/graph/trees.cc): 0 - 8; 12 -> 10, 13; 13 -> 12.
  EXPECT_EQ(binary_tree_links(14, 0).child0, 8);
  EXPECT_EQ(binary_tree_links(14, 12).parent, 8);
  EXPECT_EQ(binary_tree_links(14, 12).child0, 10);
  EXPECT_EQ(binary_tree_links(14, 12).child1, 13);
  EXPECT_EQ(binary_tree_links(14, 13).parent, 12);
  EXPECT_THROW(binary_tree_links(4, 4), Error);
  EXPECT_THROW(double_tree_links(4, 0, 2), Error);
}

// The tree all-reduce: each half of the floats crosses every edge of its tree (a chain inside a
// node, the double tree over the nodes' first ranks) once up and once down, in chunks of at most
// kTreeChunkBytes, and every message is matched.
TEST(Schedule, TreeAllReduceMovesEachHalfUpAndDownEveryEdge) {
  const int p = 12, g = 3;          // 4 nodes of 3 ranks
  const std::size_t n = 3'000'001;  // halves of 6 MB: 2 chunks each
  StepSchedule s(p);
  Collectives comm(s, Backend::local, 1);
  comm.set_tree_allreduce(g);
  comm.allreduce(n);
  s.check_matched();
  const std::array<double, 2> half{4.0 * static_cast<double>(n / 2), 4.0 * static_cast<double>(n - n / 2)};
  double total = 0;
  for (int r = 0; r < p; ++r) {
    double edges_bytes = 0;
    for (int t = 0; t < 2; ++t) {
      int edges = r % g + 1 < g ? 1 : 0;  // the chain's next rank
      if (r % g > 0) {
        ++edges;  // the chain's previous rank
      } else {
        const TreeLinks links = double_tree_links(p / g, r / g, t);
        edges += (links.parent >= 0) + (links.child0 >= 0) + (links.child1 >= 0);
      }
      edges_bytes += edges * half[static_cast<std::size_t>(t)];
    }
    EXPECT_EQ(s.bytes_sent(r), edges_bytes) << r;
    EXPECT_EQ(s.bytes_received(r), edges_bytes) << r;
    total += s.bytes_sent(r);
  }
  EXPECT_EQ(total, 2.0 * (p - 1) * 4.0 * static_cast<double>(n));
  EXPECT_EQ(s.messages(), 2L * 2 * 2 * (p - 1));  // 2 trees x 2 chunks x (up, down) x (p - 1) edges
  StepSchedule other(p);
  EXPECT_THROW(Collectives(other, Backend::local, kTreeFirstStream).tree_allreduce(n, g), Error);
  EXPECT_THROW(Collectives(other, Backend::local).tree_allreduce(n, 0), Error);
  // 12 ranks on nodes of 5: nodes of 5, 5 and 2 ranks, every message still matched, 2 (p - 1) edges.
  Collectives(other, Backend::local).tree_allreduce(n, 5);
  other.check_matched();
  EXPECT_EQ(other.messages(), 2L * 2 * 2 * (p - 1));
}

// Played: on 2 nodes the trees' halves go opposite ways over each link, so the all-reduce takes
// one transfer of half the floats up and one down: 2 (2 latencies + n/2 / rate). At 64 nodes on
// 64 floats, where latency rules, the tree's 2 x 6 levels beat the ring's 2 x 63 steps.
TEST(Simulation, TreeAllReducePlaysItsClosedFormAndBeatsTheRingOnLatency) {
  SKIP_WITHOUT_SIMGRID();
  const double rate = 12.5e6, latency = 50e-6;
  const std::size_t n = 1'000'000;  // 4 MB: one chunk per tree
  StepSchedule two(2);
  Collectives pair(two, Backend::local);
  pair.set_tree_allreduce(1);
  pair.allreduce(n);
  const double expected = 2.0 * (2.0 * latency + 4.0 * static_cast<double>(n / 2) / rate);
  EXPECT_NEAR(simulate(two, star(2, rate, latency)).step_s, expected, 1e-6 * expected);
  const int p = 64;
  StepSchedule ring(p), tree(p);
  Collectives(ring, Backend::local).allreduce(64);
  Collectives wide(tree, Backend::local);
  wide.set_tree_allreduce(1);
  wide.allreduce(64);
  const double ring_s = simulate(ring, star(p, rate, latency)).step_s;
  const double tree_s = simulate(tree, star(p, rate, latency)).step_s;
  EXPECT_GT(ring_s, 2.0 * (p - 1) * 2.0 * latency);
  EXPECT_LT(tree_s, ring_s / 4) << "tree " << tree_s << " s, ring " << ring_s << " s";
  EXPECT_GT(tree_s, 2.0 * 6 * 2.0 * latency);  // up and down through 6 levels
}

TEST(Simulation, IncastGivesTheFastSenderTheRestOfTheRootsLink) {
  SKIP_WITHOUT_SIMGRID();
  // Node 2 sends at 100 Mbit/s, node 1 at 1 Gbit/s, both to node 0 at once: max-min sharing
  // lets node 1 use what node 2 leaves of node 0's down link, so the incast ends when node 2's
  // own link has carried its bytes, half of "every link at the slowest rate" (2 N / 12.5 MB/s).
  SimPlatform pf = star(3, 125e6, 0);
  pf.nodes[2] = SimNode{12.5e6, 12.5e6, 0};
  const double bytes = 2.1e6;
  StepSchedule s(3);
  s.recv(0, 0, 1, bytes);
  s.recv(0, 0, 2, bytes);
  s.wait_all(0, 0);
  for (int w : {1, 2}) {
    s.send(w, 0, 0, bytes);
    s.wait_all(w, 0);
  }
  const SimulationResult r = simulate(s, pf);
  EXPECT_NEAR(r.step_s, bytes / 12.5e6, 1e-6);
}

TEST(Simulation, RanksOfOneNodeDoNotCrossItsLink) {
  SKIP_WITHOUT_SIMGRID();
  SimPlatform pf = star(1, 1e6, 1e-3);  // a slow node link that an intra-node message must not touch
  pf.ranks_per_node = 2;
  pf.intra_bytes_per_s = 1e9;
  pf.intra_latency_s = 1e-6;
  StepSchedule s(2);
  s.send(0, 0, 1, 1e6);
  s.wait_all(0, 0);
  s.recv(1, 0, 0, 1e6);
  s.wait_all(1, 0);
  const SimulationResult r = simulate(s, pf);
  EXPECT_NEAR(r.step_s, 2e-6 + 1e6 / 1e9, 1e-7);  // both ranks' intra links, each way once
}

TEST(Simulation, BackwardHidesTheBucketsItOverlaps) {
  SKIP_WITHOUT_SIMGRID();
  // One rank pair, one bucket ready halfway through a 1 s backward, all-reduced in 0.2 s: the
  // step is 1 s of backward then nothing exposed; a bucket ready at the end adds its 0.2 s.
  auto step = [](double first_share) {
    StepSchedule s(2);
    for (int r = 0; r < 2; ++r) {
      s.compute(r, 0, first_share, "backward");
      const int ready = s.new_event(r), done = s.new_event(r);
      s.record(r, 0, ready);
      s.compute(r, 0, 1.0 - first_share, "backward");
      s.wait_event(r, 1, ready);
      s.send(r, 1, 1 - r, 1e6);
      s.recv(r, 1, 1 - r, 1e6);
      s.wait_all(r, 1);
      s.record(r, 1, done);
      s.wait_event(r, 0, done);
    }
    return simulate(s, star(2, 5e6, 0)).step_s;
  };
  EXPECT_NEAR(step(0.5), 1.0, 1e-6);
  EXPECT_NEAR(step(1.0), 1.2, 1e-6);
}

// The simulated time of one blocking 1 MB message of `kind` from `from` to `to`, on 4 ranks.
double one_message_s(const SimPlatform& platform, int from, int to, CollectiveKind kind) {
  StepSchedule s(4);
  s.set_collective(kind);
  s.send(from, 0, to, 1e6);
  s.wait_all(from, 0);
  s.recv(to, 0, from, 1e6);
  s.wait_all(to, 0);
  return simulate(s, platform).step_s;
}

TEST(Simulation, TheEngineCalibrationSlowsOnlyItsCollectivesMessagesBetweenNodes) {
  SKIP_WITHOUT_SIMGRID();
  // Two nodes of two ranks: 1 MB from rank 0 to rank 2 (another node) and from rank 1 to rank 0
  // (the same node, on 1 GB/s intra-node links), tagged as one collective.
  SimPlatform pf = star(2, 10e6, 0);
  pf.ranks_per_node = 2;
  pf.intra_bytes_per_s = 1e9;
  EXPECT_NEAR(one_message_s(pf, 0, 2, CollectiveKind::reduce), 0.1, 1e-6);  // the node links' rate
  SimPlatform slow = pf;
  slow.engine_efficiency.assign(kCollectiveKinds, 0.0);
  slow.engine_efficiency[static_cast<std::size_t>(CollectiveKind::reduce)] = 0.5;
  EXPECT_NEAR(one_message_s(slow, 0, 2, CollectiveKind::reduce), 0.2, 1e-6);     // at half the rate
  EXPECT_NEAR(one_message_s(slow, 0, 2, CollectiveKind::broadcast), 0.1, 1e-6);  // another collective: not capped
  EXPECT_NEAR(one_message_s(slow, 1, 0, CollectiveKind::reduce), one_message_s(pf, 1, 0, CollectiveKind::reduce), 1e-9);
  slow.engine_efficiency[0] = 1.5;
  EXPECT_THROW(one_message_s(slow, 0, 2, CollectiveKind::reduce), InputError);
}

// The fitted share of the link makes the collective alone take the measured time: Open MPI's
// pipelined chain reduce on 4 nodes, "measured" at 2.5x and 1.3x its time at the link's rate,
// and an engine no slower than the link (efficiency 1).
TEST(Simulation, TheFittedEngineEfficiencyGivesBackTheMeasuredTime) {
  SKIP_WITHOUT_SIMGRID();
  const SimPlatform pf = star(4, 12.5e6, 50e-6);
  StepSchedule alone(4);
  Collectives(alone, Backend::mpi).run(CollectiveKind::reduce, 1u << 19);
  const EfficiencyFit at_link = fit_engine_efficiency(alone, pf, CollectiveKind::reduce, 0.0);
  EXPECT_EQ(at_link.efficiency, 1.0);
  EXPECT_GT(at_link.at_link_s, 4.0 * (1u << 19) / 12.5e6);  // at least the whole vector over one link
  for (double slower : {2.5, 1.3}) {
    const double measured = slower * at_link.at_link_s;
    const EfficiencyFit fit = fit_engine_efficiency(alone, pf, CollectiveKind::reduce, measured);
    EXPECT_LT(fit.efficiency, 1.0 / slower * 1.1) << slower;
    EXPECT_NEAR(fit.fitted_s, measured, 0.02 * measured) << slower;
    SimPlatform calibrated = pf;
    calibrated.engine_efficiency.assign(kCollectiveKinds, 0.0);
    calibrated.engine_efficiency[static_cast<std::size_t>(CollectiveKind::reduce)] = fit.efficiency;
    const auto r = simulate(alone, calibrated, 1);
    EXPECT_NEAR(*std::max_element(r.rank_step_s.begin(), r.rank_step_s.end()), measured, 0.02 * measured) << slower;
  }
  // gloo's binomial broadcast from a root with two children: each flow's fair share of the root's
  // link is half of it, so a cap above one half changes nothing (t(e) flat there).
  StepSchedule bcast(3);
  Collectives(bcast, Backend::gloo).run(CollectiveKind::broadcast, 1u << 19);
  const double flat = fit_engine_efficiency(bcast, star(3, 25e6, 0), CollectiveKind::broadcast, 0.0).at_link_s;
  const EfficiencyFit fit = fit_engine_efficiency(bcast, star(3, 25e6, 0), CollectiveKind::broadcast, 1.15 * flat);
  EXPECT_NEAR(fit.fitted_s, 1.15 * flat, 0.01 * flat);
  EXPECT_GT(fit.efficiency, 0.3);
  EXPECT_LT(fit.efficiency, 0.5);
}

// The engine's per-message overhead (engine_overhead_s) delays each message of its kind between
// nodes on its sender, and nothing else; fit_engine_overhead finds the overhead that makes a
// pairwise round end when it was "measured" (the link's time plus 1 ms, plus 10 ms).
// Two nodes of two ranks on 10 MB/s links; and one pairwise round of 1,000 floats (4,000 bytes)
// from every rank to r + 1, of which ranks 1 and 3 send across.
SimPlatform two_nodes_of_two() {
  SimPlatform pf = star(2, 10e6, 0);
  pf.ranks_per_node = 2;
  pf.intra_bytes_per_s = 1e9;
  return pf;
}
StepSchedule pairwise_round() {
  StepSchedule round(4);
  Collectives(round, Backend::gloo).run(CollectiveKind::p2p, 4000);
  return round;
}

TEST(Simulation, TheFittedPerMessageOverheadGivesBackTheMeasuredTime) {
  SKIP_WITHOUT_SIMGRID();
  const SimPlatform pf = two_nodes_of_two();
  const StepSchedule round = pairwise_round();
  const EfficiencyFit at_link = fit_engine_overhead(round, pf, CollectiveKind::p2p, 0.0);
  EXPECT_EQ(at_link.overhead_s, 0.0);
  EXPECT_NEAR(at_link.at_link_s, 4000.0 / 10e6, 1e-6);  // ranks 1 and 3 send across: 4 KB at the link's rate
  for (double extra : {1e-3, 10e-3}) {
    const double measured = at_link.at_link_s + extra;
    const EfficiencyFit fit = fit_engine_overhead(round, pf, CollectiveKind::p2p, measured);
    EXPECT_NEAR(fit.overhead_s, extra, 0.01 * extra) << extra;
    EXPECT_NEAR(fit.fitted_s, measured, 0.005 * measured) << extra;
    EXPECT_LE(fit.simulations, 12);
  }
  SimPlatform slow = pf;
  slow.engine_overhead_s.assign(kCollectiveKinds, 0.0);
  slow.engine_overhead_s[static_cast<std::size_t>(CollectiveKind::p2p)] = 0.5;
  EXPECT_NEAR(one_message_s(slow, 0, 2, CollectiveKind::p2p), 0.6, 1e-6);        // 0.5 s, then 1 MB at 10 MB/s
  EXPECT_NEAR(one_message_s(slow, 0, 2, CollectiveKind::allgather), 0.1, 1e-6);  // another kind
  EXPECT_NEAR(one_message_s(slow, 0, 1, CollectiveKind::p2p), one_message_s(pf, 0, 1, CollectiveKind::p2p),
              1e-9);  // one node
  slow.engine_overhead_s[0] = -1;
  EXPECT_THROW(one_message_s(slow, 0, 2, CollectiveKind::p2p), InputError);
}

// The cost per byte (SMPI's os/or slope): a message between nodes leaves after the constant plus
// the slope times its bytes; fitted on a round of larger messages with a smaller one's cost kept,
// it gives back a line through both: the 4,000-byte messages of the round at 0.1 ms + 4,000 x
// 0.25 us, the smaller probe's 400-byte messages kept at 0.2 ms.
TEST(Simulation, TheFittedPerByteOverheadGivesBackTheMeasuredTime) {
  SKIP_WITHOUT_SIMGRID();
  const SimPlatform pf = two_nodes_of_two();
  const StepSchedule round = pairwise_round();
  const double at_link = 4000.0 / 10e6, slope = 0.25e-6, kept = 0.2e-3, small_bytes = 400;
  const double measured = at_link + (kept - slope * small_bytes) + slope * 4000;
  const EfficiencyFit fit = fit_engine_overhead_per_byte(round, pf, CollectiveKind::p2p, measured, kept, small_bytes);
  EXPECT_NEAR(fit.overhead_s, slope, 0.02 * slope);
  EXPECT_NEAR(fit.fitted_s, measured, 0.005 * measured);
  EXPECT_LE(fit.simulations, 12);
  SimPlatform sloped = pf;
  sloped.engine_overhead_s.assign(kCollectiveKinds, 0.0);
  sloped.engine_overhead_per_byte_s.assign(kCollectiveKinds, 0.0);
  sloped.engine_overhead_s[static_cast<std::size_t>(CollectiveKind::p2p)] = 0.1;
  sloped.engine_overhead_per_byte_s[static_cast<std::size_t>(CollectiveKind::p2p)] = 0.2e-6;
  EXPECT_NEAR(one_message_s(sloped, 0, 2, CollectiveKind::p2p), 0.1 + 0.2 + 0.1, 1e-6);  // then 1 MB at 10 MB/s
  EXPECT_NEAR(one_message_s(sloped, 0, 1, CollectiveKind::p2p), one_message_s(pf, 0, 1, CollectiveKind::p2p), 1e-9);
  EXPECT_EQ(sloped.to_json()["engine_overhead_per_byte_s"]["p2p"], 0.2e-6);
  sloped.engine_overhead_per_byte_s[0] = -1;
  EXPECT_THROW(one_message_s(sloped, 0, 2, CollectiveKind::p2p), InputError);
}

// fn(comm) on p threads of one local group; each rank's answer, by rank.
template <typename T, typename Fn>
std::vector<T> on_local_threads(int p, Fn fn) {
  auto group = std::make_shared<LocalGroup>(p);
  std::vector<T> got(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r) {
    threads.emplace_back([&, r] {
      LocalCommunicator comm(group, r, nullptr);
      got[static_cast<std::size_t>(r)] = fn(comm);
    });
  }
  for (auto& t : threads) t.join();
  return got;
}

// probe_engine on p threads of one local group; each rank's answer.
std::vector<std::optional<EngineProbe>> probe_on_threads(int p, const std::vector<CollectiveKind>& kinds,
                                                         std::size_t floats, int reps, double min_seconds) {
  return on_local_threads<std::optional<EngineProbe>>(p, [&](Communicator& comm) {
    return probe_engine(comm, kinds, floats, reps, min_seconds);
  });
}

// The probe on three threads of one local group: every kind asked for, in order, each ending after
// the one before it, with its own time the difference of the two; on rank 0 only; quick
// sequences repeated up to the cap while they take less than min_seconds together; bad sizes are
// input errors.
TEST(EngineProbe, EveryRankRunsEachCollectiveAndRankZeroKeepsTheTimes) {
  const std::vector<CollectiveKind> kinds = {CollectiveKind::allreduce, CollectiveKind::reduce,
                                             CollectiveKind::broadcast, CollectiveKind::reduce_scatter,
                                             CollectiveKind::allgather, CollectiveKind::scatter,
                                             CollectiveKind::gather};
  const auto got = probe_on_threads(3, kinds, 10001, 3, 0.0);
  ASSERT_TRUE(got[0].has_value());
  EXPECT_FALSE(got[1].has_value());
  EXPECT_FALSE(got[2].has_value());
  ASSERT_EQ(got[0]->collectives.size(), kinds.size());
  EXPECT_EQ(got[0]->repetitions, 3);
  for (std::size_t i = 0; i < kinds.size(); ++i) {
    EXPECT_EQ(got[0]->collectives[i].kind, kinds[i]);
    EXPECT_EQ(got[0]->collectives[i].floats, 10001u);
    const auto& c = got[0]->collectives[i];
    EXPECT_GT(c.seconds, 0.0) << collective_name(kinds[i]);
    EXPECT_DOUBLE_EQ(c.seconds, c.end_s - (i == 0 ? 0.0 : got[0]->collectives[i - 1].end_s))
        << collective_name(kinds[i]);
  }
  const auto more = probe_on_threads(2, {CollectiveKind::allreduce}, 64, 3, 1e9);
  ASSERT_TRUE(more[0].has_value());
  EXPECT_EQ(more[0]->repetitions, kMaxRepetitions);
  auto lone = std::make_shared<LocalGroup>(2);
  LocalCommunicator comm(lone, 0, nullptr);
  EXPECT_THROW(probe_engine(comm, kinds, 1, 2), InputError);
  EXPECT_THROW(probe_engine(comm, kinds, 100, 0), InputError);
}

// Each kind on its own size (ps's scatter and gather at the batch's and the logits' size): each
// recorded with its size, and the bytes a worker sends are those of the two sizes (a gather of n
// floats over 3 ranks: n / 3 from each worker, every repetition), not of either one twice; a
// size per kind is required, and every size must hold a float per rank.
TEST(EngineProbe, EachKindRunsOnItsOwnSize) {
  const std::vector<CollectiveKind> kinds = {CollectiveKind::gather, CollectiveKind::gather};
  const std::vector<std::size_t> sizes = {30, 3'000'000};
  const auto got = on_local_threads<std::pair<std::optional<EngineProbe>, CommStats>>(3, [&](Communicator& comm) {
    comm.reset_stats();
    auto probe = probe_engine(comm, kinds, sizes, 3, 0, 0, WireFormat::fp32, {}, 0.0f);  // one warm-up repetition
    return std::make_pair(probe, comm.stats());
  });
  const std::optional<EngineProbe>& probe = got[0].first;
  ASSERT_TRUE(probe.has_value());
  ASSERT_EQ(probe->collectives.size(), 2u);
  EXPECT_EQ(probe->collectives[0].floats, 30u);
  EXPECT_EQ(probe->collectives[1].floats, 3'000'000u);
  const auto reps = static_cast<std::int64_t>(probe->repetitions);
  ASSERT_GT(reps, 0);
  EXPECT_EQ(got[1].second.bytes_sent % static_cast<std::int64_t>(sizeof(float)), 0);
  const std::int64_t per_rep = (10 + 1'000'000) * static_cast<std::int64_t>(sizeof(float));
  EXPECT_GE(got[1].second.bytes_sent, (reps + 1) * per_rep);  // and the one warm-up repetition
  EXPECT_LT(got[1].second.bytes_sent, (reps + 1) * 2 * 1'000'000 * static_cast<std::int64_t>(sizeof(float)));
  auto lone = std::make_shared<LocalGroup>(2);
  LocalCommunicator comm(lone, 0, nullptr);
  EXPECT_THROW(probe_engine(comm, kinds, std::vector<std::size_t>{100}, 2), InputError);
  EXPECT_THROW(probe_engine(comm, kinds, std::vector<std::size_t>{100, 1}, 2), InputError);
}

// The intra-node probe on four threads, its round trips timed by a scripted clock (each thread's
// k-th reading: a one-float round trip of `small` seconds, then one of 4 MiB of `large`): with two
// ranks per node, rank 0 alone returns the median round trips of ranks 0 and 1, the latency
// (half the small one) and the rate, 2 x 4 MiB over the large round trip less the two latencies
// (8,388,608 B / (1e-3 - 2e-6) s = 8.4054e9 B/s), or over all of it where the latencies are not a
// small part of it (2 x 3e-4 >= 1e-3 / 2: 8.3886e9 B/s). With one rank per node nobody probes;
// the real clock gives the same shape; no floats or no repetition is an input error.
TEST(EngineProbe, RanksZeroAndOneTimeATransferInsideTheirNode) {
  const std::size_t floats = std::size_t{1} << 20;
  auto scripted = [](double small, double large) {
    auto counts = std::make_shared<std::map<std::thread::id, int>>();
    auto mutex = std::make_shared<std::mutex>();
    return std::function<double()>([=] {
      std::lock_guard<std::mutex> lock(*mutex);
      const int k = (*counts)[std::this_thread::get_id()]++;
      const double base = static_cast<double>(k / 4);  // one repetition per second
      switch (k % 4) {
        case 0: return base;
        case 1: return base + small;
        case 2: return base + 0.5;
        default: return base + 0.5 + large;
      }
    });
  };
  auto on_threads = [&](int p, int per_node, const std::function<double()>& clock) {
    return on_local_threads<std::optional<IntraNodeProbe>>(p, [&](Communicator& comm) {
      return probe_intra_node(comm, per_node, floats, 3, clock);
    });
  };
  const auto got = on_threads(4, 2, scripted(2e-6, 1e-3));
  ASSERT_TRUE(got[0].has_value());
  for (int r = 1; r < 4; ++r) EXPECT_FALSE(got[static_cast<std::size_t>(r)].has_value()) << "rank " << r;
  EXPECT_EQ(got[0]->floats, floats);
  EXPECT_EQ(got[0]->repetitions, 3);
  EXPECT_NEAR(got[0]->seconds, 1e-3, 1e-12);
  EXPECT_NEAR(got[0]->latency_s, 1e-6, 1e-12);
  EXPECT_NEAR(got[0]->bytes_per_s, 8388608.0 / 0.000998, 1.0);
  const auto slow = on_threads(4, 2, scripted(6e-4, 1e-3));
  ASSERT_TRUE(slow[0].has_value());
  EXPECT_NEAR(slow[0]->latency_s, 3e-4, 1e-12);
  EXPECT_NEAR(slow[0]->bytes_per_s, 8388608.0 / 0.001, 1.0);
  const auto real = on_threads(4, 2, {});
  ASSERT_TRUE(real[0].has_value());
  EXPECT_GT(real[0]->seconds, 0.0);
  EXPECT_GT(real[0]->bytes_per_s, 0.0);
  for (const auto& g : on_threads(4, 1, {})) EXPECT_FALSE(g.has_value());
  auto lone = std::make_shared<LocalGroup>(2);
  LocalCommunicator comm(lone, 0, nullptr);
  EXPECT_THROW(probe_intra_node(comm, 2, 0, 3), InputError);
  EXPECT_THROW(probe_intra_node(comm, 2, 16, 0), InputError);
}

// Pooling the probes of a run's repetitions: each collective's mean end over all of them (here
// (0.05 + 0.15 + 0.15 + 0.25 + 0.50 + 1.00) / 6 = 0.35 and (0.10 + ... + 1.50) / 6 = 0.5, which
// neither run's own mean, 0.2 or 0.8, is), the second collective's seconds its end less the
// first's, the repetitions summed and `runs` counted; the intra-node link from the medians of all
// the round trips (latency half the one-float median). Probes of other collectives or sizes, or a
// missing one, do not pool.
TEST(EngineProbe, PoolingARunsRepetitionsAveragesAllOfThem) {
  auto probe = [](std::vector<std::vector<double>> ends, std::vector<double> small, std::vector<double> large) {
    EngineProbe p;
    p.collectives = {{CollectiveKind::reduce, 1000, {}, 0, 0}, {CollectiveKind::broadcast, 1000, {}, 0, 0}};
    p.repetitions = static_cast<int>(ends.size());
    p.repetition_ends = std::move(ends);
    p.intra_node = intra_node_from_round_trips(1u << 20, std::move(small), std::move(large));
    return p;
  };
  const EngineProbe a = probe({{0.05, 0.10}, {0.15, 0.20}, {0.15, 0.30}}, {1e-3, 2e-3, 3e-3}, {0.010, 0.011, 0.012});
  const EngineProbe b = probe({{0.25, 0.40}, {0.5, 0.50}, {1.0, 1.50}}, {4e-3, 5e-3, 6e-3}, {0.013, 0.014, 0.015});
  const auto pooled = pool_probes({&a, &b});
  ASSERT_TRUE(pooled.has_value());
  EXPECT_EQ(pooled->runs, 2);
  EXPECT_EQ(pooled->repetitions, 6);
  EXPECT_EQ(pooled->repetition_ends.size(), 6u);
  ASSERT_EQ(pooled->collectives.size(), 2u);
  EXPECT_NEAR(pooled->collectives[0].end_s, 0.35, 1e-12);
  EXPECT_NEAR(pooled->collectives[1].end_s, 0.50, 1e-12);
  EXPECT_NEAR(pooled->collectives[1].seconds, 0.15, 1e-12);
  ASSERT_TRUE(pooled->intra_node.has_value());
  EXPECT_DOUBLE_EQ(pooled->intra_node->latency_s, 4e-3 / 2);  // the median of six: the upper middle
  EXPECT_DOUBLE_EQ(pooled->intra_node->seconds, 0.013);
  EXPECT_EQ(pooled->intra_node->repetitions, 6);
  EXPECT_EQ(pooled->intra_node->runs, 2);
  EngineProbe other = b;
  other.collectives[1].floats = 2000;
  EXPECT_FALSE(pool_probes({&a, &other}).has_value());
  EXPECT_FALSE(pool_probes({&a, nullptr}).has_value());
  EngineProbe no_intra = b;
  no_intra.intra_node.reset();
  const auto without = pool_probes({&a, &no_intra});
  ASSERT_TRUE(without.has_value());
  EXPECT_FALSE(without->intra_node.has_value());
  EXPECT_THROW(intra_node_from_round_trips(16, {}, {0.1}), InputError);
}

// TCP's send buffer: the sender goes on once all but the buffer's bytes have left; the tail then
// shares the sender's link with what it sends next. Rank 0 sends 1 MB to rank 1, then 1 MB to
// rank 2, on 10 MB/s links with a 0.5 MB buffer: the first head alone (0.05 s), the first tail and
// the second head together (0.15 s), the second tail alone (0.2 s, the link's time for 2 MB).
TEST(Simulation, ASenderGoesOnOnceAllButItsSendBufferHasLeft) {
  SKIP_WITHOUT_SIMGRID();
  auto ends = [](double buffer, double second) {
    SimPlatform pf = star(3, 10e6, 0);
    pf.send_buffer_bytes = buffer;
    StepSchedule s(3);
    s.send(0, 0, 1, 1e6);
    s.wait_all(0, 0);
    if (second > 0) s.send(0, 0, 2, second);
    s.wait_all(0, 0);
    s.recv(1, 0, 0, 1e6);
    s.wait_all(1, 0);
    if (second > 0) s.recv(2, 0, 0, second);
    s.wait_all(2, 0);
    return simulate(s, pf, 1).rank_step_s;
  };
  const auto blocking = ends(0, 1e6);
  EXPECT_NEAR(blocking[0], 0.2, 1e-6);
  EXPECT_NEAR(blocking[1], 0.1, 1e-6);
  const auto buffered = ends(0.5e6, 1e6);
  EXPECT_NEAR(buffered[0], 0.15, 1e-6);
  EXPECT_NEAR(buffered[1], 0.15, 1e-6);
  EXPECT_NEAR(buffered[2], 0.2, 1e-6);
  const auto whole = ends(2e6, 0);  // a message within the buffer: the sender does not wait at all
  EXPECT_NEAR(whole[0], 0.0, 1e-9);
  EXPECT_NEAR(whole[1], 0.1, 1e-6);
}

TEST(Simulation, ADeadlockIsAnErrorNotAHang) {
  SKIP_WITHOUT_SIMGRID();
  StepSchedule s(2);
  for (int r = 0; r < 2; ++r) {  // both wait for an event nobody records
    const int e = s.new_event(r);
    s.wait_event(r, 0, e);
  }
  EXPECT_THROW(simulate(s, star(2, 1e6, 0)), Error);
}

TEST(Simulation, APlatformTooSmallIsAnInputError) {
  SKIP_WITHOUT_SIMGRID();
  StepSchedule s(4);
  EXPECT_THROW(simulate(s, star(2, 1e6, 0)), InputError);
}

}  // namespace
}  // namespace dpbench
