// Tests of `dpbench sweep` (grid expansion, failed points recorded, progress on stderr) and of
// the alpha-beta projection (the formulas, calibration from 1-rank runs, the crossover).
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "train/alpha_beta_model.hpp"
#include "registry/strategies.hpp"
#include "record/blas_core.hpp"
#include "harness/harness.hpp"
#include "bench/app/project_command.hpp"
#include "analysis/held_out.hpp"
#include "analysis/host_profile.hpp"
#include "bench/app/profile_command.hpp"
#include "analysis/simulated_projection.hpp"
#include "record/result_json.hpp"
#include "bench/app/sweep_command.hpp"
#include "core/error.hpp"
#include "sim/simulate.hpp"
#include "tests/fixtures.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

TEST(Sweep, GridExpandsTransportsForPsOnly) {
  SweepOptions o;
  o.modes = {Mode::ps, Mode::allreduce};
  o.transports = {Transport::collective, Transport::p2p};
  o.ranks = {1, 2, 4};
  o.batch_sizes = {64, 256};
  o.num_workers = {0, 2};
  o.repetitions = 2;
  // 3 ranks x 2 batches x 2 workers x (2 ps transports + 1 allreduce) x 2 repetitions
  const auto points = sweep_points(o);
  ASSERT_EQ(points.size(), 3u * 2 * 2 * 3 * 2);
  int p2p = 0, allreduce = 0;
  for (const auto& p : points) {
    if (p.config.mode == Mode::ps && p.config.transport == Transport::p2p) ++p2p;
    if (p.config.mode == Mode::allreduce) ++allreduce;
  }
  EXPECT_EQ(p2p, 24);
  EXPECT_EQ(allreduce, 24);
  EXPECT_EQ(points.front().config.world_size, 1);
  EXPECT_EQ(points.back().config.world_size, 4);
  // Modes alternate inside each repetition: ps/collective, ps/p2p, allreduce, then again.
  EXPECT_EQ(points[0].config.transport, Transport::collective);
  EXPECT_EQ(points[1].config.transport, Transport::p2p);
  EXPECT_EQ(points[2].config.mode, Mode::allreduce);
  EXPECT_EQ(points[2].repetition, 0);
  EXPECT_EQ(points[3].config.mode, Mode::ps);
  EXPECT_EQ(points[3].repetition, 1);
}

// The grid's axes take run's singular names too (docs/cli.md, "Sweep axes"): --mode, --comm,
// --batch-size, --workload name the axes --modes, --comms, --batch-sizes, --workloads.
TEST(Sweep, RunsSingularNamesTheSameAxes) {
  TempDir tmp;
  const fs::path out = tmp.path() / "sweep.json";
  const Outcome o = shell(std::string(DPBENCH_BINARY) +
                              " sweep --device cpu --data synthetic --input 8 --synthetic-samples 600 --hidden 8 "
                              "--mode ps,allreduce --comm local --workload mlp --ranks 2 --batch-size 16,32 "
                              "--num-workers 0 --max-steps 3 --warmup-steps 1 --no-eval -q -o " +
                              out.string(),
                          tmp.path());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto doc = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(doc["config"]["sweep"]["modes"], (std::vector<std::string>{"ps", "allreduce"}));
  EXPECT_EQ(doc["config"]["sweep"]["comms"], (std::vector<std::string>{"local"}));
  EXPECT_EQ(doc["config"]["sweep"]["batch_sizes"], (std::vector<int>{16, 32}));
  EXPECT_EQ(doc["runs"].size(), 4u);  // 2 modes x 2 batch sizes
}

// The variant axes cross: a hook runs under the staleness bound 0 alone, and each hook or bound
// another strategy owns is that strategy's only (5 variants, not 3 modes x 2 hooks x 2 bounds).
TEST(Sweep, HooksAndStalenessBoundsRunOnlyUnderTheModeThatOwnsThem) {
  SweepOptions o;
  o.modes = {Mode::ps, Mode::sharded_ps, Mode::allreduce};
  o.ranks = {2};
  o.batch_sizes = {64};
  o.num_workers = {0};
  o.comm_hooks = {CommHook{}, parse_comm_hook("fp16")};
  o.stalenesses = {0, 2};
  std::vector<std::string> got;
  for (const auto& p : sweep_points(o)) {
    got.push_back(
        fmt::format("{}/{}/{}", p.config.mode, hook_name(p.config.allreduce.comm_hook), p.config.sharded_ps.staleness));
  }
  EXPECT_EQ(got, (std::vector<std::string>{"ps/allreduce/0", "sharded_ps/allreduce/0", "sharded_ps/allreduce/2",
                                           "allreduce/allreduce/0", "allreduce/fp16/0"}));
}

// run's singular names of the variant axes are the axes too, one value an axis of one: --staleness
// 0,2 adds sharded_ps's bound 2 beside every mode at 0; a lone --comm-hook fp16 runs allreduce
// alone. No sweep option excludes another, and the in-process sweep refuses what needs nodes.
TEST(Sweep, VariantAxesTakeRunsSingularNamesAndOneConvention) {
  TempDir tmp;
  const std::string common = std::string(DPBENCH_BINARY) +
                             " sweep --device cpu --data synthetic --input 8 --synthetic-samples 600 --hidden 8 "
                             "--ranks 2 --batch-size 16 --num-workers 0 --max-steps 3 --warmup-steps 1 --no-eval -q ";
  const fs::path out = tmp.path() / "sweep.json";
  Outcome o = shell(common + "--mode ps,sharded_ps --staleness 0,2 -o " + out.string(), tmp.path());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  auto doc = nlohmann::json::parse(slurp(out));
  EXPECT_EQ(doc["config"]["sweep"]["stalenesses"], (std::vector<int>{0, 2}));
  ASSERT_EQ(doc["runs"].size(), 3u);
  EXPECT_EQ(doc["runs"][2]["mode"], "sharded_ps");
  EXPECT_EQ(doc["runs"][2]["config"]["staleness"], 2);
  EXPECT_EQ(doc["runs"][0]["config"]["staleness"], 0);

  o = shell(common + "--mode ps,allreduce --comm-hook fp16 -o " + out.string(), tmp.path());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  doc = nlohmann::json::parse(slurp(out));
  ASSERT_EQ(doc["runs"].size(), 1u);
  EXPECT_EQ(doc["runs"][0]["mode"], "allreduce");
  EXPECT_EQ(doc["runs"][0]["config"]["comm_hook"], "fp16");

  o = shell(common + "--mode ps --staleness 2 -o " + out.string(), tmp.path());
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("--stalenesses 2: only sharded_ps has"), std::string::npos) << o.err;
  // Without --nodes, one alpha is the click logs' law for every point, recorded in the config.
  o = shell(std::string(DPBENCH_BINARY) +
                " sweep --workload dlrm --sparse-grad --zipf-alpha 1.05 --mode sharded_ps --ranks 2 --batch-size 64 "
                "--num-workers 0 --max-steps 3 --warmup-steps 1 --no-eval -q -o " +
                out.string(),
            tmp.path());
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_DOUBLE_EQ(nlohmann::json::parse(slurp(out))["config"]["dlrm"]["zipf_alpha"].get<double>(), 1.05);
  o = shell(std::string(DPBENCH_BINARY) + " sweep --workload dlrm --zipf-alpha 1.05,2 -o " + out.string(), tmp.path());
  EXPECT_EQ(o.exit_code, 2);
  EXPECT_NE(o.err.find("more than one --zipf-alphas value"), std::string::npos) << o.err;

  const Outcome help = shell(std::string(DPBENCH_BINARY) + " sweep --help", tmp.path());
  ASSERT_EQ(help.exit_code, 0);
  EXPECT_EQ(help.out.find("Excludes"), std::string::npos) << help.out;
  for (const char* axis : {"--comm-hooks,--comm-hook", "--hierarchies,--hierarchy", "--stalenesses,--staleness",
                           "--zipf-alphas,--zipf-alpha"}) {
    EXPECT_NE(help.out.find(axis), std::string::npos) << axis;
  }
}

TEST(Sweep, FailedPointIsRecordedAndTheSweepGoesOn) {
  TempDir tmp;
  const std::string out = (tmp.path() / "sweep.json").string();
  // Batch 6 over 4 ranks: ps runs (chunks 2,2,2,0); allreduce and sharded_ps cannot split 6
  // evenly -> failed.
  const std::string cmd = std::string(DPBENCH_BINARY) +
                          " sweep --device cpu --data synthetic --input 8 --synthetic-samples 600 --hidden 8 "
                          "--ranks 1,4 --batch-sizes 6 --num-workers 0 --max-steps 12 --repetitions 2 "
                          "--no-eval -o " +
                          out + " 2>" + (tmp.path() / "err.txt").string() + " >/dev/null";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(out);
  const auto doc = nlohmann::json::parse(in);
  ASSERT_EQ(doc["runs"].size(), 12u);  // 2 ranks x 3 modes x 2 repetitions
  int failed = 0, ok = 0;
  for (const auto& r : doc["runs"]) {
    if (r["status"] == "failed") {
      ++failed;
      EXPECT_TRUE(r["mode"] == "allreduce" || r["mode"] == "sharded_ps") << r["mode"];
      EXPECT_EQ(r["strategy"]["name"], r["mode"]);  // failed points carry the traits too
      if (r["mode"] == "allreduce") EXPECT_EQ(r["strategy"]["label"], "allreduce (ring)");
      EXPECT_EQ(r["world_size"], 4);
      EXPECT_NE(r["error"].get<std::string>().find("not divisible"), std::string::npos);
    } else {
      ++ok;
      EXPECT_EQ(r["steps"]["timed"], 7);
      EXPECT_EQ(r["strategy"]["transport"], r["transport"]);
      EXPECT_EQ(r["strategy"]["name"], r["mode"]);
    }
  }
  EXPECT_EQ(failed, 4);  // allreduce and sharded_ps at 4 ranks, both repetitions
  EXPECT_EQ(ok, 8);
  EXPECT_EQ(doc["runs"][3]["repetition"], 1);  // ps, sharded_ps, allreduce, then repetition 1
  std::ifstream err(tmp.path() / "err.txt");
  std::stringstream ss;
  ss << err.rdbuf();
  EXPECT_NE(ss.str().find("sweep [12/12]"), std::string::npos) << ss.str();
  const std::string validate = std::string("/usr/bin/python3 ") + DPBENCH_SOURCE_DIR + "/results/validate.py " + out +
                               " >/dev/null";
  EXPECT_EQ(std::system(validate.c_str()), 0);
}

LinkModel link(double alpha, double gbps) { return {"test", alpha, 1.0 / (gbps * 1e9), "test"}; }

TEST(AlphaBeta, RingAllReduceFollowsPatarasukYuan) {
  StepModel m;
  m.param_bytes = 1e8;
  const LinkModel l = link(1e-5, 10.0);
  for (int p : {2, 4, 8, 1024}) {
    const auto pred = predict_step(m, l, "allreduce", p, 0);
    const double expect = 2.0 * (p - 1) * 1e-5 + 2.0 * (p - 1) / p * 1e8 / 10e9;
    EXPECT_NEAR(pred.comm_s, expect, 1e-12) << p;
  }
  // Bandwidth term approaches 2 N beta: the ring's cost per rank does not grow with p.
  EXPECT_LT(predict_step(m, link(0, 10), "allreduce", 1024, 0).comm_s, 2.0 * 1e8 / 10e9);
}

TEST(AlphaBeta, ParameterServerIncastGrowsLinearly) {
  StepModel m;
  m.param_bytes = 1e8;
  const LinkModel l = link(0.0, 10.0);
  const double t8 = predict_step(m, l, "ps_p2p", 8, 0).comm_s;
  const double t16 = predict_step(m, l, "ps_p2p", 16, 0).comm_s;
  EXPECT_NEAR(t8, 2.0 * 7 * 1e8 / 10e9, 1e-12);
  EXPECT_NEAR(t16 / t8, 15.0 / 7.0, 1e-9);
  // The pipelined collective transport moves N through the root once each way.
  EXPECT_NEAR(predict_step(m, l, "ps_collective", 16, 0).comm_s, 2.0 * 1e8 / 10e9, 1e-12);
}

