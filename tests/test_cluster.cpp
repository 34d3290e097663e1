// The emulated cluster (cluster/): link rates and their tc commands, the byte counts and cost
// model of gloo's collectives, and whole jobs on nodes in private namespaces: the three modes
// against their alpha-beta projection on a small grid of node counts and link rates, a node's
// link going down, a straggler link, signals, and a machine that cannot host a cluster. The
// job tests skip, with the reason, where this machine cannot make the namespaces.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "train/engine_probe.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"
#include "cluster/launchers.hpp"
#include "cluster/link.hpp"
#include "cluster/netns.hpp"
#include "core/comm.hpp"
#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/mpi_comm.hpp"
#include "sim/simulate.hpp"
#include "train/alpha_beta_model.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

TEST(LinkRate, ParsesTcUnits) {
  EXPECT_DOUBLE_EQ(cluster::parse_rate("200mbit", "--link").bits_per_s, 200e6);
  EXPECT_DOUBLE_EQ(cluster::parse_rate("1gbit", "--link").bits_per_s, 1e9);
  EXPECT_DOUBLE_EQ(cluster::parse_rate("1.5Gbit", "--link").bits_per_s, 1.5e9);
  EXPECT_DOUBLE_EQ(cluster::parse_rate("100mbps", "--link").bits_per_s, 800e6);  // bytes per second
  EXPECT_DOUBLE_EQ(cluster::parse_rate("500kbit", "--link").bits_per_s, 500e3);
  for (const char* bad : {"fast", "200", "0mbit", "200tbit", "-1gbit", "1 gbit"}) {
    EXPECT_THROW(cluster::parse_rate(bad, "--link"), InputError) << bad;
  }
}

TEST(LinkRate, LinkOfOverridesOneNodeAndRejectsOthers) {
  cluster::ClusterSpec spec;
  spec.nodes = 3;
  spec.link = cluster::parse_rate("1gbit", "--link");
  cluster::parse_link_of({"2=100mbit"}, spec);
  EXPECT_DOUBLE_EQ(spec.rate_of(0).bits_per_s, 1e9);
  EXPECT_DOUBLE_EQ(spec.rate_of(2).bits_per_s, 100e6);
  EXPECT_THROW(cluster::parse_link_of({"3=1gbit"}, spec), InputError);
  EXPECT_THROW(cluster::parse_link_of({"x=1gbit"}, spec), InputError);
  EXPECT_THROW(cluster::parse_link_of({"1:1gbit"}, spec), InputError);
  spec.nodes = 1;
  EXPECT_THROW(cluster::validate(spec), InputError);
}

// mpirun's ranks yield their core while they wait where the cluster's ranks outnumber the host's
// cores (all of its nodes share them), not where each has one; the user's
// OMPI_MCA_mpi_yield_when_idle wins either way.
TEST(MpirunYield, WhenTheClustersRanksOutnumberTheHostsCores) {
  const char* old = std::getenv("OMPI_MCA_mpi_yield_when_idle");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("OMPI_MCA_mpi_yield_when_idle");
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  cluster::ClusterSpec spec;
  spec.nodes = cores + 1;
  EXPECT_TRUE(cluster::mpi_yields_when_idle(spec));
  spec.nodes = std::max(1, cores / 2);
  spec.ranks_per_node = 2;
  EXPECT_FALSE(cluster::mpi_yields_when_idle(spec)) << spec.world_size() << " ranks on " << cores << " cores";
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 1);
  EXPECT_TRUE(cluster::mpi_yields_when_idle(spec));
  spec.nodes = cores + 1;
  setenv("OMPI_MCA_mpi_yield_when_idle", "0", 1);
  EXPECT_FALSE(cluster::mpi_yields_when_idle(spec));
  if (old != nullptr) {
    setenv("OMPI_MCA_mpi_yield_when_idle", saved.c_str(), 1);
  } else {
    unsetenv("OMPI_MCA_mpi_yield_when_idle");
  }
}

TEST(LinkRate, TbfArgsCarryTheRateAndABurstOfOneMillisecond) {
  const auto args = cluster::tbf_args("eth0", cluster::parse_rate("1gbit", "--link"));
  const std::vector<std::string> want = {"qdisc", "replace",       "dev",   "eth0",   "root",    "tbf",
                                         "rate",  "1000000000bit", "burst", "125000", "latency", "50ms"};
  EXPECT_EQ(args, want);
  // Slow links keep a burst of at least 64 KiB.
  EXPECT_EQ(cluster::tbf_args("eth0", cluster::parse_rate("10mbit", "--link"))[9], "65536");
}

TEST(GlooCounts, ReduceIsARingReduceScatterAndAGatherToTheRoot) {
  // 3 ranks, 3000 elements: chunks of 1000; the root (1) gets the other two chunks.
  const auto root = gloo_reduce_counts(3000, 3, 1, 1), other = gloo_reduce_counts(3000, 3, 0, 1);
  EXPECT_EQ(root.sent, 2000u);
  EXPECT_EQ(root.received, 4000u);
  EXPECT_EQ(other.sent, 3000u);
  EXPECT_EQ(other.received, 2000u);
  for (int p = 2; p <= 7; ++p) {
    for (std::size_t n : {1u, 7u, 1001u, 65536u}) {
      std::size_t sent = 0, received = 0, root_received = 0;
      for (int r = 0; r < p; ++r) {
        const auto c = gloo_reduce_counts(n, p, r, p - 1);
        sent += c.sent;
        received += c.received;
        if (r == p - 1) root_received = c.received;
      }
      EXPECT_EQ(sent, received) << p << " ranks, n " << n;
      EXPECT_GE(root_received, n - ring_chunk(n, p, p - 1).length) << p << " ranks, n " << n;
    }
  }
}

TEST(GlooCounts, BroadcastIsABinomialTreeFromTheRoot) {
  // 5 ranks from root 2: virtual ranks 0..4 are 2,3,4,0,1; v0 sends to v1, v2, v4; v1 to v3.
  const std::size_t n = 10;
  const std::vector<std::pair<std::size_t, std::size_t>> want = {{0, n}, {0, n}, {3 * n, 0}, {n, n}, {0, n}};
  for (int r = 0; r < 5; ++r) {
    const auto c = binomial_broadcast_counts(n, 5, r, 2);
    EXPECT_EQ(c.sent, want[static_cast<std::size_t>(r)].first) << "rank " << r;
    EXPECT_EQ(c.received, want[static_cast<std::size_t>(r)].second) << "rank " << r;
  }
}

TEST(GlooCollectiveModel, CostsFollowTheAlgorithms) {
  LinkModel link{"test", 0.0, 1.0, "unit"};  // 1 s per byte
  link.collectives = CollectiveFamily::gloo;
  EXPECT_DOUBLE_EQ(broadcast_s(link, 2, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(broadcast_s(link, 3, 1.0), 2.0);  // the root's two sends share its link
  EXPECT_DOUBLE_EQ(broadcast_s(link, 4, 1.0), 3.0);  // then rank 1 forwards to 3
  EXPECT_DOUBLE_EQ(broadcast_s(link, 8, 1.0), 6.0);
  EXPECT_DOUBLE_EQ(reduce_s(link, 4, 1.0), 1.5);  // 3/4 reduce-scatter + 3/4 gathered
  EXPECT_DOUBLE_EQ(reduce_scatter_s(link, 4, 1.0), 1.5);
  EXPECT_DOUBLE_EQ(allgather_s(link, 4, 1.0), 0.75);
  link.collectives = CollectiveFamily::ring;
  EXPECT_DOUBLE_EQ(broadcast_s(link, 8, 1.0), 1.0);  // a pipelined chain
  EXPECT_DOUBLE_EQ(reduce_scatter_s(link, 4, 1.0), 0.75);
  // A project file naming another family is one line.
  EXPECT_THROW(nlohmann::json("tree").get<CollectiveFamily>(), InputError);
}

// Whole jobs on an emulated cluster.
class EmulatedCluster : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
    const cluster::Capability cap = cluster::probe_capability();
    if (cap.how.empty()) GTEST_SKIP() << "this machine cannot host an emulated cluster: " << cap.missing;
  }
  fs::path result() const { return tmp_.path() / "result.json"; }
  Outcome run(const std::string& args, const std::string& env = "") {
    return shell(fmt::format("{} timeout -k 5 300 {} run {} -q --no-eval --repetitions 1 --out {}", env, DPBENCH_BINARY,
                             args, result().string()),
                 tmp_.path());
  }
  TempDir tmp_;
};

// The CI grid (label `long`): every mode at eight points of the emulated cluster (2, 3 and 4
// nodes; 100 Mbit/s, 200 Mbit/s and 1 Gbit/s; a straggler link; a fat server link; 2 ranks per
// node; mpirun), each run's step as its schedule simulated by SimGrid on the probed links with the
// engine's calibration (train/engine_probe.hpp). A simulated step off the measured one by more
// than 15 % runs its point once more (the steps and the probe share two cores with every node), and
// fails if the second run is off by more than 15 % too; the median over the grid's runs is printed beside the goal (10 % for every
// run, 5 % for the median) and fails above 7.5 %. Also at every point: the calibration recorded for every run, each
// node's wire bytes within the TCP/IP bound of the bytes the schedule sends across its link, no
// fraction of the per-link bound above 105 %, and at the first two points (gloo, one rank per node,
// equal links) the alpha-beta projection within 20 % and the probed rate within 20 % of the
// requested one.
struct GridPoint {
  std::string name, args;
  double bits;  // the requested rate of every link but --link-of's
};

// The projection judged on runs it was not given (analysis/held_out.hpp): calibrated as a user
// would, on one rank, the grid's 2 nodes at 1 Gbit/s and this machine's host profile (`dpbench
// profile --shared-nodes 0`: its local ranks' link, which neither file crossed; its job of ranks
// sharing cores is left out, as a projection to 4 ranks on 2 cores plays none of it), `project --simulate --held-out`
// predicts the grid's 4 nodes at 100 Mbit/s, 2 nodes at 100 Mbit/s and 2 nodes x 2 ranks at
// 200 Mbit/s from their settings alone (the 3-node points are not on its power-of-two curve,
// mpirun's engine is not the calibration's). Every held-out run gets a prediction within 15 % of
// its measured step (the command's own --max-error, its exit status 0); the table is printed. As
// the grid does with its own points, a held-out run off by more than 15 % may be its measurement's
// noise: the three points are measured again (`remeasure`) and the second projection is judged
// (both printed). `ps` at 4 nodes, predicted at about 893 ms, came out at +12.7 %, +19.1 % and
// +8.3 % in three grids of one day, and +17.9 % measured again (its step p50 757 to 825 ms); the
// projection now plays the emulated links' TCP send buffer as the in-run simulation does (839 ms,
// +10.4 % in the next grid). An all-reduce fit its own run's steps contradicted put every held-out
// all-reduce 12.5 to 16.0 % high in one CI grid; such a fit is no longer used (analysis/projection.cpp).
void expect_held_out_predicted(const std::function<fs::path(const std::string&)>& kept,
                               const std::function<void(const std::string&)>& remeasure) {
  const fs::path dir = kept("x").parent_path(), one = dir / "one.json", host = dir / "host-profile.json";
  const Outcome solo = shell(fmt::format("timeout -k 5 300 {} run --ranks 1 --batch-size 256 --max-steps 20 "
                                         "--warmup-steps 4 -q --no-eval --repetitions 1 --out {}",
                                         DPBENCH_BINARY, one.string()),
                             dir);
  ASSERT_EQ(solo.exit_code, 0) << solo.err;
  const Outcome profiled = shell(
      fmt::format("timeout -k 5 300 {} profile --shared-nodes 0 -o {}", DPBENCH_BINARY, host.string()), dir);
  ASSERT_EQ(profiled.exit_code, 0) << profiled.err;
  std::printf("%s", profiled.out.c_str());
  const auto profile = nlohmann::json::parse(slurp(host));
  EXPECT_EQ(profile["schema"]["name"], "dpbench-host-profile");
  EXPECT_EQ(profile["intra_node"]["runs"], 15) << "every mode, 5 repetitions";
  EXPECT_GT(profile["intra_node"]["bytes_per_s"].get<double>(), 4 * 200e6 / 8) << "faster than the grid's links";
  const std::vector<std::string> names = {"4 nodes", "2 nodes", "2 nodes x 2 ranks"};
  const fs::path out = dir / "held-out.json";
  const auto project = [&]() -> Outcome {
    std::vector<std::string> held;
    for (const std::string& name : names) {
      if (fs::exists(kept(name))) held.push_back(kept(name).string());
    }
    EXPECT_EQ(held.size(), 3u);
    fs::remove(out);
    Outcome o = shell(fmt::format("{} project {} {} --simulate --max-ranks 4 --host-profile {} --held-out {} -q -o {}",
                                  DPBENCH_BINARY, one.string(), kept("2 nodes at 1 Gbit/s").string(), host.string(),
                                  fmt::join(held, " "), out.string()),
                      dir);
    const std::size_t table = o.out.find("held out (");
    std::printf("%s", table == std::string::npos ? o.out.c_str() : o.out.substr(table).c_str());
    return o;
  };
  Outcome o = project();
  ASSERT_TRUE(fs::exists(out)) << o.err;
  if (nlohmann::json::parse(slurp(out))["held_out"]["beyond"].get<int>() > 0) {
    std::printf("held out: a run beyond 15 %%; its three points measured again, the second projection judged\n");
    for (const std::string& name : names) remeasure(name);
    o = project();
    ASSERT_TRUE(fs::exists(out)) << o.err;
  }
  const auto h = nlohmann::json::parse(slurp(out))["held_out"];
  EXPECT_EQ(h["runs"].size(), 9u);
  for (const auto& r : h["runs"]) EXPECT_TRUE(r.contains("predicted_step_s")) << r.dump();
  const auto projection = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(projection["topology"]["host_profile"]["used_for"].size(), 1u) << "the profile's intra-node link";
  EXPECT_EQ(projection["topology"]["intra_node_calibration"]["host_profile"], host.string());
  // Without the profile the 2 x 2 sharded_ps run was -14.1 % and -15.7 % in two grids on the
  // 2-core Intel machine (the local ranks' link played as NVLink), docs/projection.md.
  EXPECT_EQ(h["beyond"], 0) << h.dump();
  EXPECT_EQ(o.exit_code, 0) << o.err;
  EXPECT_LE(h["max_abs_error"].get<double>(), 0.15) << h.dump();
}