TEST(AlphaBeta, ComputeShareAndExposedFraction) {
  StepModel m;
  m.per_sample_compute_s = 1e-3;
  m.optimizer_s = 2e-3;
  m.param_bytes = 1e9;
  m.exposed_fraction = 0.25;
  const LinkModel l = link(0.0, 1.0);
  const auto shared = predict_step(m, l, "allreduce", 2, 100, 0.5);
  EXPECT_NEAR(shared.compute_s, 100 * 1e-3 / 0.5 + 2e-3, 1e-12);
  EXPECT_NEAR(shared.step_s, shared.compute_s + 0.25 * shared.comm_s, 1e-12);
}

TEST(AlphaBeta, UnknownProjectionModeThrows) {
  EXPECT_THROW(predict_step(StepModel{}, link(0, 1), "carrier_pigeon", 2, 1), Error);
  EXPECT_THROW(predict_step(StepModel{}, link(0, 1), "allreduce", 0, 1), Error);
}

TEST(StrategyTraits, RegistryHasOneBaselineAndEveryTraitFilled) {
  int baselines = 0;
  for (const auto& s : strategies()) {
    baselines += s.baseline ? 1 : 0;
    EXPECT_NE(s.transport, nullptr) << s.mode;
    EXPECT_NE(s.label, nullptr) << s.mode;
    EXPECT_NE(s.bus_bandwidth, nullptr) << s.mode;
    EXPECT_NE(s.comm_time, nullptr) << s.mode;
    EXPECT_FALSE(s.projected.empty()) << s.mode;
    // Every transport the strategy takes has a projection curve.
    for (const auto& t : s.transports) {
      TrainConfig c;
      c.mode = s.mode;
      c.transport = t;
      EXPECT_NO_THROW(projected_key(s, c)) << s.mode << " " << t;
    }
  }
  EXPECT_EQ(baselines, 1);
  EXPECT_EQ(baseline_strategy().mode, Mode::ps);
}

TEST(StrategyTraits, LabelsTransportsAndBusBandwidth) {
  TrainConfig c;
  c.world_size = 4;
  c.mode = Mode::ps;
  c.transport = Transport::p2p;
  const Strategy& ps = find_strategy(Mode::ps);
  EXPECT_EQ(ps.label(c), "ps (p2p)");
  EXPECT_EQ(ps.transport(c), Transport::p2p);
  EXPECT_EQ(projected_key(ps, c), "ps_p2p");
  EXPECT_FALSE(ps.bus_bandwidth(c, 4e6).has_value());
  EXPECT_FALSE(overlaps_backward(ps, c));
  EXPECT_TRUE(ps.has_root);

  c.mode = Mode::allreduce;  // the transport option is ps's: allreduce runs its ring whatever it says
  const Strategy& ar = find_strategy(Mode::allreduce);
  EXPECT_TRUE(ar.transports.empty());
  EXPECT_EQ(ar.label(c), "allreduce (ring)");
  EXPECT_EQ(ar.transport(c), Transport::ring);
  EXPECT_EQ(projected_key(ar, c), "allreduce");
  const auto bus = ar.bus_bandwidth(c, 4e6);
  ASSERT_TRUE(bus.has_value());
  EXPECT_EQ(bus->collective, "all-reduce");
  EXPECT_DOUBLE_EQ(bus->factor, 1.5);  // nccl-tests: 2(p-1)/p at p = 4
  EXPECT_DOUBLE_EQ(bus->bytes, 4e6);
  EXPECT_TRUE(overlaps_backward(ar, c));
  EXPECT_FALSE(ar.baseline);

  c.mode = Mode::sharded_ps;
  c.transport = Transport::collective;
  const Strategy& sp = find_strategy(Mode::sharded_ps);
  EXPECT_EQ(sp.label(c), "sharded_ps (collective)");
  EXPECT_EQ(projected_key(sp, c), "sharded_ps_collective");
  EXPECT_TRUE(overlaps_backward(sp, c));  // the push overlaps backward
  const auto sbus = sp.bus_bandwidth(c, 4e6);
  ASSERT_TRUE(sbus.has_value());  // K = p: all-reduce's traffic
  EXPECT_DOUBLE_EQ(sbus->factor, 1.5);
  EXPECT_FALSE(sp.has_root);
  c.transport = Transport::p2p;
  EXPECT_FALSE(overlaps_backward(sp, c));  // pushed after backward
  c.sharded_ps.servers = 2;
  EXPECT_EQ(sp.label(c), "sharded_ps (p2p, 2 servers)");
  EXPECT_FALSE(sp.bus_bandwidth(c, 4e6).has_value());  // the servers' links carry more
}

TEST(StrategyTraits, RunEntryCarriesTheTraits) {
  TrainConfig c;
  c.world_size = 4;
  c.mode = Mode::ps;
  c.transport = Transport::collective;
  const auto ps = strategy_to_json(c);
  EXPECT_EQ(ps["name"], "ps");
  EXPECT_EQ(ps["label"], "ps (collective)");
  EXPECT_EQ(ps["transport"], "collective");
  EXPECT_EQ(ps["projection"], "ps_collective");
  EXPECT_TRUE(ps["baseline"].get<bool>());
  EXPECT_TRUE(ps["has_root"].get<bool>());
  EXPECT_FALSE(ps["overlaps_backward"].get<bool>());
  EXPECT_TRUE(ps["busbw_factor"].is_null());
  c.mode = Mode::allreduce;
  const auto ar = strategy_to_json(c);
  EXPECT_EQ(ar["label"], "allreduce (ring)");
  EXPECT_EQ(ar["transport"], "ring");
  EXPECT_FALSE(ar["baseline"].get<bool>());
  EXPECT_TRUE(ar["overlaps_backward"].get<bool>());
  EXPECT_DOUBLE_EQ(ar["busbw_factor"].get<double>(), 1.5);
  EXPECT_THROW((void)parse_mode("carrier_pigeon"), InputError);
}

// A strategy's own options belong to it: option_owner names the strategy a hook or a staleness
// bound belongs to (the mode a sweep's point of it runs), validate_point refuses it under another.
TEST(StrategyTraits, OwnOptionsNameTheirStrategyAndAreRefusedUnderOthers) {
  TrainConfig c;
  EXPECT_FALSE(option_owner(c).has_value());  // defaults: nobody's option is set
  c.allreduce.comm_hook = parse_comm_hook("fp16", "--comm-hook");
  auto owner = option_owner(c);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->strategy->mode, Mode::allreduce);
  EXPECT_EQ(owner->option.option, "--comm-hook fp16");
  c.allreduce.comm_hook = CommHook{};
  c.sharded_ps.staleness = 3;
  owner = option_owner(c);
  ASSERT_TRUE(owner.has_value());
  EXPECT_EQ(owner->strategy->mode, Mode::sharded_ps);
  EXPECT_EQ(owner->option.option, "--staleness 3");

  const auto data = make_synthetic_dataset(SampleShape{1, 1, 4}, 2, 64, 1);
  c.model.workload = "mlp";
  c.model.hidden = {4};
  c.world_size = 2;
  c.global_batch = 16;
  c.mode = Mode::allreduce;
  try {
    validate_point(c, *data);
    ADD_FAILURE() << "--staleness under allreduce was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--staleness 3: only sharded_ps has a bounded-staleness mode, not allreduce (give --mode sharded_ps)");
  }
  c.mode = Mode::sharded_ps;
  EXPECT_NO_THROW(validate_point(c, *data));
}

TEST(AlphaBeta, PresetsAndUnknownLink) {
  EXPECT_NEAR(1.0 / link_preset("nvlink4").beta_s_per_byte, 370e9, 1.0);
  EXPECT_NEAR(1.0 / link_preset("pcie4").beta_s_per_byte, 25e9, 1.0);
  EXPECT_THROW(link_preset("carrier-pigeon"), InputError);
}

nlohmann::json fake_run(const std::string& mode, int p, double step_s, double comm_s) {
  nlohmann::json run = {{"status", "ok"},
                        {"mode", mode},
                        {"transport", mode == "ps" ? "collective" : "ring"},
                        {"world_size", p},
                        {"global_batch", 100},
                        {"device", "cpu"},
                        {"num_params", 1000000},
                        {"input_features", 784},
                        {"num_classes", 10},
                        {"config", {{"num_workers", 0}}},
                        {"step_time_s", {{"p50", step_s}}},
                        {"phases_s",
                         {{"data_wait", 0.0},
                          {"h2d", 0.0},
                          {"forward", 0.03},
                          {"backward", 0.06},
                          {"comm", comm_s},
                          {"comm_exposed", comm_s},
                          {"optimizer", 0.01}}}};
  // Only a strategy that declares a bus bandwidth (allreduce) reports one.
  if (mode == "allreduce") run["bus_bandwidth_GBps"] = {{"algbw", 1.0}, {"busbw", 1.0}};
  return run;
}

TEST(Project, CalibratesOnOneRankRunAndFindsCrossover) {
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}},
                        {"runs", {fake_run("allreduce", 1, 0.1, 0.0), fake_run("allreduce", 2, 0.2, 0.004)}}};
  doc["runs"][1]["device"] = "cuda";  // a GPU run: measured over a device link, as the preset is
  doc["runs"][1]["virtual_ranks"] = false;
  ProjectOptions o;
  o.link_model = "pcie4";
  o.scaling = "weak";
  o.max_ranks = 1024;
  const auto proj = project(o, {doc}, nullptr);
  EXPECT_EQ(proj["scaling"]["kind"], "weak");
  EXPECT_EQ(proj["link"]["kind"], "device");
  EXPECT_NEAR(proj["calibration"]["per_sample_compute_s"].get<double>(), 0.09 / 100, 1e-12);
  EXPECT_NEAR(proj["calibration"]["optimizer_s"].get<double>(), 0.01, 1e-12);
  // 1..1024, every curve: allreduce, ps and sharded_ps under each of their transports.
  ASSERT_EQ(proj["points"].size(), 11u * projected_curves().size());
  ASSERT_EQ(projected_curves().size(), 5u);
  // At 1 rank there is no communication: speedup 1 for every mode.
  EXPECT_NEAR(proj["points"][0]["speedup"].get<double>(), 1.0, 1e-12);
  // 4 MB of gradients at 25 GB/s: p2p incast and allreduce part ways early; collective later.
  ASSERT_FALSE(proj["crossover_world_size"].is_null());
  const int crossover = proj["crossover_world_size"];
  EXPECT_GE(crossover, 2);
  EXPECT_LE(crossover, 1024);
  // The 2-rank GPU run is compared with the model at its own batch (50 per rank), each rank on
  // its own device.
  ASSERT_EQ(proj["measured"].size(), 1u);
  const double predicted = proj["measured"][0]["predicted_step_time_s"];
  const double compute = 50 * 0.09 / 100 + 0.01;
  const double comm = 2 * 5e-6 + 1.0 * 4e6 / 25e9;
  EXPECT_NEAR(predicted, compute + comm, 1e-9);
  EXPECT_TRUE(proj["measured"][0]["model_applies"].get<bool>());
  // Weak scaling at 100 per rank: the 2-rank run (global batch 100) is not on the curves.
  EXPECT_FALSE(proj["measured"][0]["on_curve"].get<bool>());
  // The curves carry their strategy's traits, so the report names no mode itself.
  // The other curves first, in registry order, then the baseline's.
  ASSERT_EQ(proj["curves"].size(), 5u);
  EXPECT_EQ(proj["curves"][0]["curve"], "sharded_ps_collective");
  EXPECT_EQ(proj["curves"][0]["label"], "sharded_ps (collective)");
  EXPECT_EQ(proj["curves"][1]["curve"], "sharded_ps_p2p");
  EXPECT_EQ(proj["curves"][2]["curve"], "allreduce");
  EXPECT_EQ(proj["curves"][2]["label"], "allreduce (ring)");
  EXPECT_FALSE(proj["curves"][2]["baseline"].get<bool>());
  EXPECT_EQ(proj["curves"][3]["label"], "ps (collective)");
  EXPECT_EQ(proj["curves"][4]["curve"], "ps_p2p");
  EXPECT_EQ(proj["curves"][4]["strategy"], "ps");
  EXPECT_TRUE(proj["curves"][4]["baseline"].get<bool>());
  // One crossover per other curve, against the baseline's default (collective) curve.
  ASSERT_EQ(proj["crossovers"].size(), 3u);
  EXPECT_EQ(proj["crossovers"][2]["curve"], "allreduce");
  EXPECT_EQ(proj["crossovers"][2]["baseline"], "ps_collective");
  // With every rank a server, the collective sharded_ps moves ring all-reduce's bytes but hides
  // only its push behind backward: it never beats allreduce.
  for (std::size_t i = 0; i < proj["points"].size(); ++i) {
    const auto& pt = proj["points"][i];
    if (pt["curve"] != "sharded_ps_collective") continue;
    const auto& ar = proj["points"][i + 2];  // the same world size on the allreduce curve
    ASSERT_EQ(ar["curve"], "allreduce");
    ASSERT_EQ(ar["world_size"], pt["world_size"]);
    EXPECT_GE(pt["step_time_s"].get<double>(), ar["step_time_s"].get<double>()) << pt["world_size"];
  }
}