TEST_F(EmulatedCluster, SimulationMatchesEveryPointOfTheGrid) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const std::vector<GridPoint> grid = {
      {"3 nodes", "--nodes 3 --link 200mbit --batch-size 384", 200e6},
      {"4 nodes", "--nodes 4 --link 100mbit --batch-size 384", 100e6},
      {"2 nodes", "--nodes 2 --link 100mbit --batch-size 256", 100e6},
      {"2 nodes at 1 Gbit/s", "--nodes 2 --link 1gbit --batch-size 256", 1e9},
      {"straggler", "--nodes 3 --link 1gbit --link-of 2=100mbit --batch-size 384", 1e9},
      {"fat server", "--nodes 3 --link 100mbit --link-of 0=1gbit --batch-size 384", 100e6},
      {"2 nodes x 2 ranks", "--nodes 2 --ranks-per-node 2 --link 200mbit --batch-size 256", 200e6},
      {"mpirun", "--nodes 4 --link 200mbit --launcher mpirun --comm mpi --batch-size 384", 200e6},
  };
  // One run of a point: every check but the simulation's error, which comes back per mode.
  auto run_point = [&](const GridPoint& point, const char* tag) {
    std::vector<std::pair<std::string, double>> out;
    const Outcome o = run(point.args + " --max-steps 20 --warmup-steps 4");
    EXPECT_EQ(o.exit_code, 0) << o.err;
    if (o.exit_code != 0) return out;
    EXPECT_EQ(shell(std::string("/usr/bin/python3 ") + DPBENCH_SOURCE_DIR + "/results/validate.py " + result().string(),
                    tmp_.path())
                  .exit_code,
              0)
        << "the result does not match results/schema";
    const auto doc = nlohmann::json::parse(slurp(result()));
    EXPECT_EQ(doc["runs"].size(), 3u);
    const bool plain = point.name == "3 nodes" || point.name == "4 nodes";
    for (const auto& link : doc["network"]["links"]) {
      if (!plain) break;
      for (const char* dir : {"probed_up_bytes_per_s", "probed_down_bytes_per_s"}) {
        EXPECT_NEAR(link[dir].get<double>() * 8, point.bits, 0.2 * point.bits) << dir << " of node " << link["node"];
      }
    }
    for (const auto& r : doc["runs"]) {
      const std::string mode = r["mode"];
      const auto& net = r["network"];
      const auto& sim = net["simulation"];
      EXPECT_TRUE(sim.contains("error")) << mode << ": " << sim.dump();
      if (!sim.contains("error")) continue;
      EXPECT_TRUE(sim["calibrated"].get<bool>()) << mode;
      const double error = sim["error"].get<double>();
      out.emplace_back(mode, error);
      std::printf("grid%s: %-20s %-10s measured %7.1f ms  simulated %7.1f ms  (%+5.1f %%; uncalibrated %+5.1f %%)  "
                  "alpha-beta %+5.1f %%  of the bound %3.0f %%\n",
                  tag, point.name.c_str(), mode.c_str(), 1e3 * net["projection"]["measured_step_s"].get<double>(),
                  1e3 * sim["simulated_step_s"].get<double>(), 100 * error,
                  100 * sim["uncalibrated"]["error"].get<double>(), 100 * net["projection"]["error"].get<double>(),
                  100 * net["bandwidth_bound"]["fraction"].get<double>());
      EXPECT_LE(net["bandwidth_bound"]["fraction"].get<double>(), 1.05) << mode;
      if (point.args.find("--ranks-per-node 2") != std::string::npos) {  // the intra-node link as probed
        EXPECT_EQ(sim["intra_node"]["source"].get<std::string>().rfind("probed", 0), 0u) << mode << ": " << sim.dump();
        EXPECT_GT(sim["intra_node"]["bytes_per_s"].get<double>(), 4 * point.bits / 8) << mode << " (gloo)";
      }
      EXPECT_TRUE(net["bandwidth_bound"]["per_link"].get<bool>()) << mode;
      if (plain) {
        EXPECT_LT(std::abs(net["projection"]["error"].get<double>()), 0.20) << mode;
      }
      for (const auto& node : net["nodes"]) {
        EXPECT_TRUE(node["agrees"].get<bool>()) << mode << " node " << node["node"] << ": " << node.dump();
      }
    }
    return out;
  };
  const auto beyond = [](const std::vector<std::pair<std::string, double>>& runs) {
    return std::any_of(runs.begin(), runs.end(), [](const auto& r) { return std::abs(r.second) > 0.15; });
  };
  std::vector<double> errors;
  int reruns = 0;
  const auto kept = [&](std::string name) {  // a point's last result file, its name a file's
    std::replace_if(
        name.begin(), name.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '-');
    return tmp_.path() / (name + ".json");
  };
  for (const auto& point : grid) {
    SCOPED_TRACE(point.name + ": " + point.args);
    auto runs = run_point(point, "");
    // A run off by more than 15 % may be the measurement's noise (the steps and the probe share
    // two cores with every node): the point runs once more, and its second run is judged.
    if (beyond(runs)) {
      ++reruns;
      runs = run_point(point, " (rerun)");
    }
    if (fs::exists(result())) fs::copy_file(result(), kept(point.name), fs::copy_options::overwrite_existing);
    for (const auto& [mode, error] : runs) {
      errors.push_back(std::abs(error));
      EXPECT_LE(std::abs(error), 0.15) << point.name << " " << mode << ": off in two runs of the point";
    }
  }
  if (errors.empty()) return;
  std::sort(errors.begin(), errors.end());
  std::printf("grid: %zu runs, median |error| %.1f %% (goal 5 %%, fails above 7.5 %%), largest %.1f %% (goal 10 %%, "
              "fails above 15 %%); %d of %zu points run twice\n",
              errors.size(), 100 * errors[errors.size() / 2], 100 * errors.back(), reruns, grid.size());
  // The median is asserted as the largest is: its goal, and a failure half as far again beyond it.
  EXPECT_LE(errors[errors.size() / 2], 0.075) << "the grid's median error";
  expect_held_out_predicted(kept, [&](const std::string& name) {
    const auto point = std::find_if(grid.begin(), grid.end(), [&](const GridPoint& g) { return g.name == name; });
    ASSERT_NE(point, grid.end()) << name;
    run_point(*point, " (held out, again)");
    if (fs::exists(result())) fs::copy_file(result(), kept(name), fs::copy_options::overwrite_existing);
  });
}

// The regression gate on link-bound timings: two sweeps of the same point compare clean at a 5 %
// floor, and allreduce slowed by 30 % of its step (DPBENCH_STEP_DELAY, about -23 % of its
// throughput) is a regression. The floor rises to twice a ratio's spread, up to a cap of 15 %:
// these sweeps (16 timed steps) are shorter than the CI gate's cluster sweep (35 timed steps, every
// mode, cap 10 %); on 2 shared cores, in one CI run, their ratio's spread came out at 10.1 % and
// left the slowdown unjudged, and in another the first slowed comparison passed.
// 30 %, not less: on 2 shared cores a 15 % delay once measured -9.6 %.
// The sweeps run the two modes of the judged ratio (allreduce's throughput over ps's) only.
// As in scripts/ci_gate.sh, a verdict that is not the expected one is taken again from three
// fresh sweeps, and the second is judged.
TEST_F(EmulatedCluster, GateCatchesAThirtyPercentSlowdownAndPassesAnAaRerun) {
  const std::string sweep = fmt::format(
      "timeout -k 5 300 {} sweep --nodes 3 --links 200mbit --batch-sizes 384 "
      "--modes ps,allreduce --max-steps 20 --warmup-steps 4 --repetitions 2 --no-eval -q -o ",
      DPBENCH_BINARY);
  const std::string compare = fmt::format("{} compare --noise-cap 15 --noise-floor 5 ", DPBENCH_BINARY);
  const fs::path a = tmp_.path() / "a.json", b = tmp_.path() / "b.json", c = tmp_.path() / "c.json";
  struct Verdicts {
    Outcome aa, slow;
    bool expected() const {
      return aa.exit_code == 0 && slow.exit_code == 1 && slow.out.find("REGRESSION") != std::string::npos;
    }
  };
  const auto attempt = [&]() -> Verdicts {
    // A sweep that fails is reported in the A/A verdict's place, with its output.
    if (Outcome o = shell(sweep + a.string(), tmp_.path()); o.exit_code != 0) return {o, {}};
    if (Outcome o = shell(sweep + b.string(), tmp_.path()); o.exit_code != 0) return {o, {}};
    const auto doc = nlohmann::json::parse(slurp(a));
    double allreduce_step = 0;
    for (const auto& r : doc["runs"]) {
      if (r["mode"] == "allreduce" && r["repetition"] == 0) allreduce_step = r["step_time_s"]["p50"].get<double>();
    }
    if (allreduce_step <= 0) return {{-1, "", "no allreduce step time in " + a.string()}, {}};
    const std::string delay = fmt::format("DPBENCH_STEP_DELAY=mode=allreduce,ms={:.1f} ", 0.30 * allreduce_step * 1e3);
    if (Outcome o = shell(delay + sweep + c.string(), tmp_.path()); o.exit_code != 0) return {o, {}};
    return {shell(compare + a.string() + " " + b.string(), tmp_.path()),
            shell(compare + a.string() + " " + c.string(), tmp_.path())};
  };
  Verdicts v = attempt();
  if (!v.expected()) {
    std::printf(
        "gate: the first verdicts were not the expected ones (A/A exit %d, slowed exit %d); three sweeps again\n",
        v.aa.exit_code, v.slow.exit_code);
    v = attempt();
  }
  EXPECT_EQ(v.aa.exit_code, 0) << v.aa.out << v.aa.err;
  EXPECT_EQ(v.slow.exit_code, 1) << v.slow.out << v.slow.err;
  EXPECT_NE(v.slow.out.find("allreduce/ring / ps/collective"), std::string::npos) << v.slow.out;
  EXPECT_NE(v.slow.out.find("REGRESSION"), std::string::npos) << v.slow.out;
}

// A node's link goes down mid-run: the heartbeat notices within its 10 s, every process ends,
// the message names the node and its rank, and there is no result file.
TEST_F(EmulatedCluster, LinkDownEndsTheJobNamingTheNode) {
  const auto t0 = std::chrono::steady_clock::now();
  const Outcome o = run("--nodes 2 --link 1gbit --mode allreduce --max-steps 100000 --epochs 100",
                        "DPBENCH_FAULT=node=1,step=10,kind=link-down");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(o.exit_code, 0) << o.err;
  EXPECT_LT(seconds, 60.0);
  EXPECT_NE(o.err.find("node 1 ("), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("rank 1)"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(result()));
}

// One node at a tenth of the others' rate: the run completes, the probe sees the slow link, the
// ring runs at the slow link's pace (its simulation and its projection from the slowest link
// hold), and the per-rank breakdown shows every rank waiting on it.
TEST_F(EmulatedCluster, AStragglerLinkSetsThePace) {
  const Outcome o = run(
      "--nodes 3 --link 500mbit --link-of 2=50mbit --mode allreduce --max-steps 15 --warmup-steps 3 --batch-size 384");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  // stdout is not a terminal here: the summary is written once, not again by each simulation's
  // child process.
  std::size_t tables = 0;
  for (auto at = o.out.find("step time p50 / p90"); at != std::string::npos;
       at = o.out.find("step time p50 / p90", at + 1)) {
    ++tables;
  }
  EXPECT_EQ(tables, 1u) << o.out;
  const auto doc = nlohmann::json::parse(slurp(result()));
  const auto& links = doc["network"]["links"];
  EXPECT_EQ(links[2]["requested_rate"], "50mbit");
  EXPECT_NEAR(links[2]["probed_up_bytes_per_s"].get<double>() * 8, 50e6, 10e6);
  EXPECT_NEAR(links[0]["probed_up_bytes_per_s"].get<double>() * 8, 500e6, 100e6);
  const auto& net = doc["runs"][0]["network"];
  EXPECT_NEAR(net["link"]["bytes_per_s"].get<double>() * 8, 50e6, 10e6);
  // The 3 nodes' ranks share this host's cores: each rank's BLAS gets its share of them.
  if (std::getenv("OMP_NUM_THREADS") == nullptr) {
    EXPECT_EQ(doc["runs"][0]["blas_threads"].get<int>(), std::max(1u, std::thread::hardware_concurrency() / 3));
  }
  // The step as the schedule simulated on the probed links holds within the grid's 15 %; the
  // alpha-beta formula from the slowest link within 20 % (measured -7 to -16 %: it prices the
  // ring at the slow link's pace and leaves out the engine).
  const bool simulated = simulation_available();
  if (simulated) {
    EXPECT_LT(std::abs(net["simulation"]["error"].get<double>()), 0.15) << net["simulation"].dump();
    // What it was held against: the one run's 12 timed steps, their mean as the projection's.
    const auto& measured = net["simulation"]["measured"];
    EXPECT_EQ(measured["steps"], 12);
    EXPECT_EQ(measured["runs"], 1);
    EXPECT_DOUBLE_EQ(measured["step_s"].get<double>(), net["projection"]["measured_step_s"].get<double>());
    EXPECT_GT(measured["probe_repetitions"].get<int>(), 0);
    EXPECT_GT(measured["error_two_se"].get<double>(), measured["step_relative_se"].get<double>());
    // Its answer replays the 12 steps as they ran; the mean phases' step, played beside it, differs
    // by the waits for a rank that computed longer in a step: little where the slow link is most of it.
    EXPECT_EQ(net["simulation"]["replayed_steps"], 12);
    EXPECT_NEAR(net["simulation"]["mean_phases"]["simulated_step_s"].get<double>(),
                net["simulation"]["simulated_step_s"].get<double>(),
                0.1 * net["simulation"]["simulated_step_s"].get<double>());
  }
  EXPECT_LT(std::abs(net["projection"]["error"].get<double>()), 0.20);
  // Who waited: in the ring every rank waits on the slow link, so every rank's communication
  // takes about as long, and most of its step.
  const auto& ranks = net["per_rank"];
  ASSERT_EQ(ranks.size(), 3u);
  const double comm0 = ranks[0]["comm_s"].get<double>();
  for (const auto& r : ranks) {
    EXPECT_NEAR(r["comm_s"].get<double>(), comm0, 0.2 * comm0) << r.dump();
    EXPECT_GT(r["comm_s"].get<double>(), 0.7 * r["step_s"].get<double>()) << r.dump();
  }
  if (!simulated) GTEST_SKIP() << "the run's other checks passed; its simulation was not checked (no SimGrid)";
}

// torchrun on every node: one agent per node (--launcher torchrun) meets at node 0's rendezvous,
// c10d or etcd, and the job gives the parameters of 2 in-process ranks; every rank records its
// node, and each node's wire bytes agree with its counted bytes.
class EmulatedClusterTorchrun : public EmulatedCluster, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    EmulatedCluster::SetUp();
    if (IsSkipped()) return;
    if (std::system("command -v torchrun >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "torchrun is not installed (python3-torch; scripts/setup.sh --test installs it)";
    }
    if (GetParam() == "etcd" && (std::system("command -v etcd >/dev/null 2>&1") != 0 ||
                                 std::system("/usr/bin/python3 -c 'import etcd' >/dev/null 2>&1") != 0)) {
      GTEST_SKIP() << "etcd or python3-etcd is not installed (scripts/setup.sh --test installs them)";
    }
  }
  // 64-256-10: 19 K parameters, 76 KB per all-reduce, so that TCP/IP headers and the agents' own
  // rendezvous traffic are small beside the counted bytes.
  static constexpr const char* kModel =
      "--mode allreduce --data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 20";
  static std::string args() { return std::string("--launcher torchrun ") + kModel; }
  // The same job as 2 in-process ranks: its parameters.
  std::vector<float> local_params(const std::string& steps) {
    const std::string local = (tmp_.path() / "local").string();
    const Outcome l = shell(fmt::format("{} run {} --max-steps {} -q --comm local --ranks 2 --save-params {} --out {}",
                                        DPBENCH_BINARY, kModel, steps, local, (tmp_.path() / "local.json").string()),
                            tmp_.path());
    EXPECT_EQ(l.exit_code, 0) << l.err;
    return read_f32(local + "-allreduce.f32");
  }
};

TEST_P(EmulatedClusterTorchrun, AgentsOnEveryNodeMatchLocalRanks) {
  const std::string params = (tmp_.path() / "p").string();
  const Outcome o = run(fmt::format("--nodes 2 --link 1gbit --rdzv-backend {} {} --max-steps 20 --save-params {}",
                                    GetParam(), args(), params));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  EXPECT_EQ(doc["network"]["launcher"]["name"], "torchrun");
  EXPECT_EQ(doc["network"]["launcher"]["rdzv_backend"], GetParam());
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["comm"], "gloo");
  std::set<int> nodes;
  for (const auto& r : run["network"]["per_rank"]) nodes.insert(r["node"].get<int>());
  EXPECT_EQ(nodes, (std::set<int>{0, 1}));
  for (const auto& n : run["network"]["nodes"]) EXPECT_TRUE(n["agrees"].get<bool>()) << n.dump();
  const auto a = read_f32(params + "-allreduce.f32"), b = local_params("20");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  EXPECT_LT(relative_l2(a, b), 1e-5);
}