TEST(Project, MemoryCopiesOfThreadRanksAreTheLinkOnlyWhenAskedFor) {
  nlohmann::json two = fake_run("allreduce", 2, 0.2, 0.004);
  two["bus_bandwidth_GBps"] = {{"collective", "all-reduce"}, {"algbw", 4.0}, {"busbw", 4.0}};
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), two}}};
  ProjectOptions o;
  // The default: a link between processes. Thread ranks (--comm local) measured memory copies.
  try {
    project(o, {doc}, nullptr);
    ADD_FAILURE() << "--link-model measured accepted in-process memory copies";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--link-model memory"), std::string::npos) << e.what();
  }
  o.link_model = "memory";
  auto proj = project(o, {doc}, nullptr);
  EXPECT_EQ(proj["link"]["kind"], "memory");
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 4.0, 1e-9);
  EXPECT_NE(proj["link"]["source"].get<std::string>().find("all-reduce busbw 4.00 GB/s at 2 ranks"), std::string::npos)
      << proj["link"]["source"];
  EXPECT_TRUE(proj["measured"][0]["on_curve"].get<bool>());  // strong scaling: global batch 100
  // Files written before the strategy traits: allreduce runs had allreduce_bandwidth_GBps.
  doc["runs"][1].erase("bus_bandwidth_GBps");
  doc["runs"][1]["allreduce_bandwidth_GBps"] = {{"algbw", 3.0}, {"busbw", 3.0}};
  proj = project(o, {doc}, nullptr);
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 3.0, 1e-9);
  // Over gloo (processes, TCP) the run's busbw is a measured inter-process link: the default.
  doc["runs"][1]["comm"] = "gloo";
  o.link_model = "measured";
  proj = project(o, {doc}, nullptr);
  EXPECT_EQ(proj["link"]["kind"], "inter-process");
  EXPECT_EQ(proj["link"]["collectives"], "gloo");
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 3.0, 1e-9);
  // --link-model memory now finds no thread-rank run to take memory copies from.
  o.link_model = "memory";
  EXPECT_THROW(project(o, {doc}, nullptr), InputError);
}

TEST(Project, CollectivesGiveTheInterProcessAllReduceUnlessMemoryIsAskedFor) {
  auto bench = [](const std::string& family, double busbw) {
    return nlohmann::json{{"name", family + "/ranks:2/bytes:4000000/manual_time"},
                          {"run_type", "iteration"},
                          {"busbw", busbw},
                          {"real_time", 2000.0},
                          {"time_unit", "us"}};
  };
  const nlohmann::json thread_only = {{"benchmarks", {bench("BM_AllReduce", 9.0)}}};
  const nlohmann::json both = {{"benchmarks", {bench("BM_AllReduce", 9.0), bench("BM_AllReduceGlooRing", 2.0)}}};
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0)}}};
  ProjectOptions o;
  o.collectives = "gb.json";
  EXPECT_THROW(project(o, {doc}, &thread_only), InputError);  // only in-process copies
  auto proj = project(o, {doc}, &both);
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 2.0, 1e-9);
  EXPECT_EQ(proj["link"]["collectives"], "gloo");
  o.link_model = "memory";
  proj = project(o, {doc}, &both);
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 9.0, 1e-9);
  EXPECT_EQ(proj["link"]["collectives"], "ring");
}

// A cluster run of `p` nodes over an emulated link of `bytes_per_s` (network.link as run writes it).
nlohmann::json fake_cluster_run(int p, double bytes_per_s, double step_s, double comm_s, double exposed_s) {
  nlohmann::json run = fake_run("allreduce", p, step_s, comm_s);
  run["comm"] = "gloo";
  run["global_batch"] = 100;
  run["phases_s"]["comm_exposed"] = exposed_s;
  run["cluster"] = {{"link", bytes_per_s < 2e7 ? "100mbit" : "1gbit"}, {"nodes", p}};
  run["network"] = {{"link", {{"alpha_s", 1e-4}, {"bytes_per_s", bytes_per_s}, {"collectives", "gloo"}}}};
  return run;
}

// Ranks sharing the emulated cluster's host: a 2-node run whose ranks computed 3x the 1-rank
// model's time (0.165 s against 50 x 0.0009 + 0.01) on a 2-core host makes each curve's compute 3x
// at 2 ranks and 6x at 4 (twice the ranks on the same cores), 1x at one rank; recorded with the
// calibration. A preset link (ib-ndr) describes other machines: no sharing there.
TEST(Project, RanksSharingTheEmulatedHostSlowTheirCompute) {
  nlohmann::json cluster = fake_cluster_run(2, 125e6, 0.3, 0.1, 0.1);
  cluster["phases_s"]["forward"] = 0.055;
  cluster["phases_s"]["backward"] = 0.1;
  const nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), cluster}}};
  ProjectOptions o;
  o.max_ranks = 4;
  const auto compute_at = [](const nlohmann::json& proj, int p) {
    for (const auto& pt : proj["points"]) {
      if (pt["curve"] == "allreduce" && pt["world_size"] == p) return pt["compute_s"].get<double>();
    }
    return 0.0;
  };
  const nlohmann::json shared = project(o, {doc}, nullptr);
  ASSERT_TRUE(shared["calibration"].contains("host_sharing"));
  EXPECT_NEAR(shared["calibration"]["host_sharing"]["slowdown_at_2_ranks"].get<double>(), 3.0, 1e-9);
  EXPECT_EQ(shared["calibration"]["host_sharing"]["cores"], 2);
  const auto unshared = [](int p) { return 100.0 / p * 0.0009 + 0.01; };
  EXPECT_NEAR(compute_at(shared, 1), unshared(1), 1e-12);
  EXPECT_NEAR(compute_at(shared, 2), 3 * unshared(2), 1e-12);
  EXPECT_NEAR(compute_at(shared, 4), 6 * unshared(4), 1e-12);
  o.link_model = "ib-ndr";
  const nlohmann::json preset = project(o, {doc}, nullptr);
  EXPECT_FALSE(preset["calibration"].contains("host_sharing"));
  EXPECT_NEAR(compute_at(preset, 4), unshared(4), 1e-12);
}

TEST(Project, EmulatedLinkIsTheDefaultAndEachClusterRunIsJudgedOnItsOwnLink) {
  nlohmann::json doc = {{"env", {{"cpu_cores", 4}}},
                        {"runs",
                         {fake_run("allreduce", 1, 0.1, 0.0), fake_cluster_run(2, 12.5e6, 0.42, 0.32, 0.32),
                          fake_cluster_run(2, 125e6, 0.14, 0.04, 0.02), fake_run("allreduce", 2, 0.2, 0.004)}}};
  ProjectOptions o;
  const auto proj = project(o, {doc}, nullptr);
  // The slowest emulated link draws the curves; the exposed share comes from its run alone (1.0),
  // not from the faster link's (0.5) or the thread ranks'.
  EXPECT_EQ(proj["link"]["kind"], "emulated");
  EXPECT_EQ(proj["link"]["name"], "emulated 100mbit");
  EXPECT_NEAR(proj["link"]["bandwidth_GBps"].get<double>(), 0.0125, 1e-12);
  EXPECT_DOUBLE_EQ(proj["calibration"]["exposed_fraction"].get<double>(), 1.0);
  EXPECT_EQ(proj["scaling"]["kind"], "strong");
  ASSERT_EQ(proj["measured"].size(), 3u);
  // Each cluster run against the model on its own link: 50 samples per rank, half a CPU each,
  // plus a ring all-reduce of 4 MB: 2 (p-1) alpha + 2 (p-1)/p N beta.
  const double compute = 50 * 0.09 / 100 / 0.5 + 0.01;
  const double slow = compute + 2 * 1e-4 + 4e6 / 12.5e6;
  const double fast = compute + 2 * 1e-4 + 4e6 / 125e6;
  EXPECT_NEAR(proj["measured"][0]["predicted_step_time_s"].get<double>(), slow, 1e-9);
  EXPECT_NEAR(proj["measured"][0]["relative_error"].get<double>(), slow / 0.42 - 1.0, 1e-9);
  EXPECT_NEAR(proj["measured"][1]["predicted_step_time_s"].get<double>(), fast, 1e-9);
  EXPECT_TRUE(proj["measured"][0]["on_curve"].get<bool>());
  EXPECT_FALSE(proj["measured"][1]["on_curve"].get<bool>());  // another rate than the curves'
  EXPECT_TRUE(proj["measured"][1]["model_applies"].get<bool>());
  // Thread ranks measured memory copies: no model value, and said why.
  EXPECT_TRUE(proj["measured"][2]["predicted_step_time_s"].is_null());
  EXPECT_FALSE(proj["measured"][2]["model_applies"].get<bool>());
  EXPECT_NE(proj["measured"][2]["note"].get<std::string>().find("measured over memory"), std::string::npos);
}

TEST(Project, StrongScalingSplitsTheGlobalBatchAndWeakKeepsTheRankBatch) {
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0)}}};
  ProjectOptions o;
  o.link_model = "pcie4";
  auto proj = project(o, {doc}, nullptr);
  // Strong: 100 samples split over p ranks, up to the last world size with a sample per rank.
  EXPECT_EQ(proj["points"].back()["world_size"], 64);
  for (const auto& pt : proj["points"]) {
    EXPECT_NEAR(pt["per_rank_batch"].get<double>() * pt["world_size"].get<double>(), 100.0, 1e-9);
    EXPECT_NEAR(pt["throughput_samples_per_s"].get<double>(), 100.0 / pt["step_time_s"].get<double>(), 1e-6);
  }
  o.per_rank_batch = 32;
  proj = project(o, {doc}, nullptr);
  EXPECT_EQ(proj["scaling"]["kind"], "weak");
  EXPECT_EQ(proj["points"].back()["world_size"], 1024);
  EXPECT_DOUBLE_EQ(proj["points"].back()["global_batch"].get<double>(), 32.0 * 1024);
  o.scaling = "strong";
  EXPECT_THROW(project(o, {doc}, nullptr), InputError);  // --per-rank-batch sets weak scaling
  o.per_rank_batch = 0;
  o.scaling = "sideways";
  EXPECT_THROW(project(o, {doc}, nullptr), InputError);
}

TEST(Project, MarksRanksBeyondCoresAndNeedsOneRankRun) {
  nlohmann::json ps4 = fake_run("ps", 4, 0.3, 0.1);
  ps4["comm"] = "gloo";
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), ps4}}};
  ProjectOptions o;
  o.link_model = "measured";  // no run at 2+ ranks reports a bus bandwidth: nothing measured the link
  EXPECT_THROW(project(o, {doc}, nullptr), InputError);
  nlohmann::json ar2 = fake_run("allreduce", 2, 0.2, 0.05);
  ar2["comm"] = "gloo";
  doc["runs"].push_back(ar2);
  const auto proj = project(o, {doc}, nullptr);
  ASSERT_EQ(proj["measured"].size(), 2u);
  EXPECT_FALSE(proj["measured"][0]["model_applies"].get<bool>());
  EXPECT_NE(proj["measured"][0]["note"].get<std::string>().find("4 ranks on 2 cores"), std::string::npos);
  EXPECT_TRUE(proj["measured"][1]["model_applies"].get<bool>());

  o.link_model = "pcie5";
  nlohmann::json no_single = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("ps", 2, 0.3, 0.1)}}};
  EXPECT_THROW(project(o, {no_single}, nullptr), InputError);
}

TEST(Project, VirtualGpuRanksAreMarkedModelDoesNotApply) {
  nlohmann::json shared = fake_run("allreduce", 4, 0.3, 0.1);
  shared["device"] = "cuda";
  shared["virtual_ranks"] = true;
  nlohmann::json own = fake_run("allreduce", 2, 0.2, 0.05);
  own["device"] = "cuda";
  own["virtual_ranks"] = false;
  nlohmann::json doc = {{"env", {{"cpu_cores", 2}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), shared, own}}};
  ProjectOptions o;
  o.link_model = "nvlink4";
  const auto proj = project(o, {doc}, nullptr);
  ASSERT_EQ(proj["measured"].size(), 2u);
  EXPECT_FALSE(proj["measured"][0]["model_applies"].get<bool>());
  EXPECT_NE(proj["measured"][0]["note"].get<std::string>().find("virtual ranks"), std::string::npos);
  // A GPU rank per device: the CPU's core count does not limit it.
  EXPECT_TRUE(proj["measured"][1]["model_applies"].get<bool>());
}