// A node dies mid-run (DPBENCH_FAULT kind=kill-agent: node 1's agent and rank killed at step 12)
// and comes back (the job starts its agent again, --max-restarts 1): the agents meet again, every
// rank resumes from the checkpoint of step 10, and the job ends with the parameters and per-step
// losses of an uninterrupted run, bit for bit, recording the restart. Node 1, not node 0: c10d
// keeps its store in node 0's agent (etcd's lives in etcd).
TEST_P(EmulatedClusterTorchrun, ANodeRestartResumesAcrossNodes) {
  auto job = [&](const std::string& name, const std::string& env) {
    const fs::path dir = tmp_.path() / name;
    const Outcome o = run(fmt::format("--nodes 2 --link 1gbit --rdzv-backend {} --max-restarts 1 {} --max-steps 25 "
                                      "--checkpoint-every 5 --checkpoint-dir {} --resume --save-params {}",
                                      GetParam(), args(), (dir / "ck").string(), (dir / "p").string()),
                          env);
    const auto doc = fs::exists(result()) ? nlohmann::json::parse(slurp(result())) : nlohmann::json();
    fs::remove(result());
    return std::make_pair(o, doc);
  };
  const auto [killed, k] = job("killed", "DPBENCH_FAULT=node=1,step=12,kind=kill-agent");
  ASSERT_EQ(killed.exit_code, 0) << killed.err;
  EXPECT_NE(killed.err.find("agent of node 1 ("), std::string::npos) << killed.err;
  const auto [whole, w] = job("whole", "");
  ASSERT_EQ(whole.exit_code, 0) << whole.err;
  EXPECT_EQ(read_f32((tmp_.path() / "killed" / "p-allreduce.f32").string()),
            read_f32((tmp_.path() / "whole" / "p-allreduce.f32").string()));
  const auto& kr = k["runs"][0];
  EXPECT_EQ(kr["quality"]["step_train_loss"], w["runs"][0]["quality"]["step_train_loss"]);
  EXPECT_EQ(kr["resumed_from_step"], 10);
  ASSERT_TRUE(kr.contains("elastic_restart")) << kr.dump();
  EXPECT_EQ(kr["elastic_restart"]["restart_count"], 1);
  EXPECT_EQ(kr["elastic_restart"]["failed_step"], 12);
  EXPECT_EQ(kr["elastic_restart"]["steps_redone"], 2);
  EXPECT_GT(kr["elastic_restart"]["recovery_s"].get<double>(), 0.0);
  EXPECT_FALSE(w["runs"][0].contains("elastic_restart"));
}

INSTANTIATE_TEST_SUITE_P(Rendezvous, EmulatedClusterTorchrun, ::testing::Values("c10d", "etcd"));

// Open MPI across nodes (--launcher mpirun): mpirun on the switch starts its daemons in the nodes,
// the ranks meet over MPI's TCP transport on the cluster's subnet, and each mode's parameters
// equal 2 in-process ranks' (relative L2 1e-5: MPI sums in its own order). Every rank records
// its node; wire bytes agree with counted bytes for ps and allreduce.
// Slurm on the emulated cluster (--launcher srun): slurmctld on node 0, a slurmd in every node,
// the job started with srun, each task reading Slurm's variables (no wrapper). Every mode gives
// the parameters of 3 in-process ranks, every rank records its node, each node's wire bytes agree
// with the schedule's, and no Slurm daemon outlives the run.
TEST_F(EmulatedCluster, SrunAcrossNodesMatchesLocalRanks) {
  for (const char* tool : {"srun", "sinfo", "slurmctld", "slurmd", "munged"}) {
    if (cluster::find_tool(tool).empty()) {
      GTEST_SKIP() << tool
                   << " is not installed (scripts/setup.sh --test installs slurmctld, slurmd, slurm-client, munge)";
    }
  }
  if (geteuid() != 0) GTEST_SKIP() << "--launcher srun needs root: Slurm's daemons drop supplementary groups";
  const std::string model =
      "--data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 30 --max-steps 20";
  const std::string params = (tmp_.path() / "p").string(), local = (tmp_.path() / "local").string();
  const Outcome o = run(fmt::format("--nodes 3 --link 1gbit --launcher srun {} --save-params {}", model, params));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const Outcome l = shell(fmt::format("{} run {} -q --comm local --ranks 3 --save-params {} --out {}", DPBENCH_BINARY,
                                      model, local, (tmp_.path() / "local.json").string()),
                          tmp_.path());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  EXPECT_EQ(doc["network"]["launcher"]["name"], "srun");
  EXPECT_EQ(doc["config"]["launcher"], "srun");
  ASSERT_EQ(doc["runs"].size(), 3u);
  for (const auto& run : doc["runs"]) {
    const std::string mode = run["mode"];
    std::vector<int> nodes;
    for (const auto& r : run["network"]["per_rank"]) nodes.push_back(r["node"].get<int>());
    EXPECT_EQ(nodes, (std::vector<int>{0, 1, 2})) << mode;
    for (const auto& n : run["network"]["nodes"]) EXPECT_TRUE(n["agrees"].get<bool>()) << mode << n.dump();
    const auto a = read_f32(params + "-" + mode + ".f32"), b = read_f32(local + "-" + mode + ".f32");
    ASSERT_EQ(a.size(), b.size()) << mode;
    ASSERT_FALSE(a.empty()) << mode;
    EXPECT_LT(relative_l2(a, b), 1e-5) << mode;
  }
  EXPECT_NE(std::system("pgrep -f /run/dpbench-slur[m]/ >/dev/null"), 0) << "a Slurm daemon of the run outlived it";
}

// --hierarchy node on 2 nodes x 2 ranks (allreduce over gloo and Open MPI under mpirun;
// sharded_ps and ps over gloo): each node's link carries 2(N-1)/N = 1x the gradient bytes per
// step each way by the schedule (allreduce's rings; sharded_ps's push and pull, (N-1)/N each), the
// wire agrees with the schedule (ps too), and the final parameters are the flat mode's of 4 in-process ranks (relative L2 1e-5:
// the sums run in another order). The step times are printed, not judged (this suite shares the
// cores; docs/measured-hierarchy-and-compression.md has the figures).
TEST_F(EmulatedCluster, NodeHierarchyPutsTwoNMinusOneOverNOfTheGradientOnEachLink) {
  const std::string model =
      "--data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 40 --max-steps 20";
  const std::string local = (tmp_.path() / "local").string();
  const Outcome l = shell(
      fmt::format("{} run {} -q --mode allreduce,sharded_ps,ps --comm local --ranks 4 --save-params {} "
                  "--out {}",
                  DPBENCH_BINARY, model, local, (tmp_.path() / "local.json").string()),
      tmp_.path());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  // One job runs every mode over gloo; Open MPI runs allreduce.
  std::vector<std::pair<std::string, std::string>> jobs = {{"env", "allreduce,sharded_ps,ps"}};
  if (mpi_built()) jobs.emplace_back("mpirun --comm mpi", "allreduce");
  for (const auto& [launcher, modes] : jobs) {
    SCOPED_TRACE(launcher);
    const std::string params = (tmp_.path() / "p").string();
    const Outcome o = run(fmt::format("--nodes 2 --ranks-per-node 2 --link 200mbit --launcher {} --mode {} "
                                      "--hierarchy node {} --save-params {}",
                                      launcher, modes, model, params));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    const auto doc = nlohmann::json::parse(slurp(result()));
    ASSERT_EQ(doc["runs"].size(), launcher == "env" ? 3u : 1u);
    for (const auto& run : doc["runs"]) {
      const std::string mode = run["mode"];
      SCOPED_TRACE(mode);
      EXPECT_EQ(run["config"]["hierarchy"], "node");
      const double gradient = 4.0 * run["num_params"].get<double>();
      for (const auto& n : run["network"]["nodes"]) {
        // ps's links also carry the batch's scatter and gather (the reduce and broadcast's
        // bytes: HierarchicalReduce.SumsOnRankZeroAndBroadcastsFromIt).
        if (mode != "ps") {
          EXPECT_DOUBLE_EQ(n["schedule_sent_bytes_per_step"].get<double>(), gradient) << n.dump();
          EXPECT_DOUBLE_EQ(n["schedule_received_bytes_per_step"].get<double>(), gradient) << n.dump();
        }
        EXPECT_TRUE(n["agrees"].get<bool>()) << n.dump();
      }
      // The intra-node link the simulation used was probed by this run's engine (gloo, Open MPI),
      // faster than the node's link under gloo (Open MPI's busy-polling ranks, four on two cores,
      // may wait out each other's time slices in the ping-pong: no bound there).
      const auto& intra = run["network"]["simulation"]["intra_node"];
      EXPECT_EQ(intra["source"].get<std::string>().rfind("probed", 0), 0u) << intra.dump();
      if (launcher == "env") EXPECT_GT(intra["bytes_per_s"].get<double>(), 4 * 200e6 / 8) << intra.dump();
      std::printf("hierarchy (%s, %s): step %.1f ms, simulated %.1f ms, intra-node link probed at %.2f GB/s\n",
                  mode.c_str(), launcher.c_str(), 1e3 * run["step_time_s"]["p50"].get<double>(),
                  1e3 * run["network"]["simulation"]["simulated_step_s"].get<double>(),
                  intra["bytes_per_s"].get<double>() / 1e9);
      const auto a = read_f32(params + "-" + mode + ".f32");
      const auto b = read_f32(local + "-" + mode + ".f32");
      ASSERT_EQ(a.size(), b.size());
      ASSERT_FALSE(a.empty());
      EXPECT_LT(relative_l2(a, b), 1e-5);
    }
  }
  if (!mpi_built()) GTEST_SKIP() << "the env job passed; the mpirun job did not run (this build has no MPI)";
}

// --comm-hook fp16 on 2 nodes: each node's link carries half the gradient's bytes per step (the
// flat ring's 2(p-1)/p = 1x, in 16 bits), by the schedule and on the wire, and the final loss is
// the uncompressed hook's within 1e-3.
TEST_F(EmulatedCluster, Fp16HookHalvesTheBytesOnEachLink) {
  const std::string model =
      "--data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 40 --max-steps 20";
  const Outcome o = run(fmt::format("--nodes 2 --link 200mbit --mode allreduce --comm-hook fp16 {}", model));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  ASSERT_EQ(doc["runs"].size(), 1u);
  const auto& run = doc["runs"][0];
  EXPECT_EQ(run["config"]["comm_hook"], "fp16");
  const double half = 2.0 * run["num_params"].get<double>();
  for (const auto& n : run["network"]["nodes"]) {
    EXPECT_NEAR(n["schedule_sent_bytes_per_step"].get<double>(), half, 16.0) << n.dump();
    EXPECT_TRUE(n["agrees"].get<bool>()) << n.dump();
  }
  const Outcome l = shell(fmt::format("{} run {} -q --mode allreduce --comm local --ranks 2 --no-eval --out {}",
                                      DPBENCH_BINARY, model, (tmp_.path() / "plain.json").string()),
                          tmp_.path());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  const auto plain = nlohmann::json::parse(slurp(tmp_.path() / "plain.json"));
  const double a = run["quality"]["final_train_loss"].get<double>();
  const double b = plain["runs"][0]["quality"]["final_train_loss"].get<double>();
  EXPECT_NEAR(a, b, 1e-3 * b);
}

// A sweep of the allreduce mode alone on the emulated cluster (no mode takes --transport, so the
// sweep passes none) over --comm-hooks allreduce,fp16,powersgd:2: one job per hook, each run
// recording its hook, and every node's wire bytes agreeing with the hook's schedule.
TEST_F(EmulatedCluster, SweepOfAllreduceAloneRunsWithItsHooks) {
  const Outcome o = shell(
      fmt::format("timeout -k 5 300 {} sweep --nodes 2 --links 1gbit --modes allreduce "
                  "--comm-hooks allreduce,fp16,powersgd:2 --data synthetic --input 64 "
                  "--synthetic-samples 600 --hidden 64 --batch-sizes 40 --max-steps 6 --warmup-steps 2 "
                  "--repetitions 1 --no-eval -q -o {}",
                  DPBENCH_BINARY, result().string()),
      tmp_.path());
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  ASSERT_EQ(doc["runs"].size(), 3u);
  std::vector<std::string> hooks;
  for (const auto& run : doc["runs"]) {
    EXPECT_EQ(run.value("status", std::string("ok")), "ok") << run.dump();
    hooks.push_back(run["config"]["comm_hook"].get<std::string>());
    for (const auto& n : run["network"]["nodes"])
      EXPECT_TRUE(n["agrees"].get<bool>()) << hooks.back() << ": " << n.dump();
  }
  EXPECT_EQ(hooks, (std::vector<std::string>{"allreduce", "fp16", "powersgd:2"}));
  EXPECT_EQ(doc["config"]["sweep"]["comm_hooks"].size(), 3u);
  // Bytes per step on a node's link: fp16 half the plain hook's; PowerSGD far fewer.
  auto sent = [&](std::size_t i) {
    return doc["runs"][i]["network"]["nodes"][0]["schedule_sent_bytes_per_step"].get<double>();
  };
  EXPECT_NEAR(sent(1), sent(0) / 2.0, 16.0);
  EXPECT_LT(sent(2), sent(0) / 4.0);
  if (!simulation_available()) GTEST_SKIP() << "the sweep ran; its simulation part needs SimGrid (libsimgrid-dev)";
  // The fp16 and PowerSGD hooks' all-reduces (the project's ring, blocking on the communication
  // thread) are timed in the steps and calibrate the simulation, the probe's fit beside; DDP's own
  // all-reduces are not timed: the plain hook's is the probe's.
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& sim = doc["runs"][i]["network"]["simulation"];
    EXPECT_EQ(sim.contains("probe_calibrated"), i > 0) << hooks[i] << ": " << sim.dump();
    if (i == 0) continue;
    const auto& fit = sim["calibration"]["efficiency"]["allreduce"];
    EXPECT_GT(fit["efficiency"].get<double>(), 0.0) << hooks[i];
    EXPECT_GT(fit["measured_s"].get<double>(), 0.0) << hooks[i];
    for (const auto& c : sim["calibration"]["collectives"]) EXPECT_EQ(c["collective"], "allreduce") << hooks[i];
  }
}

// --zipf-alphas: one job per index law (0: uniform), each run's click logs its own, the axis in
// the sweep's config; the hotter law touches fewer distinct rows, so sharded_ps --sparse-grad
// sends fewer bytes; each run's sparse step (ps's root too) is simulated (its rows from the
// measured bytes), and its schedule's bytes agree with the wire's on every node. allreduce's
// simulation is calibrated on its steps' own collectives, its probe's fit recorded beside.
TEST_F(EmulatedCluster, SweepOverZipfAlphasRunsEachIndexLaw) {
  const Outcome o = shell(
      fmt::format("timeout -k 5 300 {} sweep --nodes 2 --links 1gbit --workloads dlrm --modes sharded_ps,ps,allreduce "
                  "--sparse-grad --zipf-alphas 0,1.3 --tables 2 --rows 4000 --lookups 8 --batch-sizes 128 "
                  "--max-steps 8 --warmup-steps 2 --repetitions 1 --no-eval -q -o {}",
                  DPBENCH_BINARY, result().string()),
      tmp_.path());
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  ASSERT_EQ(doc["runs"].size(), 6u);
  EXPECT_EQ(doc["config"]["sweep"]["zipf_alphas"], nlohmann::json::array({0.0, 1.3}));
  std::map<std::pair<std::string, double>, double> sent;  // (mode, alpha) -> rank 0's bytes per step
  for (const auto& run : doc["runs"]) {
    ASSERT_EQ(run.value("status", std::string("ok")), "ok") << run.dump();
    const double alpha = run["config"]["dlrm"]["zipf_alpha"].get<double>();
    const auto dataset = run["dataset"].get<std::string>();
    EXPECT_EQ(dataset.find("zipf") != std::string::npos, alpha > 0) << dataset;
    if (alpha > 0) EXPECT_NE(dataset.find("zipf 1.3"), std::string::npos) << dataset;
    sent[{run["mode"].get<std::string>(), alpha}] = run["comm_bytes_per_step"]["per_rank"][0]["sent"].get<double>();
    for (const auto& n : run["network"]["nodes"]) EXPECT_TRUE(n["agrees"].get<bool>()) << run["mode"] << n.dump();
  }
  ASSERT_EQ(sent.size(), 6u);
  for (const char* mode : {"sharded_ps", "ps"}) {
    const double hot = sent[{mode, 1.3}], uniform = sent[{mode, 0.0}];
    EXPECT_LT(hot, 0.8 * uniform) << mode << ": Zipf(1.3) touches fewer distinct rows";
  }
  if (!simulation_available()) GTEST_SKIP() << "the sweep ran; its simulation part needs SimGrid (libsimgrid-dev)";
  for (const auto& run : doc["runs"]) {
    const auto& sim = run["network"]["simulation"];
    EXPECT_GT(sim.value("simulated_step_s", 0.0), 0.0) << sim.dump();
    const bool in_step = run["mode"] == "allreduce";
    if (in_step) {  // the dense all-reduce, then the counts', the ids' and the rows' all-gathers
      const auto& steps = sim["calibration"]["collectives"];
      ASSERT_EQ(steps.size(), 4u) << sim["calibration"].dump();
      EXPECT_EQ(steps[0]["collective"], "allreduce");
      EXPECT_EQ(steps[1]["floats"], 2);  // one float a rank
      EXPECT_LT(steps[2]["floats"].get<double>(), steps[3]["floats"].get<double>());
      for (const auto& c : steps) EXPECT_GT(c["measured_s"].get<double>(), 0.0) << c.dump();
      for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(steps[i]["collective"], "allgather");
      EXPECT_GE(sim["calibration"]["per_message"]["allgather"]["overhead_s"].get<double>(), 0.0);
      EXPECT_TRUE(sim["probe_calibrated"].contains("error")) << sim.dump();
    }
    // Each per-message collective's second half is probed at kLargeProbeFactor x its size and
    // fitted as a cost per byte (train/engine_probe.hpp).
    std::map<std::string, std::vector<std::size_t>> floats;
    int sloped = 0;
    for (const auto& c : (in_step ? sim["probe_calibrated"] : sim)["calibration"]["collectives"]) {
      if (c.contains("overhead_s") || c.contains("overhead_per_byte_s"))
        floats[c["collective"].get<std::string>()].push_back(c["floats"].get<std::size_t>());
      sloped += c.contains("overhead_per_byte_s") ? 1 : 0;
    }
    ASSERT_FALSE(floats.empty()) << run["mode"];
    for (const auto& [kind, f] : floats) {
      EXPECT_EQ(f.back(), std::min(kLargeProbeFactor * f.front(), kMaxProbeFloats)) << run["mode"] << " " << kind;
      EXPECT_EQ(f[f.size() / 2 - 1], f.front()) << run["mode"] << " " << kind;
    }
    EXPECT_GT(sloped, 0) << run["mode"];
  }
}