TEST(BlasCore, AsksForTheKernelsTheCpuSupportsOnlyAfterAPrescottFallback) {
  const std::string avx512 = "fpu sse2 avx avx2 fma avx512f avx512dq avx512bw avx512vl";
  EXPECT_EQ(preferred_blas_core("Prescott", avx512), "SkylakeX");
  EXPECT_EQ(preferred_blas_core("prescott", "sse2 avx avx2 fma"), "Haswell");
  EXPECT_EQ(preferred_blas_core("Prescott", "sse2 sse3 avx"), "");        // nothing better to ask for
  EXPECT_EQ(preferred_blas_core("Prescott", "avx512f_x avx2x fma"), "");  // whole words only
  EXPECT_EQ(preferred_blas_core("SkylakeX", avx512), "");                 // OpenBLAS knew the CPU
  EXPECT_EQ(preferred_blas_core("Zen", avx512), "");
}

// OMP_NUM_THREADS, when set, is every rank's BLAS thread count (PyTorch's torch.get_num_threads()
// default); otherwise the ranks share the cores. A bad value is one line naming the variable.
TEST(BlasThreads, OmpNumThreadsWinsOverTheCoreShareAndABadValueIsNamed) {
  const char* old = std::getenv("OMP_NUM_THREADS");
  const std::string saved = old != nullptr ? old : "";
  unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(blas_threads_per_rank(16, 2), 8);
  EXPECT_EQ(blas_threads_per_rank(2, 4), 1);
  EXPECT_EQ(blas_threads_per_rank(2, 0), 2);
  setenv("OMP_NUM_THREADS", "1", 1);
  EXPECT_EQ(blas_threads_per_rank(16, 2), 1);
  setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(blas_threads_per_rank(2, 2), 3);
  for (const char* bad : {"0", "-2", "two", "4x"}) {
    setenv("OMP_NUM_THREADS", bad, 1);
    try {
      blas_threads_per_rank(16, 2);
      ADD_FAILURE() << "OMP_NUM_THREADS=" << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), fmt::format("OMP_NUM_THREADS={}: not a positive number of threads", bad));
    }
  }
  if (old != nullptr) {
    setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  } else {
    unsetenv("OMP_NUM_THREADS");
  }
}

// On an emulated cluster (DPBENCH_CLUSTER_NODE set) every rank of the job shares this host's
// cores, whatever the launcher says of the node's own ranks.
TEST(BlasThreads, AnEmulatedClustersRanksAllShareTheHost) {
  const char* old = std::getenv("DPBENCH_CLUSTER_NODE");
  const std::string saved = old != nullptr ? old : "";
  TrainConfig config;
  config.world_size = 4;
  config.comm = Backend::gloo;
  config.process.ranks_on_this_node = 1;
  unsetenv("DPBENCH_CLUSTER_NODE");
  EXPECT_EQ(ranks_on_this_node(config), 1);
  setenv("DPBENCH_CLUSTER_NODE", "2", 1);
  EXPECT_EQ(ranks_on_this_node(config), 4);
  if (old != nullptr) {
    setenv("DPBENCH_CLUSTER_NODE", saved.c_str(), 1);
  } else {
    unsetenv("DPBENCH_CLUSTER_NODE");
  }
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

// --simulate: every point gets the simulated step of its mode's schedule. Where the schedule has
// nothing for max-min sharing to change (ps's p2p: the root sends and receives each worker's
// parameters in turn, nothing concurrent), the simulation equals the alpha-beta terms within 2 %
// (the formula counts the batch scatter's latency once, the schedule once per rank); a straggler
// node slows every mode's simulated step; and an oversubscribed tree slows what crosses it.
// A 1-rank allreduce run (0.1 s a step, batch 100) to calibrate on, and --simulate's options up
// to max_ranks over ib-ndr, 10 samples per rank.
nlohmann::json one_rank_calibration() {
  return {{"env", {{"cpu_cores", 4}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0)}}};
}
ProjectOptions simulated_project_options(int max_ranks) {
  ProjectOptions o;
  o.link_model = "ib-ndr";
  o.max_ranks = max_ranks;
  o.per_rank_batch = 10;
  o.topology.simulate = true;
  return o;
}

// --max-ranks 12: the points are 1, 2, 4, 8 and then 12 itself, each computed at its own world
// size (allreduce's ring moves 2(p-1)/p of the gradient, so its step grows from 8 to 12 ranks at
// a fixed per-rank batch), and simulated there too; --max-ranks 12 with nodes of 8 ranks is
// refused, naming the option.
TEST(Project, MaxRanksNotAPowerOfTwoIsTheLastPoint) {
  const nlohmann::json doc = one_rank_calibration();
  ProjectOptions o = simulated_project_options(12);
  o.topology.simulate = simulation_available();
  const auto proj = project(o, {doc}, nullptr);
  std::map<std::string, std::map<int, nlohmann::json>> by_curve;
  for (const auto& pt : proj["points"]) by_curve[pt["curve"].get<std::string>()][pt["world_size"].get<int>()] = pt;
  ASSERT_EQ(by_curve.size(), projected_curves().size());
  for (const auto& [curve, points] : by_curve) {
    std::vector<int> sizes;
    for (const auto& [p, pt] : points) sizes.push_back(p);
    EXPECT_EQ(sizes, (std::vector<int>{1, 2, 4, 8, 12})) << curve;
    EXPECT_EQ(points.at(12)["global_batch"].get<double>(), 120.0) << curve;
    if (o.topology.simulate) EXPECT_TRUE(points.at(12)["simulation"].contains("simulated_step_s")) << curve;
  }
  const auto& ring = by_curve.at("allreduce");
  EXPECT_GT(ring.at(12)["step_time_s"].get<double>(), ring.at(8)["step_time_s"].get<double>());
  o.topology.ranks_per_node = 8;
  try {
    project(o, {doc}, nullptr);
    ADD_FAILURE() << "--max-ranks 12 on nodes of 8 ranks was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--max-ranks 12: not a power of two nor whole nodes of 8 ranks"),
              std::string::npos)
        << e.what();
  }
}

TEST(Project, SimulateAddsEachModesSimulatedStepOnTheTopology) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const nlohmann::json doc = one_rank_calibration();
  ProjectOptions o = simulated_project_options(32);
  auto at = [](const nlohmann::json& proj, const std::string& mode, int p) {
    for (const auto& pt : proj["points"]) {
      if (pt["curve"] == mode && pt["world_size"] == p) return pt;
    }
    ADD_FAILURE() << "no point " << mode << " at " << p;
    return nlohmann::json();
  };
  const auto flat = project(o, {doc}, nullptr);
  for (const auto& pt : flat["points"]) {
    ASSERT_TRUE(pt["simulation"].contains("simulated_step_s")) << pt.dump();
    EXPECT_GT(pt["simulation"]["simulated_step_s"].get<double>(), 0.0);
  }
  for (int p : {2, 8, 32}) {
    const auto pt = at(flat, "ps_p2p", p);
    EXPECT_NEAR(pt["simulation"]["simulated_step_s"].get<double>(), pt["step_time_s"].get<double>(),
                0.02 * pt["step_time_s"].get<double>())
        << p;
  }
  o.topology.node_link_of = {"3=1gbit"};
  const auto straggler = project(o, {doc}, nullptr);
  for (const std::string mode : {"ps_collective", "allreduce", "sharded_ps_collective"}) {
    EXPECT_GT(at(straggler, mode, 8)["simulation"]["simulated_step_s"].get<double>(),
              1.5 * at(flat, mode, 8)["simulation"]["simulated_step_s"].get<double>())
        << mode;
  }
  // Leaves of 4 nodes: 4x oversubscribed, an uplink carries one node link, all a rank-ordered
  // ring needs (one flow each way per leaf), so allreduce only pays the extra hops' latency; 16x
  // leaves a quarter of it, and every transfer that crosses it takes 4x as long.
  auto sim = [&](const nlohmann::json& proj, const std::string& mode) {
    return at(proj, mode, 32)["simulation"]["simulated_step_s"].get<double>();
  };
  o.topology.node_link_of.clear();
  o.topology.nodes_per_leaf = 4;
  o.topology.oversubscription = 4;
  const auto tree4 = project(o, {doc}, nullptr);
  o.topology.oversubscription = 16;
  const auto tree16 = project(o, {doc}, nullptr);
  EXPECT_GT(sim(tree4, "allreduce"), sim(flat, "allreduce"));
  EXPECT_LT(sim(tree4, "allreduce"), 1.05 * sim(flat, "allreduce"));
  EXPECT_GT(sim(tree16, "allreduce"), sim(tree4, "allreduce") + 1e-4);
  EXPECT_GT(sim(tree16, "ps_p2p"), 1.5 * sim(flat, "ps_p2p"));
  EXPECT_EQ(tree16["topology"]["oversubscription"], 16.0);
  o.topology.oversubscription = 0.5;
  EXPECT_THROW(project(o, {doc}, nullptr), InputError);
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

// --topology fills what the user left unset from the datasheet node; a name it does not know, or
// a preset without --simulate, is an input error naming it.
TEST(Project, TopologyPresetFillsOnlyWhatTheUserLeftUnset) {
  TopologyOptions dgx;
  dgx.simulate = true;
  dgx.preset = "dgx-h100";
  apply_topology_preset(dgx, false, false, false);
  EXPECT_EQ(dgx.ranks_per_node, 8);
  EXPECT_EQ(dgx.node_link, "3200gbit");
  EXPECT_EQ(dgx.intra_link, "2960gbit");
  TopologyOptions mine;
  mine.simulate = true;
  mine.preset = "h100-8gpu-400g";
  mine.ranks_per_node = 4;
  mine.node_link = "200gbit";
  apply_topology_preset(mine, true, false, true);
  EXPECT_EQ(mine.ranks_per_node, 4);
  EXPECT_EQ(mine.node_link, "200gbit");
  EXPECT_EQ(mine.intra_link, "2960gbit");
  EXPECT_NE(topology_preset_source("dgx-h100").get<std::string>().find("DGX H100"), std::string::npos);
  EXPECT_TRUE(topology_preset_source("").is_null());
  TopologyOptions unknown;
  unknown.simulate = true;
  unknown.preset = "dgx-b300";
  EXPECT_THROW(apply_topology_preset(unknown, false, false, false), InputError);
  TopologyOptions without;
  without.preset = "dgx-h100";
  EXPECT_THROW(apply_topology_preset(without, false, false, false), InputError);
  TopologyOptions what_if_only;
  what_if_only.what_if = true;
  EXPECT_THROW(apply_topology_preset(what_if_only, false, false, false), InputError);
  // --platform replaces the described topology: beside any of its options, it is refused.
  TopologyOptions file;
  file.simulate = true;
  file.platform_file = "platform.xml";
  EXPECT_NO_THROW(apply_topology_preset(file, false, false, false, false));
  EXPECT_THROW(apply_topology_preset(file, false, false, false, true), InputError);
  file.what_if = true;
  EXPECT_THROW(apply_topology_preset(file, false, false, false, false), InputError);
}

// --node-link-of names a node of the largest projection, as the emulated cluster's --link-of
// must: 8 ranks at 1 per node have nodes 0..7 (7 is taken, 8 and 99 are refused, naming the
// range); at 4 per node, nodes 0..1.
TEST(Project, NodeLinkOfOutsideTheProjectionsNodesIsAnInputError) {
  TopologyOptions o;
  o.simulate = true;
  o.node_link_of = {"7=1gbit"};
  EXPECT_NO_THROW(check_node_link_of(o, 8));
  for (const char* bad : {"8=1gbit", "99=1gbit", "12345678901234=1gbit"}) {
    o.node_link_of = {bad};
    try {
      check_node_link_of(o, 8);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(fmt::format("--node-link-of {}: node ", bad)), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("outside the projection's nodes 0..7"), std::string::npos) << e.what();
    }
  }
  o.ranks_per_node = 4;
  o.node_link_of = {"1=1gbit"};
  EXPECT_NO_THROW(check_node_link_of(o, 8));
  o.node_link_of = {"2=1gbit"};
  EXPECT_THROW(check_node_link_of(o, 8), InputError);
}