// A sweep over --ranks-per-node 1,2 with --hierarchies node (ps, whose pre-reduction is the
// newest): one job per ranks-per-node value, each run's cluster block and world size its own,
// the hierarchy recorded, and every node's wire bytes agreeing with the schedule.
TEST_F(EmulatedCluster, SweepOverRanksPerNodeAndHierarchies) {
  const Outcome o = shell(
      fmt::format("timeout -k 5 300 {} sweep --nodes 2 --ranks-per-node 1,2 --links 1gbit --modes ps "
                  "--hierarchies node --data synthetic --input 64 --synthetic-samples 600 --hidden 64 "
                  "--batch-sizes 40 --max-steps 6 --warmup-steps 2 --repetitions 1 --no-eval -q -o {}",
                  DPBENCH_BINARY, result().string()),
      tmp_.path());
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  ASSERT_EQ(doc["runs"].size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& run = doc["runs"][i];
    EXPECT_EQ(run.value("status", std::string("ok")), "ok") << run.dump();
    EXPECT_EQ(run["cluster"]["ranks_per_node"].get<int>(), static_cast<int>(i) + 1);
    EXPECT_EQ(run["world_size"].get<int>(), 2 * (static_cast<int>(i) + 1));
    EXPECT_EQ(run["config"]["hierarchy"], "node");
    for (const auto& n : run["network"]["nodes"]) EXPECT_TRUE(n["agrees"].get<bool>()) << n.dump();
  }
  EXPECT_EQ(doc["config"]["sweep"]["ranks_per_node"], (std::vector<int>{1, 2}));
  EXPECT_EQ(doc["config"]["sweep"]["hierarchies"], (std::vector<std::string>{"node"}));
  // Without --nodes the hierarchies have no nodes to follow: one line, exit 2.
  const Outcome bad = shell(fmt::format("{} sweep --hierarchies node --modes ps -o {}", DPBENCH_BINARY,
                                        (tmp_.path() / "bad.json").string()),
                            tmp_.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--hierarchies"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp_.path() / "bad.json"));
}

TEST_F(EmulatedCluster, MpirunAcrossNodesMatchesLocalRanks) {
  if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  ASSERT_EQ(std::system("command -v mpirun >/dev/null"), 0) << "built with MPI but mpirun is not on PATH";
  const std::string model =
      "--data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 20 --max-steps 20";
  const std::string params = (tmp_.path() / "p").string(), local = (tmp_.path() / "local").string();
  const Outcome o = run(fmt::format("--nodes 2 --link 1gbit --launcher mpirun {} --save-params {}", model, params));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  EXPECT_EQ(doc["network"]["launcher"]["name"], "mpirun");
  ASSERT_EQ(doc["runs"].size(), 3u);
  const Outcome l = shell(fmt::format("{} run {} -q --comm local --ranks 2 --save-params {} --out {}", DPBENCH_BINARY,
                                      model, local, (tmp_.path() / "local.json").string()),
                          tmp_.path());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  for (const auto& run : doc["runs"]) {
    const std::string mode = run["mode"];
    EXPECT_EQ(run["comm"], "mpi") << mode;
    std::set<int> nodes;
    for (const auto& r : run["network"]["per_rank"]) nodes.insert(r["node"].get<int>());
    EXPECT_EQ(nodes, (std::set<int>{0, 1})) << mode;
    for (const auto& n : run["network"]["nodes"]) {
      // sharded_ps's counts are the ring's reduce-scatter; Open MPI chose another algorithm that
      // moved ~1.5x on one side at 2 ranks (measured 1.507): reported, as a mismatch, not hidden.
      if (mode == "sharded_ps") {
        EXPECT_GE(n["wire_over_counted_sent"].get<double>(), 0.95) << n.dump();
      } else {
        EXPECT_TRUE(n["agrees"].get<bool>()) << mode << n.dump();
      }
    }
    const auto a = read_f32(params + "-" + mode + ".f32"), b = read_f32(local + "-" + mode + ".f32");
    ASSERT_EQ(a.size(), b.size()) << mode;
    ASSERT_FALSE(a.empty()) << mode;
    EXPECT_LT(relative_l2(a, b), 1e-5) << mode;
  }
}

// PyTorch's explicit form across nodes (--launcher tcp, --launcher file): each rank a process on
// its own node given --init-method tcp://node0:PORT (or file:///run/..., a file every node sees,
// where rank 0 writes the address it listens on) and --rank (the world size is the cluster's),
// meeting over gloo; each mode's parameters equal 3 in-process ranks' (relative L2 1e-5: gloo sums
// in its own order), every rank records its own node, and each node's wire bytes agree with the
// counted ones.
class EmulatedClusterInitMethod : public EmulatedCluster, public ::testing::WithParamInterface<std::string> {};

TEST_P(EmulatedClusterInitMethod, AcrossNodesMatchesLocalRanks) {
  if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
  const std::string launcher = GetParam();
  const std::string model =
      "--data synthetic --input 64 --synthetic-samples 600 --hidden 256 --epochs 1 --batch-size 30 --max-steps 20";
  const std::string params = (tmp_.path() / "p").string(), local = (tmp_.path() / "local").string();
  const Outcome o = run(
      fmt::format("--nodes 3 --link 1gbit --launcher {} {} --save-params {}", launcher, model, params));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto doc = nlohmann::json::parse(slurp(result()));
  EXPECT_EQ(doc["network"]["launcher"]["name"], launcher);
  EXPECT_EQ(doc["network"]["launcher"]["init_method"].get<std::string>().rfind(launcher + "://", 0), 0u);
  EXPECT_EQ(doc["config"]["launcher"], launcher);
  ASSERT_EQ(doc["runs"].size(), 3u);
  const Outcome l = shell(fmt::format("{} run {} -q --comm local --ranks 3 --save-params {} --out {}", DPBENCH_BINARY,
                                      model, local, (tmp_.path() / "local.json").string()),
                          tmp_.path());
  ASSERT_EQ(l.exit_code, 0) << l.err;
  for (const auto& run : doc["runs"]) {
    const std::string mode = run["mode"];
    EXPECT_EQ(run["comm"], "gloo") << mode;
    std::set<int> nodes;
    for (const auto& r : run["network"]["per_rank"]) nodes.insert(r["node"].get<int>());
    EXPECT_EQ(nodes, (std::set<int>{0, 1, 2})) << mode;
    for (const auto& n : run["network"]["nodes"]) EXPECT_TRUE(n["agrees"].get<bool>()) << mode << n.dump();
    const auto a = read_f32(params + "-" + mode + ".f32"), b = read_f32(local + "-" + mode + ".f32");
    ASSERT_EQ(a.size(), b.size()) << mode;
    ASSERT_FALSE(a.empty()) << mode;
    EXPECT_LT(relative_l2(a, b), 1e-5) << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(EmulatedCluster, EmulatedClusterInitMethod, ::testing::Values("tcp", "file"),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// SIGINT and SIGKILL of the command leave no process of the job; its namespaces go with them.
// For every launcher: the env launcher's ranks, torchrun's agents and their workers, mpirun and
// its daemons.
class EmulatedClusterSignals : public EmulatedCluster, public ::testing::WithParamInterface<std::string> {
 protected:
  void SetUp() override {
    EmulatedCluster::SetUp();
    if (IsSkipped()) return;
    if (GetParam() == "torchrun" && std::system("command -v torchrun >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "torchrun is not installed (python3-torch; scripts/setup.sh --test installs it)";
    }
    if (GetParam() == "mpirun" && !mpi_built()) {
      GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
    }
    if (GetParam() == "srun" && (cluster::find_tool("slurmd").empty() || cluster::find_tool("munged").empty())) {
      GTEST_SKIP()
          << "Slurm is not installed (scripts/setup.sh --test installs slurmctld, slurmd, slurm-client, munge)";
    }
    if (GetParam() == "srun" && geteuid() != 0) GTEST_SKIP() << "--launcher srun needs root";
  }
};

TEST_P(EmulatedClusterSignals, SignalsLeaveNothingBehind) {
  const std::string launcher = GetParam();
  for (const int sig : {SIGINT, SIGKILL}) {
    SCOPED_TRACE(sig == SIGINT ? "SIGINT" : "SIGKILL");
    const std::string marker = (tmp_.path() / fmt::format("signal-{}.json", sig)).string();
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl(DPBENCH_BINARY, DPBENCH_BINARY, "run", "--nodes", "2", "--link", "100mbit", "--launcher", launcher.c_str(),
            "--mode", "ps", "--epochs", "100", "-q", "--no-eval", "--out", marker.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    // "[-]-out" matches the job's "--out" but not this shell's own command line.
    const std::string count = fmt::format("pgrep -f -- '[-]-out {}' >/dev/null", marker);
    // Until the ranks run (the first stage and the inner one, then two ranks, or two agents and
    // their ranks, or the PID namespace's parent, mpirun and two ranks, or the PID namespace's
    // parent, srun and its helper and two ranks).
    const int running = launcher == "torchrun" ? 6 : launcher == "mpirun" ? 6 : launcher == "srun" ? 7 : 4;
    for (int i = 0;
         i < 200 &&
         shell(fmt::format("test $(pgrep -f -c -- '[-]-out {}') -ge {}", marker, running), tmp_.path()).exit_code != 0;
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    if (launcher == "mpirun" || launcher == "srun") {
      // Their daemons can outlive the launcher (orted retries a lost mpirun, slurmstepd detaches):
      // the job runs in a PID namespace of its own, which ends with its first process.
      const Outcome ns = shell(
          fmt::format("for p in $(pgrep -f -- '[-]-out {}'); do readlink /proc/$p/ns/pid; done | sort -u", marker),
          tmp_.path());
      const std::string self = fs::read_symlink("/proc/self/ns/pid").string();
      EXPECT_NE(ns.out.find("pid:["), std::string::npos) << ns.out;
      EXPECT_EQ(std::count(ns.out.begin(), ns.out.end(), '\n'), 2) << "the test's and the job's: " << ns.out;
      EXPECT_NE(ns.out.find(self), std::string::npos) << ns.out;
    }
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    if (sig == SIGINT) {
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
    }
    bool gone = false;
    // mpirun's daemons do not carry the job's arguments; they name the job's remote shell.
    const std::string daemons = "pgrep -f '[o]rted.*dpbench-mpi-agent|/run/dpbench-slur[m]/|[s]lurmstepd' >/dev/null";
    for (int i = 0; i < 100 && !gone; ++i) {
      gone = std::system(count.c_str()) != 0 && std::system(daemons.c_str()) != 0;
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_TRUE(gone) << "processes of the job (ranks, agents, orted) are still running after 10 s";
    EXPECT_FALSE(fs::exists(marker));
    EXPECT_NE(shell("ip -o link show | grep -q 'dpb[0-9]*-'", tmp_.path()).exit_code, 0)
        << "a cluster interface is in this namespace";
  }
}

INSTANTIATE_TEST_SUITE_P(Launchers, EmulatedClusterSignals, ::testing::Values("env", "torchrun", "mpirun", "srun"));

// With user namespaces disabled and no capabilities, the command says so in one line, exit 2.
TEST(EmulatedClusterRefused, WithoutNamespacesOrCapabilitiesExitsTwo) {
  TempDir tmp;
  if (shell("command -v unshare && command -v setpriv", tmp.path()).exit_code != 0) {
    GTEST_SKIP() << "unshare or setpriv (util-linux) is missing";
  }
  // A user namespace in which no further one may be made, and a process with no capabilities.
  const Outcome o = shell(
      fmt::format(
          "unshare --user --map-root-user sh -c 'echo 0 > /proc/sys/user/max_user_namespaces && exec setpriv "
          "--securebits +noroot,+noroot_locked --bounding-set -all --inh-caps -all {} run --nodes 2 --link 1gbit "
          "--out {}'",
          DPBENCH_BINARY, (tmp.path() / "r.json").string()),
      tmp.path());
  if (o.err.rfind("dpbench:", 0) != 0) {  // the shell, unshare or setpriv refused, not dpbench
    GTEST_SKIP() << "cannot limit user namespaces here: " << o.err;
  }
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_NE(o.err.find("cannot host an emulated cluster"), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(tmp.path() / "r.json"));
}

TEST(EmulatedClusterOptions, BadInputIsOneLineAndExitTwo) {
  TempDir tmp;
  for (const char* args :
       {"--link 1gbit", "--nodes 1 --link 1gbit", "--nodes 2", "--nodes 2 --link fast",
        "--nodes 2 --link 1gbit --link-of 5=1gbit", "--nodes 2 --link 1gbit --comm local",
        "--nodes 2 --link 1gbit --ranks 3", "--launcher torchrun", "--nodes 2 --link 1gbit --launcher slurm",
        "--nodes 2 --link 1gbit --rdzv-backend etcd", "--nodes 2 --link 1gbit --launcher mpirun --comm gloo",
        "--nodes 2 --link 1gbit --launcher torchrun --rdzv-backend zookeeper",
        "--nodes 2 --link 1gbit --launcher torchrun --max-restarts 11"}) {
    const Outcome o = shell(fmt::format("{} run {} --out {}", DPBENCH_BINARY, args, (tmp.path() / "r.json").string()),
                            tmp.path());
    EXPECT_EQ(o.exit_code, 2) << args << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << args << "\n" << o.err;
    EXPECT_FALSE(fs::exists(tmp.path() / "r.json")) << args;
  }
  for (const char* args : {"--links 1gbit", "--launcher mpirun", "--nodes 2 --links 1gbit --launcher slurm",
                           "--nodes 2 --links 1gbit --launcher mpirun --comms gloo"}) {
    const Outcome o = shell(fmt::format("{} sweep {} --out {}", DPBENCH_BINARY, args, (tmp.path() / "s.json").string()),
                            tmp.path());
    EXPECT_EQ(o.exit_code, 2) << "sweep " << args << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "sweep " << args << "\n" << o.err;
    EXPECT_FALSE(fs::exists(tmp.path() / "s.json")) << args;
  }
}

// A mode's checks that depend only on the options come before the cluster: with no `ip`, no
// `unshare` and no tc on PATH, the answer is still the option's error, so nothing was built.
TEST(EmulatedClusterOptions, ModeErrorsComeBeforeAnyNamespaceOrProcess) {
  TempDir tmp;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--nodes 3 --link 1gbit", "--batch-size 256: not divisible by --ranks 3"},
      {"--nodes 2 --ranks-per-node 3 --link 1gbit --mode sharded_ps", "not divisible by --ranks 6"},
      {"--nodes 2 --link 1gbit --mode sharded_ps --servers 3", "--servers 3"},
      {"--nodes 2 --link 1gbit --mode ps --transport ring", "--transport ring"},
  };
  for (const auto& [args, message] : cases) {
    const Outcome o = shell(fmt::format("PATH=/nonexistent {} run {} --out {}", DPBENCH_BINARY, args,
                                        (tmp.path() / "r.json").string()),
                            tmp.path());
    EXPECT_EQ(o.exit_code, 2) << args << "\n" << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos) << args << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << args << "\n" << o.err;
    EXPECT_FALSE(fs::exists(tmp.path() / "r.json")) << args;
  }
}

}  // namespace
}  // namespace dpbench