// A 4-core machine's calibration file: a 1-rank allreduce run (0.1 s a step) and `cluster`.
nlohmann::json calibration_doc(const nlohmann::json& cluster) {
  return {{"env", {{"cpu_cores", 4}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), cluster}}};
}

// A --simulate projection's simulated step of `curve` at world size p; 0 when it has no such point.
double simulated_step_at(const nlohmann::json& proj, const std::string& curve, int p) {
  for (const auto& pt : proj["points"]) {
    if (pt["curve"] == curve && pt["world_size"] == p) return pt["simulation"]["simulated_step_s"].get<double>();
  }
  return 0.0;
}

// --nccl-algo tree plays allreduce's all-reduce as NCCL's tree: its curve moves (little here, where
// backward hides most of it), the parameter servers' stay as they were, and the topology block
// says which; without --simulate it is refused.
TEST(Project, NcclTreeReplaysOnlyTheAllreduceCurve) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const nlohmann::json doc = one_rank_calibration();
  ProjectOptions o = simulated_project_options(32);
  const auto ring = project(o, {doc}, nullptr);
  o.topology.nccl_algo = "tree";
  const auto tree = project(o, {doc}, nullptr);
  EXPECT_EQ(ring["topology"]["nccl_algo"], "ring");
  EXPECT_EQ(tree["topology"]["nccl_algo"], "tree");
  const double a = simulated_step_at(ring, "allreduce", 32), b = simulated_step_at(tree, "allreduce", 32);
  ASSERT_GT(a, 0.0);
  ASSERT_GT(b, 0.0);
  EXPECT_NE(a, b);
  for (const std::string mode : {"ps_collective", "sharded_ps_collective"}) {
    EXPECT_GT(simulated_step_at(ring, mode, 32), 0.0) << mode;
    EXPECT_EQ(simulated_step_at(ring, mode, 32), simulated_step_at(tree, mode, 32)) << mode;
  }
  TopologyOptions plain;
  plain.nccl_algo = "tree";
  EXPECT_THROW(apply_topology_preset(plain, false, false, false), InputError);
  // On the command line: one line, exit 2, nothing written.
  TempDir tmp;
  const std::string cmd = std::string(DPBENCH_BINARY) + " project --model gpt2 --link-model nvlink4 -o p.json ";
  Outcome bad = shell(cmd + "--nccl-algo tree", tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--nccl-algo tree: needs --simulate"), std::string::npos) << bad.err;
  bad = shell(cmd + "--simulate --nccl-algo double", tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--nccl-algo: double not in {ring,tree}"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "p.json"));
}

// The engine's calibration a calibration file's emulated run recorded (here allreduce and
// all-gather at half the link) rides on the projection's platform when the projection plays the
// files' emulated link: recorded with the run it came from, and allreduce's simulated step grows;
// the 2-rank all-gather's share slows sharded_ps's pull at 2 ranks only; fits its run's steps
// contradict are not used; on a preset link (ib-ndr) it is not carried, nor TCP's send buffer.
TEST(Project, EmulatedRunsEngineCalibrationRidesOnTheirLinkOnly) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  nlohmann::json cluster = fake_cluster_run(2, 12.5e6, 0.42, 0.32, 0.32);
  const nlohmann::json plain_doc = calibration_doc(cluster);
  cluster["network"]["simulation"] = {
      {"calibration",
       {{"collectives",
         {{{"collective", "allreduce"}, {"efficiency", 0.5}}, {{"collective", "allgather"}, {"efficiency", 0.5}}}}}}};
  const nlohmann::json calibrated_doc = calibration_doc(cluster);
  ProjectOptions o;
  o.max_ranks = 4;
  o.topology.simulate = true;
  const auto step_at = simulated_step_at;
  const auto step_at_4 = [](const nlohmann::json& proj) { return simulated_step_at(proj, "allreduce", 4); };
  const nlohmann::json plain = project(o, {plain_doc}, nullptr);
  const nlohmann::json calibrated = project(o, {calibrated_doc}, nullptr);
  EXPECT_TRUE(plain["topology"]["engine_calibration"].empty());
  ASSERT_EQ(calibrated["topology"]["engine_calibration"].size(), 2u);
  const auto& fits = calibrated["topology"]["engine_calibration"];
  const auto& ring = fits[0]["collective"] == "allreduce" ? fits[0] : fits[1];
  const auto& gather = fits[0]["collective"] == "allgather" ? fits[0] : fits[1];
  EXPECT_EQ(ring["collective"], "allreduce");
  EXPECT_EQ(ring["efficiency"], 0.5);
  EXPECT_EQ(ring["from_world_size"], 2);
  EXPECT_FALSE(ring.contains("share_at_2_ranks_only"));
  EXPECT_EQ(gather["collective"], "allgather");
  EXPECT_EQ(gather["share_at_2_ranks_only"], true);
  EXPECT_GT(step_at_4(calibrated), step_at_4(plain) * 1.2) << "the ring at half the link";
  EXPECT_GT(step_at(calibrated, "sharded_ps_collective", 2), step_at(plain, "sharded_ps_collective", 2))
      << "the pull at half the link";
  EXPECT_EQ(step_at(calibrated, "sharded_ps_collective", 4), step_at(plain, "sharded_ps_collective", 4))
      << "the pull at the link's rate beyond 2 ranks";
  // The platform carries TCP's send buffer of the emulated links: 0.1 s of the 12.5 MB/s link.
  EXPECT_NEAR(calibrated["topology"]["platform_at_max_ranks"]["send_buffer_bytes"].get<double>(), 1.25e6, 1e3);
  // The same fits from a run whose steps its calibrated simulation missed by more than its
  // uncalibrated one: not used, listed with both errors; the ring back at the link's rate.
  cluster["network"]["simulation"]["error"] = 0.109;
  cluster["network"]["simulation"]["uncalibrated"] = {{"error", -0.004}};
  const nlohmann::json contradicted = project(o, {calibration_doc(cluster)}, nullptr);
  EXPECT_TRUE(contradicted["topology"]["engine_calibration"].empty());
  ASSERT_EQ(contradicted["topology"]["engine_calibration_not_used"].size(), 1u);
  EXPECT_EQ(contradicted["topology"]["engine_calibration_not_used"][0]["error"], 0.109);
  EXPECT_EQ(contradicted["topology"]["engine_calibration_not_used"][0]["uncalibrated_error"], -0.004);
  EXPECT_EQ(step_at_4(contradicted), step_at_4(plain));
  cluster["network"]["simulation"]["uncalibrated"]["error"] = -0.2;  // the fits brought it closer: used
  EXPECT_EQ(project(o, {calibration_doc(cluster)}, nullptr)["topology"]["engine_calibration"].size(), 2u);
  o.link_model = "ib-ndr";
  EXPECT_TRUE(project(o, {calibrated_doc}, nullptr)["topology"]["engine_calibration"].empty());
  EXPECT_FALSE(project(o, {calibrated_doc}, nullptr)["topology"]["platform_at_max_ranks"].contains("send_buffer_bytes"))
      << "a preset's links are not TCP's";
}

// A 2-node calibration file on a 1 Gbit/s emulated link without a probe of a node's local ranks
// (`plain_doc`) and with one (`probed_doc`: 2 GB/s, a 2 ms latency), and a --simulate projection
// to 4 ranks of 2 per node.
struct IntraNodeCase {
  nlohmann::json plain_doc, probed_doc;
  ProjectOptions options;
};
IntraNodeCase intra_node_case() {
  nlohmann::json cluster = fake_cluster_run(2, 125e6, 0.1, 0.05, 0.05);
  IntraNodeCase c;
  c.plain_doc = calibration_doc(cluster);
  cluster["network"]["simulation"] = {
      {"intra_node", {{"bytes_per_s", 2e9}, {"latency_s", 2e-3}, {"source", "probed: local ranks 0 and 1"}}}};
  c.probed_doc = calibration_doc(cluster);
  c.options.max_ranks = 4;
  c.options.topology.simulate = true;
  c.options.topology.ranks_per_node = 2;
  return c;
}

// A calibration file's probe of a node's local ranks (network.simulation.intra_node: 2 GB/s, a
// 2 ms latency) replaces --intra-link's NVLink on the files' emulated link: recorded, with each
// rank's link at half the latency, it slows a 2-ranks-per-node ring whose neighbours meet
// inside a node; an --intra-link on the command line wins.
TEST(Project, AProbedIntraNodeLinkReplacesNvlinkOnTheEmulatedLink) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  IntraNodeCase c = intra_node_case();
  const nlohmann::json &plain_doc = c.plain_doc, &probed_doc = c.probed_doc;
  ProjectOptions& o = c.options;
  const auto step_at_4 = [](const nlohmann::json& proj) { return simulated_step_at(proj, "allreduce", 4); };
  const nlohmann::json plain = project(o, {plain_doc}, nullptr);
  const nlohmann::json probed = project(o, {probed_doc}, nullptr);
  EXPECT_FALSE(plain["topology"].contains("intra_node_calibration"));
  ASSERT_TRUE(probed["topology"].contains("intra_node_calibration")) << probed["topology"].dump();
  EXPECT_EQ(probed["topology"]["intra_node_calibration"]["bytes_per_s"], 2e9);
  EXPECT_EQ(probed["topology"]["intra_node_calibration"]["latency_s"], 1e-3);
  EXPECT_EQ(probed["topology"]["platform_at_max_ranks"]["intra_latency_s"], 1e-3) << "the platform as played";
  EXPECT_GT(step_at_4(probed), step_at_4(plain) + 4e-3) << "the ring's intra-node steps at 2 ms each";
  o.topology.intra_link_given = true;
  const nlohmann::json given = project(o, {probed_doc}, nullptr);
  EXPECT_FALSE(given["topology"].contains("intra_node_calibration"));
  EXPECT_EQ(step_at_4(given), step_at_4(plain));
}

// The host profile (dpbench profile, analysis/host_profile.hpp): made from a cluster run's
// probes of a node's local ranks (the median over its runs of their rates, 1, 2 and 3 GB/s, and
// the mean of their round trips, 1, 3 and 8 ms; a run without a probe left out), it gives a
// projection on files that probed none the intra-node link (2 GB/s, each rank's link at half the
// 4 ms round trip) and
// the requested rate's share (its links' 0.8), recorded with what it was used for and whether it
// was made on the calibration run's CPU and core count; a file's own probe wins. Bad profiles are
// input errors naming the path; a profile without --simulate or with --model is refused.
// A profile's document made from a fake profile run on "Test CPU", 2 cores (its runs' probes: 1,
// 3 and 2 GB/s, round trips 8, 1 and 3 ms; one run without a probe).
nlohmann::json test_profile_document() {
  nlohmann::json run_result = {
      {"env", {{"cpu_model", "Test CPU"}, {"cpu_cores", 2}}},
      {"network",
       {{"nodes", 2},
        {"ranks_per_node", 2},
        {"qdisc", "tbf"},
        {"links",
         {{{"requested_bits_per_s", 1e9}, {"probed_up_bytes_per_s", 100e6}, {"probed_down_bytes_per_s", 100e6}}}}}},
      {"runs", nlohmann::json::array()}};
  for (const auto& [rate, rt] : std::vector<std::pair<double, double>>{{1e9, 8e-3}, {3e9, 1e-3}, {2e9, 3e-3}}) {
    nlohmann::json run;
    run["network"]["simulation"]["intra_node"] = {
        {"bytes_per_s", rate}, {"latency_s", rt}, {"repetitions", 5}, {"runs", 1}, {"source", "probed: x"}};
    run_result["runs"].push_back(run);
  }
  run_result["runs"].push_back({{"mode", "ps"}});
  return host_profile_document(run_result, "the-host", "dpbench profile");
}

TEST(Project, AHostProfileGivesTheIntraNodeLinkNoFileProbed) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const nlohmann::json profile_doc = test_profile_document();
  EXPECT_EQ(profile_doc["intra_node"]["bytes_per_s"], 2e9);
  EXPECT_NEAR(profile_doc["intra_node"]["latency_s"].get<double>(), 4e-3, 1e-15) << "the mean, not the median";
  EXPECT_EQ(profile_doc["intra_node"]["probes"].size(), 3u);
  EXPECT_EQ(profile_doc["intra_node"]["repetitions"], 15);
  EXPECT_EQ(profile_doc["machine"]["host"], "the-host");
  EXPECT_EQ(profile_doc["machine"]["cpu_model"], "Test CPU");
  const HostProfile profile = host_profile_from(profile_doc, "host.json");
  EXPECT_NEAR(profile.intra_round_trip_s, 4e-3, 1e-15);

  IntraNodeCase c = intra_node_case();
  const nlohmann::json &plain_doc = c.plain_doc, &probed_doc = c.probed_doc;
  ProjectOptions& o = c.options;
  const nlohmann::json plain = project(o, {plain_doc}, nullptr);
  o.host_profile = profile;
  const nlohmann::json profiled = project(o, {plain_doc}, nullptr);
  const auto& t = profiled["topology"];
  ASSERT_TRUE(t.contains("intra_node_calibration")) << t.dump();
  EXPECT_EQ(t["intra_node_calibration"]["bytes_per_s"], 2e9);
  EXPECT_NEAR(t["intra_node_calibration"]["latency_s"].get<double>(), 2e-3, 1e-15);
  EXPECT_EQ(t["intra_node_calibration"]["host_profile"], "host.json");
  EXPECT_NEAR(t["requested_rate_share"]["share"].get<double>(), 0.8, 1e-12);
  EXPECT_EQ(t["host_profile"]["path"], "host.json");
  EXPECT_EQ(t["host_profile"]["used_for"], nlohmann::json::array({"requested_rate_share", "intra_node"}));
  EXPECT_FALSE(t["host_profile"]["same_machine_as_calibration"].get<bool>()) << "Test CPU, 2 cores against 4 cores";
  EXPECT_GT(simulated_step_at(profiled, "allreduce", 4), simulated_step_at(plain, "allreduce", 4) + 4e-3)
      << "the ring's intra-node steps at 4 ms each";
  const nlohmann::json own = project(o, {probed_doc}, nullptr);
  EXPECT_EQ(own["topology"]["intra_node_calibration"]["latency_s"], 1e-3) << "the file's own probe";
  EXPECT_EQ(own["topology"]["host_profile"]["used_for"], nlohmann::json::array({"requested_rate_share"}));
  nlohmann::json same_doc = plain_doc;
  same_doc["env"] = {{"cpu_model", "Test CPU"}, {"cpu_cores", 2}};
  EXPECT_TRUE(project(o, {same_doc}, nullptr)["topology"]["host_profile"]["same_machine_as_calibration"].get<bool>());

  const auto refused = [](const std::function<void()>& f, const std::string& needle) {
    try {
      f();
      ADD_FAILURE() << needle << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json bad = profile_doc;
  bad["schema"]["name"] = "dpbench-result";
  refused([&] { host_profile_from(bad, "h.json", "--host-profile "); },
          "--host-profile h.json: not a dpbench host profile");
  bad = profile_doc;
  bad["schema"]["version"] = 2;
  refused([&] { host_profile_from(bad, "h.json"); }, "h.json: host profile version 2");
  bad = profile_doc;
  bad["intra_node"]["latency_s"] = 0;
  refused([&] { host_profile_from(bad, "h.json"); }, "h.json: intra_node.latency_s is missing or not a positive");
  refused([&] { read_host_profile("/nonexistent/h.json"); }, "--host-profile /nonexistent/h.json: cannot open");
  bad = profile_doc;
  bad["schema"]["version"] = "1";
  refused([&] { host_profile_from(bad, "h.json"); }, "h.json: a malformed host profile");
  bad = profile_doc;
  bad["links"][0]["requested_bits_per_s"] = "1gbit";
  refused([&] { host_profile_from(bad, "h.json"); }, "h.json: a link's requested_bits_per_s is not a number");
  o.topology.simulate = false;
  refused([&] { project(o, {plain_doc}, nullptr); }, "--host-profile host.json: the profile is played by --simulate");
  EXPECT_THROW(host_profile_document({{"env", nlohmann::json::object()},
                                      {"network", nlohmann::json::object()},
                                      {"runs", {{{"mode", "ps"}}}}},
                                     "h", "c"),
               Error);
  // On the command line: one line, exit 2, nothing written.
  TempDir tmp;
  const std::string result = (tmp.path() / "result.json").string(), out = (tmp.path() / "p.json").string();
  std::ofstream(result) << plain_doc.dump();
  const auto one_line_exit_2 = [&](const std::string& args, const std::string& needle) {
    const Outcome bad = shell(std::string(DPBENCH_BINARY) + " " + args + " -o " + out, tmp.path());
    EXPECT_EQ(bad.exit_code, 2) << args << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << bad.err;
    EXPECT_NE(bad.err.find(needle), std::string::npos) << args << bad.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << args;
  };
  one_line_exit_2(fmt::format("project {} --simulate --host-profile {}", result, result),
                  fmt::format("--host-profile {}: not a dpbench host profile", result));
  one_line_exit_2("profile --ranks-per-node 1", "--ranks-per-node 1: the profile probes a node's local ranks");
  one_line_exit_2("profile --link fast", "--link");
}

// Ranks sharing the host's cores (analysis/host_profile.hpp ranks_sharing_cores): each job of the
// profile is a point, each dense collective's median over the job's runs of its probe fits
// (all-reduce 2, 5 and 3 ms at 8 ranks: 3 ms; a per-message kind's fit and a run without a probe
// left out); the points ascend in ranks whatever order the jobs came in. A projection on the
// emulated link pays, on each message between nodes beyond 2 ranks per core (here 4 ranks on 2
// cores), the line from nothing at 4 ranks through the points beyond them (a point at 4 ranks is
// not used): with 0 ms at 6 ranks and 3 ms at 8, 4 and 6 ranks pay nothing and 8 ranks 3 ms on
// each of the ring's messages; a profile made before the points (one block, 3 ms at 8 ranks) is
// the line from 4 ranks, 1.5 ms a message at 6. A block whose ranks do not exceed its cores or do
// not ascend, an unknown collective or a negative cost is an input error naming the path;
// `profile --shared-nodes 1` and a node count given twice are refused, and each sharing job's
// batch splits over its ranks.
TEST(Project, AHostProfilesRanksSharingCoresSlowEachMessageBeyondTwoRanksPerCore) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const auto job = [](int nodes, const std::vector<double>& allreduce_s) {
    nlohmann::json shared = {{"env", {{"cpu_cores", 2}}}, {"network", {{"nodes", nodes}, {"ranks_per_node", 1}}}};
    for (const double o : allreduce_s) {
      nlohmann::json run = {{"mode", "allreduce"}};
      run["network"]["simulation"]["calibration"]["collectives"] = {
          {{"collective", "allreduce"}, {"floats", 1000}, {"efficiency", 0.5}, {"overhead_at_link_s", o}},
          {{"collective", "p2p"}, {"floats", 1000}, {"efficiency", 1.0}, {"overhead_s", 9e-3}}};
      shared["runs"].push_back(run);
    }
    shared["runs"].push_back({{"mode", "ps"}});
    return shared;
  };
  const nlohmann::json eight = job(8, {2e-3, 5e-3, 3e-3}), six = job(6, {0.0}), four = job(4, {1e-3, 1e-3});
  const nlohmann::json block = shared_cores_block({eight, four, six});
  EXPECT_EQ(block["ranks"], 8);
  EXPECT_EQ(block["cores"], 2);
  EXPECT_EQ(block["overhead_s"], nlohmann::json({{"allreduce", 3e-3}})) << block.dump();
  ASSERT_EQ(block["points"].size(), 3u);
  EXPECT_EQ(block["points"][0]["ranks"], 4);
  EXPECT_EQ(block["points"][1]["ranks"], 6);
  EXPECT_EQ(block["points"][1]["overhead_s"], nlohmann::json({{"allreduce", 0.0}}));
  EXPECT_EQ(block["points"][2]["probes"].size(), 3u);
  nlohmann::json few = eight;
  few["network"]["nodes"] = 2;
  EXPECT_THROW(shared_cores_block({few}), Error) << "2 ranks on 2 cores";
  few = eight;
  few["runs"] = nlohmann::json::array({{{"mode", "ps"}}});
  EXPECT_THROW(shared_cores_block({few}), Error) << "no run with a fit";
  EXPECT_THROW(shared_cores_block({eight, eight}), Error) << "two jobs of 8 ranks";

  nlohmann::json with = test_profile_document();
  with["ranks_sharing_cores"] = block;
  nlohmann::json one_point = with;  // as profiles made before the points: the 8-rank job alone
  one_point["ranks_sharing_cores"].erase("points");
  one_point["ranks_sharing_cores"]["probes"] = block["points"][2]["probes"];
  nlohmann::json without = with;
  without["ranks_sharing_cores"] = nullptr;
  IntraNodeCase c = intra_node_case();
  ProjectOptions& o = c.options;
  o.topology.ranks_per_node = 1;
  const auto projected = [&](const nlohmann::json& doc, int max_ranks) {
    o.max_ranks = max_ranks;
    o.host_profile = host_profile_from(doc, "host.json");
    return project(o, {c.plain_doc}, nullptr);
  };
  const nlohmann::json shared_proj = projected(with, 8), plain = projected(without, 8);
  const nlohmann::json shared_six = projected(with, 6), plain_six = projected(without, 6);
  const nlohmann::json line_six = projected(one_point, 6);
  const auto& t = shared_proj["topology"];
  ASSERT_TRUE(t.contains("ranks_sharing_cores")) << t.dump();
  EXPECT_EQ(t["ranks_sharing_cores"]["from_ranks"], 4);
  EXPECT_EQ(t["ranks_sharing_cores"]["points"].size(), 3u);
  EXPECT_NE(std::find(t["host_profile"]["used_for"].begin(), t["host_profile"]["used_for"].end(),
                      "ranks_sharing_cores"),
            t["host_profile"]["used_for"].end());
  EXPECT_FALSE(plain["topology"].contains("ranks_sharing_cores"));
  EXPECT_EQ(simulated_step_at(shared_proj, "allreduce", 4), simulated_step_at(plain, "allreduce", 4))
      << "4 ranks on 2 cores pay nothing";
  EXPECT_GT(simulated_step_at(shared_proj, "allreduce", 8), simulated_step_at(plain, "allreduce", 8) + 14 * 2e-3)
      << "a ring of 8: 14 messages of each bucket, 3 ms each";
  EXPECT_EQ(simulated_step_at(shared_six, "allreduce", 6), simulated_step_at(plain_six, "allreduce", 6))
      << "the 6-rank point costs nothing";
  EXPECT_GT(simulated_step_at(line_six, "allreduce", 6), simulated_step_at(plain_six, "allreduce", 6) + 10 * 1.5e-3)
      << "one point: the line from 4 ranks, 1.5 ms on each of a ring of 6's 10 messages";
  EXPECT_EQ(line_six["topology"]["ranks_sharing_cores"]["points"].size(), 1u);

  const auto refused = [](const nlohmann::json& doc, const std::string& needle) {
    try {
      host_profile_from(doc, "h.json");
      ADD_FAILURE() << needle << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json bad = with;
  bad["ranks_sharing_cores"]["points"][0]["ranks"] = 2;
  refused(bad, "h.json: the host profile's ranks_sharing_cores has 2 ranks on 2 cores");
  bad = one_point;
  bad["ranks_sharing_cores"]["ranks"] = 2;
  refused(bad, "h.json: the host profile's ranks_sharing_cores has 2 ranks on 2 cores");
  bad = with;
  bad["ranks_sharing_cores"]["points"][1]["ranks"] = 9;
  refused(bad, "h.json: the host profile's ranks_sharing_cores points are not in ascending ranks (8 after 9)");
  bad = with;
  bad["ranks_sharing_cores"]["points"][2]["overhead_s"]["ring"] = 1e-3;
  refused(bad, "h.json: ranks_sharing_cores.overhead_s: ring is not a collective");
  bad = one_point;
  bad["ranks_sharing_cores"]["overhead_s"]["allreduce"] = -1e-3;
  refused(bad, "h.json: ranks_sharing_cores.overhead_s.allreduce is not a non-negative number");
  TempDir tmp;
  const Outcome one = shell(std::string(DPBENCH_BINARY) + " profile --shared-nodes 1 -o p.json", tmp.path());
  EXPECT_EQ(one.exit_code, 2) << one.err;
  EXPECT_EQ(std::count(one.err.begin(), one.err.end(), '\n'), 1) << one.err;
  EXPECT_NE(one.err.find("--shared-nodes 1: give 0 (no such job) or 2 to 64 nodes"), std::string::npos) << one.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "p.json"));
  for (const int nodes : {3, 5, 6, 8}) {  // each job's batch splits evenly over its ranks
    const std::vector<std::string> args = profile_run_args(ProfileOptions{}, nodes, 1, 2, "o.json");
    const auto batch = std::find(args.begin(), args.end(), "--batch-size");
    ASSERT_NE(batch, args.end()) << nodes;
    EXPECT_EQ(std::stoi(*(batch + 1)), 32 * nodes);
    EXPECT_EQ(args.back(), "o.json");
  }
  const std::vector<std::string> local = profile_run_args(ProfileOptions{}, 2, 2, 5, "o.json");
  EXPECT_EQ(std::count(local.begin(), local.end(), "--batch-size"), 0) << "the local ranks' job keeps run's batch";
  const Outcome twice = shell(std::string(DPBENCH_BINARY) + " profile --shared-nodes 8,6,8 -o p.json", tmp.path());
  EXPECT_EQ(twice.exit_code, 2) << twice.err;
  EXPECT_NE(twice.err.find("--shared-nodes 8,6,8: a job's nodes given twice"), std::string::npos) << twice.err;
  EXPECT_FALSE(std::filesystem::exists(tmp.path() / "p.json"));
}

// The host's reductions (core/reduction.hpp) on the files' emulated link: the files' runs' probes
// (network.simulation.reduction, here 100 MB/s at every size) are played by the simulated
// points, recorded under calibration.reduction: ps's gloo reduce at 4 ranks sums 3 chunks of its
// 4 MB gradient's quarter on every rank, one after the other, 30 ms more. Files without a probe
// take a host profile's (its runs' median per size, 100 MB/s of 50, 100 and 200 at 4 KiB),
// recorded as used for "reduction"; without either the adds cost nothing. A profile whose
// reduction is not a rate list is an input error naming the path.
TEST(Project, TheHostsReductionsComeFromTheFilesOrTheHostProfile) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  IntraNodeCase c = intra_node_case();
  ProjectOptions& o = c.options;
  const nlohmann::json plain = project(o, {c.plain_doc}, nullptr);
  EXPECT_FALSE(plain["calibration"].contains("reduction"));
  nlohmann::json cluster = fake_cluster_run(2, 125e6, 0.1, 0.05, 0.05);
  cluster["network"]["simulation"]["reduction"] = {{"rates", {{{"bytes", 4}, {"bytes_per_s", 1e8}}}}, {"method", "x"}};
  const nlohmann::json reduced = project(o, {calibration_doc(cluster)}, nullptr);
  ASSERT_TRUE(reduced["calibration"].contains("reduction")) << reduced["calibration"].dump();
  EXPECT_EQ(reduced["calibration"]["reduction"]["rates"][0]["bytes_per_s"], 1e8);
  EXPECT_EQ(reduced["calibration"]["reduction"]["runs"], 1);
  const double sums = 3 * 4.0 * 250'000 / 1e8;
  const auto added = [&](const nlohmann::json& proj, const char* curve) {
    return simulated_step_at(proj, curve, 4) - simulated_step_at(plain, curve, 4);
  };
  EXPECT_GT(added(reduced, "ps_collective"), 0.5 * sums);
  EXPECT_LT(added(reduced, "ps_collective"), 1.01 * sums) << "at most the sums (some overlap the send buffer's tail)";
  EXPECT_NEAR(added(reduced, "ps_p2p"), 3 * 4.0 * 1e6 / 1e8, 0.012) << "the p2p root sums 3 whole gradients";

  nlohmann::json profile_doc = test_profile_document();
  nlohmann::json profile_run = {
      {"env", nlohmann::json::object()}, {"network", profile_doc["cluster"]}, {"runs", nlohmann::json::array()}};
  for (double rate : {50e6, 200e6, 100e6}) {
    nlohmann::json run;
    run["network"]["simulation"]["intra_node"] = {
        {"bytes_per_s", 1e9}, {"latency_s", 1e-3}, {"repetitions", 5}, {"runs", 1}, {"source", "probed: x"}};
    run["network"]["simulation"]["reduction"] = {{"rates", {{{"bytes", 4096}, {"bytes_per_s", rate}}}},
                                                 {"method", "x"}};
    profile_run["runs"].push_back(run);
  }
  profile_doc = host_profile_document(profile_run, "the-host", "dpbench profile");
  ASSERT_EQ(profile_doc["reduction"]["rates"].size(), 1u);
  EXPECT_EQ(profile_doc["reduction"]["rates"][0]["bytes_per_s"], 100e6);
  EXPECT_EQ(profile_doc["reduction"]["runs"], 3);
  o.host_profile = host_profile_from(profile_doc, "host.json");
  EXPECT_EQ(o.host_profile->reduction.rates.at(0).bytes_per_s, 100e6);
  const nlohmann::json profiled = project(o, {c.plain_doc}, nullptr);
  EXPECT_EQ(profiled["calibration"]["reduction"]["host_profile"], "host.json");
  const auto& used = profiled["topology"]["host_profile"]["used_for"];
  EXPECT_NE(std::find(used.begin(), used.end(), "reduction"), used.end()) << used.dump();
  EXPECT_GT(added(profiled, "ps_collective"), 0.5 * sums);
  const nlohmann::json files_win = project(o, {calibration_doc(cluster)}, nullptr);
  EXPECT_FALSE(files_win["calibration"]["reduction"].contains("host_profile")) << "the files' own probe wins";

  profile_doc["reduction"]["rates"][0]["bytes_per_s"] = 0;
  try {
    host_profile_from(profile_doc, "h.json");
    ADD_FAILURE() << "a zero reduction rate accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "h.json: a reduction rate's bytes_per_s is missing or not a positive number");
  }
}

// `run --host-profile` and `sweep --host-profile` record the profile in the result
// (env.host_profile: its path, creation time, machine and whole document), and `project
// --simulate` on such a file plays it without --host-profile (its source "recorded in FILE"); a
// --host-profile given wins. A profile that is not one, or a malformed record, is a one-line input
// error before anything runs or is written.
TEST(Project, ARunRecordsItsHostProfileAndTheProjectionPlaysIt) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  TempDir tmp;
  const nlohmann::json profile_doc = test_profile_document();
  const std::string host = (tmp.path() / "host.json").string(), run = (tmp.path() / "run.json").string(),
                    sweep = (tmp.path() / "sweep.json").string(), out = (tmp.path() / "p.json").string();
  std::ofstream(host) << profile_doc.dump();
  const std::string bin(DPBENCH_BINARY);
  // `command ... -o path` run with the profile: its result's env.host_profile.
  const auto recorded_by = [&](const std::string& command, const std::string& path) {
    const Outcome o = shell(fmt::format("{} {} --max-steps 3 --warmup-steps 1 --repetitions 1 --no-eval -q "
                                        "--host-profile {} -o {}",
                                        bin, command, host, path),
                            tmp.path());
    EXPECT_EQ(o.exit_code, 0) << command << o.err;
    return o.exit_code == 0 ? nlohmann::json::parse(slurp(path))["env"]["host_profile"] : nlohmann::json();
  };
  const nlohmann::json recorded = recorded_by("run --device cpu --ranks 2 --mode allreduce", run);
  EXPECT_EQ(recorded["path"], host);
  EXPECT_EQ(recorded["created"], profile_doc["created"]);
  EXPECT_EQ(recorded["machine"]["cpu_model"], "Test CPU");
  EXPECT_EQ(recorded["document"], profile_doc);
  EXPECT_EQ(recorded_by("sweep --device cpu --ranks 2 --modes ps --batch-sizes 64 --num-workers 0", sweep)["document"],
            profile_doc);

  // A calibration file on the emulated link that probed no node's local ranks, as recorded by a
  // run given the profile: the projection plays the profile's intra-node link from the record.
  IntraNodeCase c = intra_node_case();
  nlohmann::json calibration = c.plain_doc;
  calibration["schema"] = {{"name", kSchemaName}, {"version", kSchemaVersion}};
  calibration["env"]["host_profile"] = recorded;
  const std::string file = (tmp.path() / "calibration.json").string();
  std::ofstream(file) << calibration.dump();
  const std::string project_args = fmt::format("project {} --simulate --max-ranks 4 --ranks-per-node 2 -q", file);
  const std::string project = bin + " " + project_args;
  const Outcome projected = shell(project + " -o " + out, tmp.path());
  ASSERT_EQ(projected.exit_code, 0) << projected.err;
  const nlohmann::json h = nlohmann::json::parse(slurp(out))["topology"]["host_profile"];
  EXPECT_EQ(h["source"], "recorded in " + file);
  EXPECT_EQ(h["path"], host);
  EXPECT_EQ(h["used_for"], nlohmann::json::array({"requested_rate_share", "intra_node"}));
  EXPECT_NE(projected.out.find("recorded in " + file), std::string::npos) << projected.out;
  nlohmann::json other = profile_doc;
  other["intra_node"]["latency_s"] = 6e-3;
  const std::string other_path = (tmp.path() / "other.json").string();
  std::ofstream(other_path) << other.dump();
  ASSERT_EQ(shell(project + " --host-profile " + other_path + " -o " + out, tmp.path()).exit_code, 0);
  const nlohmann::json given = nlohmann::json::parse(slurp(out))["topology"];
  EXPECT_EQ(given["host_profile"]["source"], "--host-profile");
  EXPECT_NEAR(given["intra_node_calibration"]["latency_s"].get<double>(), 3e-3, 1e-15) << "the given profile's";
  EXPECT_EQ(recorded_host_profile(c.plain_doc, "f.json"), std::nullopt);

  const auto one_line_exit_2 = [&](const std::string& args, const std::string& needle, const std::string& written) {
    const Outcome bad = shell(bin + " " + args, tmp.path());
    EXPECT_EQ(bad.exit_code, 2) << args << bad.err;
    EXPECT_EQ(std::count(bad.err.begin(), bad.err.end(), '\n'), 1) << args << bad.err;
    EXPECT_NE(bad.err.find(needle), std::string::npos) << args << bad.err;
    EXPECT_FALSE(std::filesystem::exists(written)) << args;
  };
  const std::string none = (tmp.path() / "none.json").string();
  one_line_exit_2(fmt::format("run --device cpu --ranks 2 --max-steps 2 --host-profile {} -o {}", file, none),
                  fmt::format("--host-profile {}: not a dpbench host profile", file), none);
  one_line_exit_2(fmt::format("sweep --device cpu --ranks 2 --max-steps 2 --host-profile /nonexistent.json -o {}",
                              none),
                  "--host-profile /nonexistent.json: cannot open the file", none);
  calibration["env"]["host_profile"].erase("document");
  std::ofstream(file) << calibration.dump();
  one_line_exit_2(project_args + " -o " + none, file + ": env.host_profile: not a recorded host profile", none);
}

// The projection says which machine its compute came from: the calibration run's file's env (the
// 1-rank run's, not the 2-rank file's), keys it lacks null.
TEST(Project, RecordsTheMachineOfItsCalibrationRun) {
  const nlohmann::json one = {{"env", {{"cpu_cores", 4}, {"cpu_model", "Calibration CPU"}, {"host", "h1"}}},
                              {"runs", {fake_run("allreduce", 1, 0.1, 0.0)}}};
  const nlohmann::json two = {{"env", {{"cpu_cores", 64}, {"cpu_model", "Other CPU"}, {"host", "h2"}}},
                              {"runs", {fake_run("allreduce", 2, 0.12, 0.02)}}};
  ProjectOptions o;
  o.max_ranks = 4;
  o.link_model = "ib-ndr";
  const nlohmann::json m = project(o, {two, one}, nullptr)["calibration"]["machine"];
  EXPECT_EQ(m["cpu_model"], "Calibration CPU");
  EXPECT_EQ(m["cpu_cores"], 4);
  EXPECT_EQ(m["host"], "h1");
  EXPECT_TRUE(m["git_commit"].is_null());
}

// The calibration run's DDP buckets (its ddp_buckets, cut at its tensors) are the buckets the
// projection's allreduce reduces: one recorded bucket of the 1,000,000 floats plays half the
// ring messages of the flat cut (1 MiB, then the rest: two buckets), three recorded buckets three
// times as many; buckets that do not cut the parameters into ranges are an input error naming the key.
TEST(Project, TheCalibrationRunsDdpBucketsAreTheProjectionsBuckets) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  ProjectOptions o = simulated_project_options(2);
  const auto messages_at_2 = [&](const nlohmann::json& buckets) {
    nlohmann::json doc = one_rank_calibration();
    if (!buckets.is_null()) doc["runs"][0]["ddp_buckets"] = buckets;
    const nlohmann::json projection = project(o, {doc}, nullptr);
    for (const auto& pt : projection["points"]) {
      if (pt["curve"] == "allreduce" && pt["world_size"] == 2) return pt["simulation"]["messages"].get<long>();
    }
    return -1L;
  };
  const long one = messages_at_2(nlohmann::json::array({{0, 1000000}}));
  ASSERT_GT(one, 0);
  EXPECT_EQ(messages_at_2(nullptr), 2 * one) << "the flat cut: two buckets";
  EXPECT_EQ(messages_at_2(nlohmann::json::array({{600000, 400000}, {100000, 500000}, {0, 100000}})), 3 * one);
  for (const nlohmann::json& bad : {nlohmann::json::array({{0, 500000}}), nlohmann::json::array({{0, 1000000}, {0, 1}}),
                                    nlohmann::json::array({{999999, 2}})}) {
    try {
      messages_at_2(bad);
      ADD_FAILURE() << bad.dump() << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("ddp_buckets"), std::string::npos) << e.what();
    }
  }
}

// A rate the projection is asked for (--node-link, --node-link-of) is a line rate: on the files'
// emulated link, whose nodes were given 100 Mbit/s and whose probes got 0.9 of it (each link's
// slower direction; the median over links), every NIC given a rate is played at 0.9 of it,
// recorded as topology.requested_rate_share. Without --node-link the NICs keep the probed link's
// own rate, and on a preset link (ib-ndr) the share is not carried.
TEST(Project, RequestedRatesArePlayedAtTheEmulatedLinksMeasuredShare) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  nlohmann::json cluster = fake_cluster_run(2, 11.25e6, 0.42, 0.32, 0.32);
  cluster["cluster"]["links"] = nlohmann::json::array();
  for (const double down : {12.0e6, 11.25e6}) {
    cluster["cluster"]["links"].push_back(
        {{"requested_bits_per_s", 100e6}, {"probed_up_bytes_per_s", 11.25e6}, {"probed_down_bytes_per_s", down}});
  }
  const nlohmann::json doc = {{"env", {{"cpu_cores", 4}}}, {"runs", {fake_run("allreduce", 1, 0.1, 0.0), cluster}}};
  ProjectOptions o;
  o.max_ranks = 4;
  o.topology.simulate = true;
  const auto nic = [](const nlohmann::json& proj, int node) {
    return proj["topology"]["platform_at_max_ranks"]["nodes"][node]["up_bytes_per_s"].get<double>();
  };
  const nlohmann::json probed = project(o, {doc}, nullptr);
  EXPECT_NEAR(probed["topology"]["requested_rate_share"]["share"].get<double>(), 0.9, 1e-12);
  EXPECT_EQ(probed["topology"]["requested_rate_share"]["links"], 2);
  EXPECT_NEAR(nic(probed, 0), 11.25e6, 1e-3) << "the probed link's own rate";
  o.topology.node_link = "1gbit";
  o.topology.node_link_of = {"3=200mbit"};
  const nlohmann::json asked = project(o, {doc}, nullptr);
  EXPECT_NEAR(nic(asked, 0), 0.9 * 125e6, 1e-3);
  EXPECT_NEAR(nic(asked, 3), 0.9 * 25e6, 1e-3);
  nlohmann::json unprobed_doc = doc;
  unprobed_doc["runs"][1]["cluster"].erase("links");
  const nlohmann::json unprobed = project(o, {unprobed_doc}, nullptr);
  EXPECT_TRUE(unprobed["topology"]["requested_rate_share"].is_null());
  EXPECT_NEAR(nic(unprobed, 0), 125e6, 1e-3);
  o.link_model = "ib-ndr";
  const nlohmann::json preset = project(o, {doc}, nullptr);
  EXPECT_TRUE(preset["topology"]["requested_rate_share"].is_null());
  EXPECT_NEAR(nic(preset, 0), 125e6, 1e-3);
}

// --held-out: a sweep run of 4 nodes at 1 Gbit/s whose node 3 was given 250 Mbit/s is predicted
// on that setting (--node-link 1gbit, --node-link-of 3=250mbit) at its own global batch: the
// prediction is the projection made with those options, its error predicted / measured - 1, and
// a run 20 % slower than predicted is beyond 15 % and within 25 %. A run of 3 nodes is predicted
// by the projection to 3 ranks (its last point). A file without a cluster and a zero --max-error
// are input errors naming them.
TEST(Project, HeldOutRunsArePredictedOnTheirOwnSetting) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const nlohmann::json calibration = one_rank_calibration();
  ProjectOptions o = simulated_project_options(4);
  o.per_rank_batch = 0;
  nlohmann::json links = nlohmann::json::array();
  for (int n = 0; n < 4; ++n) links.push_back({{"node", n}, {"requested_rate", n == 3 ? "250mbit" : "1gbit"}});
  nlohmann::json run = fake_run("allreduce", 4, 1.0, 0.0);
  run["global_batch"] = 40;
  run["status"] = "ok";
  run["strategy"] = {{"projection", "allreduce"}, {"label", "allreduce (ring)"}};
  run["cluster"] = {{"links", links}, {"nodes", 4}, {"ranks_per_node", 1}};
  // The projection a user would make for that setting.
  ProjectOptions direct = o;
  direct.topology.node_link = "1gbit";
  direct.topology.node_link_of = {"3=250mbit"};
  direct.scaling = "weak";
  direct.per_rank_batch = 10;
  double expected = 0;
  const nlohmann::json projected = project(direct, {calibration}, nullptr);
  for (const auto& pt : projected["points"]) {
    if (pt["curve"] == "allreduce" && pt["world_size"] == 4) expected = pt["simulation"]["simulated_step_s"];
  }
  ASSERT_GT(expected, 0.0);
  run["step_time_s"] = {{"p50", 1.2 * expected}};
  const nlohmann::json held_doc = {{"runs", {run}}};
  const nlohmann::json h = validate_held_out(o, {calibration}, {{"sweep.json", held_doc}}, 0.15);
  ASSERT_EQ(h["runs"].size(), 1u);
  const auto& r = h["runs"][0];
  EXPECT_EQ(r["node_link"], "1gbit");
  EXPECT_EQ(r["node_link_of"], nlohmann::json::array({"3=250mbit"}));
  EXPECT_NEAR(r["predicted_step_s"].get<double>(), expected, 1e-12 * expected);
  EXPECT_NEAR(r["relative_error"].get<double>(), 1 / 1.2 - 1, 1e-9);
  EXPECT_FALSE(r["within"].get<bool>());
  EXPECT_EQ(h["beyond"], 1);
  EXPECT_EQ(validate_held_out(o, {calibration}, {{"sweep.json", held_doc}}, 0.25)["beyond"], 0);
  // Bad input names the file or the option.
  const auto refused = [&](const nlohmann::json& doc, double max_error, const std::string& needle) {
    try {
      validate_held_out(o, {calibration}, {{"bad.json", doc}}, max_error);
      ADD_FAILURE() << needle << ": accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  nlohmann::json no_cluster = run;
  no_cluster.erase("cluster");
  refused({{"runs", {no_cluster}}}, 0.15, "bad.json: not an emulated-cluster result");
  nlohmann::json three = run;
  three["world_size"] = 3;
  three["global_batch"] = 30;
  three["cluster"] = {{"links", nlohmann::json::array()}, {"nodes", 3}, {"ranks_per_node", 1}};
  for (int n = 0; n < 3; ++n) three["cluster"]["links"].push_back({{"node", n}, {"requested_rate", "1gbit"}});
  direct.topology.node_link_of.clear();
  direct.max_ranks = 3;
  double at_3 = 0;
  const nlohmann::json to_3 = project(direct, {calibration}, nullptr);
  for (const auto& pt : to_3["points"]) {
    if (pt["curve"] == "allreduce" && pt["world_size"] == 3) at_3 = pt["simulation"]["simulated_step_s"];
  }
  ASSERT_GT(at_3, 0.0);
  EXPECT_NE(at_3, expected);
  const nlohmann::json h3 = validate_held_out(o, {calibration}, {{"three.json", {{"runs", {three}}}}}, 0.15);
  ASSERT_EQ(h3["runs"].size(), 1u);
  EXPECT_EQ(h3["runs"][0]["world_size"], 3);
  EXPECT_NEAR(h3["runs"][0]["predicted_step_s"].get<double>(), at_3, 1e-12 * at_3);
  refused(held_doc, 0, "--max-error 0");
}

// A --platform file SimGrid cannot parse is an input error before any point is simulated.
TEST(Project, UnreadablePlatformFileIsAnInputError) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  TempDir dir;
  const auto bad = dir.path() / "bad.xml";
  std::ofstream(bad) << "<platform version=\"4.1\"><zone id=\"w\" routing=\"Full\">";
  const nlohmann::json doc = one_rank_calibration();
  ProjectOptions o = simulated_project_options(4);
  o.topology.platform_file = bad.string();
  try {
    project(o, {doc}, nullptr);
    ADD_FAILURE() << "a malformed platform file was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--platform " + bad.string()), std::string::npos) << e.what();
  }
}

// --what-if on 1 Gbit/s NICs, leaves of 2 nodes 8x oversubscribed: the non-blocking tree is
// faster for what crosses the uplinks, and each finding's figures are the points' own; on one
// switch the straggler slows every mode and ps p2p's root NIC saturates (every worker's
// gradient goes through it).
TEST(Project, WhatIfNamesTheRootsNicTheOrderAndTheStragglersCost) {
  if (!simulation_available()) GTEST_SKIP() << "this build has no SimGrid (libsimgrid-dev): simulation is unavailable";
  const nlohmann::json doc = one_rank_calibration();
  ProjectOptions o = simulated_project_options(16);
  o.topology.node_link = "1gbit";
  o.topology.nodes_per_leaf = 2;
  o.topology.oversubscription = 8;
  o.topology.what_if = true;
  const auto proj = project(o, {doc}, nullptr);
  std::map<std::string, nlohmann::json> at16;
  for (const auto& pt : proj["points"]) {
    if (pt["world_size"] == 16) at16[pt["curve"].get<std::string>()] = pt["simulation"];
  }
  ASSERT_EQ(at16.size(), 5u);
  EXPECT_LT(at16["ps_p2p"]["non_blocking_step_s"].get<double>(), at16["ps_p2p"]["simulated_step_s"].get<double>());
  std::map<std::string, int> kinds;
  for (const auto& f : proj["findings"]) {
    ++kinds[f["kind"].get<std::string>()];
    EXPECT_FALSE(f["text"].get<std::string>().empty());
    if (f["kind"] == "nic_saturation") {
      EXPECT_DOUBLE_EQ(f["time_fraction_at_largest"].get<double>(),
                       at16[f["curve"].get<std::string>()]["node0_nic_time_fraction"].get<double>());
    }
    if (f["kind"] == "straggler_cost") {
      EXPECT_EQ(f["world_size"], 16);
      for (const auto& [mode, sim] : at16) {
        EXPECT_DOUBLE_EQ(f["costs"][mode].get<double>(),
                         sim["straggler_step_s"].get<double>() / sim["simulated_step_s"].get<double>() - 1.0)
            << mode;
      }
    }
  }
  EXPECT_EQ(kinds["nic_saturation"], 2) << proj["findings"].dump();  // ps collective and p2p
  EXPECT_EQ(kinds["oversubscription_order"], 1);
  EXPECT_EQ(kinds["straggler_cost"], 1);
  // On one switch (no uplink slower than the straggler's half rate) the straggler slows every
  // mode, and there is no oversubscription to judge.
  o.topology.nodes_per_leaf = 0;
  const auto star = project(o, {doc}, nullptr);
  for (const auto& pt : star["points"]) {
    if (pt["world_size"] != 16) continue;
    EXPECT_GT(pt["simulation"]["straggler_step_s"].get<double>(), pt["simulation"]["simulated_step_s"].get<double>())
        << pt["curve"];
    EXPECT_FALSE(pt["simulation"].contains("non_blocking_step_s"));
  }
  // There ps p2p's root NIC is the bottleneck (in the tree, the uplinks were); the collective's
  // tree reduce spreads the sums over the ranks.
  bool saturated = false;
  for (const auto& f : star["findings"]) {
    EXPECT_NE(f["kind"], "oversubscription_order");
    if (f["kind"] == "nic_saturation" && f["curve"] == "ps_p2p") {
      saturated = !f["world_size"].is_null() && f["time_fraction_at_largest"].get<double>() >= kNicSaturated;
      EXPECT_TRUE(saturated) << f.dump();
    }
  }
  EXPECT_TRUE(saturated) << star["findings"].dump();
}

}  // namespace
}  // namespace dpbench
