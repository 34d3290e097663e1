// Tests of multi-process launch and failure handling: `mpirun -np N dpbench run --comm mpi`
// against in-process `--comm local` ranks (same parameters, every rank in the JSON, same byte
// counts), a rank that throws, dies or stops answering (in-process and under mpirun: exit
// non-zero within the timeout, failing rank named, no result file), and launch errors (exit 2).
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/names.hpp"
#include "launch/resolve.hpp"
#include "core/mpi_comm.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

struct LaunchOutcome {
  int exit_code = -1;
  std::string err;
  double seconds = 0;
};

const std::string kArgs =
    " run --device cpu --data synthetic --input 64 --synthetic-samples 6000 --hidden 32,16 --batch-size 60 "
    "--max-steps 20 --no-eval -q";

// OpenMPI refuses to start as root (CI runs as root) unless told it is fine.
const std::string kMpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np ";

#define REQUIRE_MPI()                             \
  do {                                            \
    require_mpi();                                \
    if (IsSkipped() || HasFatalFailure()) return; \
  } while (0)

class Launch : public ::testing::Test {
 public:
  std::string path(const std::string& name) const { return (tmp_.path() / name).string(); }

 protected:
  LaunchOutcome sh(const std::string& command) {
    const fs::path err = tmp_.path() / "stderr.txt";
    const auto t0 = std::chrono::steady_clock::now();
    const int status = std::system((command + " >/dev/null 2>" + err.string()).c_str());
    LaunchOutcome o;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    o.err = slurp(err);
    return o;
  }
  // Skips (in a build without MPI) or fails (mpirun missing) the calling test: use through
  // REQUIRE_MPI(), which returns from the test body.
  void require_mpi() {
    if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
    ASSERT_EQ(std::system("command -v mpirun >/dev/null"), 0) << "built with MPI but mpirun is not on PATH";
  }
  TempDir tmp_;
};

// The launch room's names: every spelling parses back to its value, JSON writes the spelling, an
// unknown one is one line naming the option and the choices, and the cluster's launchers say
// which backend their ranks meet over and which take PyTorch's explicit form.
TEST(LaunchNames, EverySpellingRoundTripsAndAnUnknownOneIsNamed) {
  for (Backend b : {Backend::local, Backend::mpi, Backend::gloo, Backend::nccl}) EXPECT_EQ(parse_backend(name(b)), b);
  for (Launcher k :
       {Launcher::threads, Launcher::mpirun, Launcher::env, Launcher::tcp, Launcher::file, Launcher::srun}) {
    EXPECT_EQ(parse_launcher(name(k), "--x"), k);
  }
  const std::vector<Launcher> cluster = {Launcher::env,      Launcher::tcp,    Launcher::file,
                                         Launcher::torchrun, Launcher::mpirun, Launcher::srun};
  for (Launcher l : cluster) {
    EXPECT_EQ(parse_cluster_launcher(name(l), "--launcher"), l);
    EXPECT_EQ(nlohmann::json(l).get<std::string>(), name(l));
    EXPECT_EQ(cluster_backend(l), l == Launcher::mpirun ? Backend::mpi : Backend::gloo) << name(l);
    EXPECT_EQ(explicit_init(l), l == Launcher::tcp || l == Launcher::file) << name(l);
  }
  EXPECT_EQ(name(Launcher::torchrun), "torchrun");
  try {
    parse_cluster_launcher("slurm", "--launcher");
    ADD_FAILURE() << "--launcher slurm parsed";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--launcher slurm: expected env, tcp, file, torchrun, mpirun or srun");
  }
  EXPECT_THROW(parse_backend("ucc"), InputError);
  EXPECT_THROW(parse_launcher("threads ", "--x"), InputError);
}

// The run's vocabulary (core/names.hpp): each value's spelling parses back to it, JSON and fmt
// write the spelling, and a wrong one is a one-line InputError naming the option and the choices.
TEST(RunNames, EverySpellingRoundTripsAndAnUnknownOneIsNamed) {
  for (Mode m : {Mode::ps, Mode::sharded_ps, Mode::allreduce}) {
    EXPECT_EQ(parse_mode(name(m)), m);
    EXPECT_EQ(nlohmann::json(m).get<Mode>(), m);
    EXPECT_EQ(fmt::format("{}", m), name(m));
  }
  for (Transport t : {Transport::collective, Transport::p2p, Transport::ring}) EXPECT_EQ(parse_transport(name(t)), t);
  for (DeviceKind d : {DeviceKind::cpu, DeviceKind::cuda}) EXPECT_EQ(parse_device_request(name(d)), d);
  EXPECT_EQ(parse_device_request("auto"), std::nullopt);
  for (Precision p : {Precision::fp32, Precision::tf32}) EXPECT_EQ(parse_precision(name(p)), p);
  for (CollectiveFamily f : {CollectiveFamily::ring, CollectiveFamily::gloo}) {
    EXPECT_EQ(nlohmann::json(f).get<CollectiveFamily>(), f);
  }
  EXPECT_EQ(nlohmann::json(Mode::sharded_ps).dump(), "\"sharded_ps\"");
  const auto message = [](auto parse) {
    try {
      parse();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("parsed");
  };
  EXPECT_EQ(message([] { parse_mode("dp"); }), "--mode dp: unknown mode (choose ps, sharded_ps or allreduce)");
  EXPECT_EQ(message([] { parse_transport("rdma", "--transports"); }),
            "--transports rdma: unknown transport (choose collective, p2p or ring)");
  EXPECT_EQ(message([] { parse_device_request("tpu"); }), "--device tpu: unknown device (choose auto, cpu or cuda)");
  EXPECT_EQ(message([] { parse_precision("bf16"); }), "--precision bf16: unknown precision (choose fp32 or tf32)");
  EXPECT_EQ(message([] { parse_backend("ucc"); }), "--comm ucc: unknown backend (choose local, mpi, gloo or nccl)");
  EXPECT_EQ(message([] { nlohmann::json("tree").get<CollectiveFamily>(); }),
            "collectives tree: unknown collectives (choose ring or gloo)");
}

TEST_F(Launch, MpiProcessesMatchInProcessRanks) {
  REQUIRE_MPI();
  for (int np : {2, 3}) {
    const std::string n = std::to_string(np);
    ASSERT_EQ(sh(kMpirun + n + " " + DPBENCH_BINARY + kArgs + " --comm mpi -o " + path("mpi.json") + " --save-params " +
                 path("mpi"))
                  .exit_code,
              0)
        << np;
    ASSERT_EQ(sh(std::string(DPBENCH_BINARY) + kArgs + " --ranks " + n + " -o " + path("local.json") +
                 " --save-params " + path("local"))
                  .exit_code,
              0)
        << np;
    const auto mpi = nlohmann::json::parse(slurp(path("mpi.json")));
    const auto local = nlohmann::json::parse(slurp(path("local.json")));
    for (const std::string mode : {"ps", "sharded_ps", "allreduce"}) {
      const auto a = read_f32(path("mpi-" + mode + ".f32"));
      const auto b = read_f32(path("local-" + mode + ".f32"));
      ASSERT_EQ(a.size(), b.size());
      ASSERT_GT(a.size(), 1000u);
      EXPECT_LT(relative_l2(a, b), 1e-5) << mode << " at " << np << " processes";
    }
    ASSERT_EQ(mpi["runs"].size(), 3u);  // every registered strategy by default
    for (std::size_t i = 0; i < mpi["runs"].size(); ++i) {
      const auto& run = mpi["runs"][i];
      EXPECT_EQ(run["world_size"], np);
      // Rank 0's file holds every rank's memory and timings, gathered over MPI.
      ASSERT_EQ(run["memory"]["per_rank"].size(), static_cast<std::size_t>(np));
      ASSERT_EQ(run["per_rank"].size(), static_cast<std::size_t>(np));
      for (int r = 0; r < np; ++r) {
        EXPECT_EQ(run["memory"]["per_rank"][r]["rank"], r);
        EXPECT_GT(run["memory"]["per_rank"][r]["peak_bytes"].get<double>(), 0);
        EXPECT_GT(run["per_rank"][r]["step_time_p50_s"].get<double>(), 0);
      }
      // The same byte counters for every backend.
      EXPECT_EQ(run["comm_bytes_per_step"], local["runs"][i]["comm_bytes_per_step"]) << run["mode"];
    }
    EXPECT_NE(mpi["env"]["mpi"].get<std::string>().find("Open MPI"), std::string::npos);
  }
}

// sharded_ps --staleness under its replay schedule: every rank's pushes and pulls on its MPI
// communication thread (MPI_THREAD_MULTIPLE), the same parameters and the same staleness histogram
// as in-process ranks.
TEST_F(Launch, MpiStaleSyncReplayMatchesInProcessRanks) {
  REQUIRE_MPI();
  const std::string args = kArgs + " --mode sharded_ps --staleness 2 --staleness-replay 5";
  ASSERT_EQ(sh(kMpirun + "3 " + DPBENCH_BINARY + args + " --comm mpi -o " + path("mpi.json") + " --save-params " +
               path("mpi"))
                .exit_code,
            0);
  ASSERT_EQ(sh(std::string(DPBENCH_BINARY) + args + " --ranks 3 -o " + path("local.json") + " --save-params " +
               path("local"))
                .exit_code,
            0);
  const auto a = read_f32(path("mpi-sharded_ps.f32")), b = read_f32(path("local-sharded_ps.f32"));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_LT(relative_l2(a, b), 1e-5);
  const auto mpi = nlohmann::json::parse(slurp(path("mpi.json"))),
             local = nlohmann::json::parse(slurp(path("local.json")));
  const auto& histogram = mpi["runs"][0]["staleness"]["histogram"];
  EXPECT_EQ(histogram, local["runs"][0]["staleness"]["histogram"]);
  long steps = 0;
  for (const auto& count : histogram) steps += count.get<long>();
  EXPECT_EQ(steps, 3 * (20 - 5));  // every timed step of every rank
  EXPECT_EQ(mpi["runs"][0]["staleness"]["bound"], 2);
}

// The contract for a failed run: non-zero exit within the timeout, the failing rank named, no
// result file (and no temporary one).
void expect_failed_run(const LaunchOutcome& o, const std::string& needle, const std::string& result, double limit_s) {
  EXPECT_NE(o.exit_code, 0) << o.err;
  EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  EXPECT_LT(o.seconds, limit_s) << o.err;
  EXPECT_FALSE(fs::exists(result));
  EXPECT_FALSE(fs::exists(result + ".tmp"));
}

TEST_F(Launch, InProcessRankThatThrowsEndsTheRun) {
  const LaunchOutcome o = sh("DPBENCH_FAULT=rank=1,step=5,kind=throw " + std::string(DPBENCH_BINARY) + kArgs +
                             " --ranks 2 --timeout 10 -o " + path("r.json"));
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  expect_failed_run(o, "rank 1: injected fault at step 5", path("r.json"), 10);
}

// A fault spec names one rank, by rank= or local_rank=, and kill-agent needs torchrun's agent:
// anything else is an input error, one line, exit 2, before training.
TEST_F(Launch, BadFaultSpecIsOneLineAndExitTwo) {
  for (const std::string spec : {"step=5,kind=throw", "rank=1,local_rank=0,step=5", "rank=1,step=5,kind=kill-agent",
                                 "rank=1,step=5,kind=explode"}) {
    const LaunchOutcome o = sh("DPBENCH_FAULT=" + spec + " " + std::string(DPBENCH_BINARY) + kArgs + " --ranks 2 -o " +
                               path("r.json"));
    EXPECT_EQ(o.exit_code, 2) << spec << "\n" << o.err;
    EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << spec << "\n" << o.err;
    EXPECT_NE(o.err.find("DPBENCH_FAULT=" + spec), std::string::npos) << o.err;
    EXPECT_FALSE(fs::exists(path("r.json"))) << spec;
  }
}

TEST_F(Launch, InProcessRankThatStopsAnsweringTimesOut) {
  const LaunchOutcome o = sh("DPBENCH_FAULT=rank=1,step=5,kind=hang " + std::string(DPBENCH_BINARY) + kArgs +
                             " --ranks 2 --timeout 2 -o " + path("r.json"));
  EXPECT_EQ(o.exit_code, 1);
  expect_failed_run(o, "rank(s) 1 stopped answering", path("r.json"), 2 + 2 + 5);
}

TEST_F(Launch, MpiRankThatThrowsAbortsTheJob) {
  REQUIRE_MPI();
  const LaunchOutcome o = sh("DPBENCH_FAULT=rank=1,step=5,kind=throw " + kMpirun + "2 " + DPBENCH_BINARY + kArgs +
                             " --comm mpi --timeout 10 -o " + path("r.json"));
  EXPECT_EQ(o.exit_code, 1);
  expect_failed_run(o, "dpbench: failed: rank 1: injected fault at step 5", path("r.json"), 10);
}

TEST_F(Launch, MpiRankThatDiesEndsTheJob) {
  REQUIRE_MPI();
  const LaunchOutcome o = sh("DPBENCH_FAULT=rank=1,step=5,kind=kill " + kMpirun + "2 " + DPBENCH_BINARY + kArgs +
                             " --comm mpi --timeout 10 -o " + path("r.json"));
  expect_failed_run(o, "rank 1", path("r.json"), 10);  // mpirun names the rank it lost
}

TEST_F(Launch, MpiRankThatStopsAnsweringIsAbortedByTheWatchdog) {
  REQUIRE_MPI();
  const LaunchOutcome o = sh("DPBENCH_FAULT=rank=1,step=5,kind=hang " + kMpirun + "2 " + DPBENCH_BINARY + kArgs +
                             " --comm mpi --timeout 3 -o " + path("r.json"));
  EXPECT_EQ(o.exit_code, 1);
  expect_failed_run(o, "rank 1 stopped answering", path("r.json"), 3 + 10);
}

TEST_F(Launch, WorldSizeMismatchUnderMpirun) {
  REQUIRE_MPI();
  const LaunchOutcome o = sh(kMpirun + "2 " + DPBENCH_BINARY + kArgs + " --comm mpi --ranks 3 -o " + path("r.json"));
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("dpbench: error: world size mismatch: --ranks 3 but the launcher started 2 processes"),
            std::string::npos)
      << o.err;
  EXPECT_FALSE(fs::exists(path("r.json")));
}

// Launch errors that need no launcher: one line, exit 2, no result file.
void expect_launch_error(Launch& t, const LaunchOutcome& o, const std::string& needle) {
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << o.err;
  EXPECT_NE(o.err.find(needle), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(t.path("r.json")));
}

TEST_F(Launch, RankIdOutOfRange) {
  expect_launch_error(
      *this, sh("RANK=5 WORLD_SIZE=2 " + std::string(DPBENCH_BINARY) + kArgs + " --comm mpi -o " + path("r.json")),
      "RANK=5: out of range for a world size of 2");
}

TEST_F(Launch, NcclWithoutCudaTraining) {
  expect_launch_error(*this, sh(std::string(DPBENCH_BINARY) + kArgs + " --comm nccl -o " + path("r.json")),
                      "--comm nccl");
}

TEST_F(Launch, TorchrunStyleLaunchWithoutMasterAddr) {
  expect_launch_error(*this,
                      sh("env -u MASTER_ADDR RANK=0 WORLD_SIZE=2 " + std::string(DPBENCH_BINARY) + kArgs +
                         " --comm nccl -o " + path("r.json")),
                      "MASTER_ADDR");
}

TEST_F(Launch, MpiWorldSizeWithoutALauncher) {
  expect_launch_error(
      *this, sh("RANK=0 WORLD_SIZE=2 " + std::string(DPBENCH_BINARY) + kArgs + " --comm mpi -o " + path("r.json")),
      "mpirun -np 2");
}

TEST(LaunchResolve, MpiInABuildWithoutMpiIsAnInputError) {
  if (mpi_built()) GTEST_SKIP() << "this build has MPI; the CPU-only presets (cpu, debug) check this";
  try {
    resolve_launch(Backend::mpi, 2, DeviceKind::cpu);
    ADD_FAILURE() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("this build has no MPI"), std::string::npos) << e.what();
  }
}

TEST(LaunchResolve, LocalTakesRequestedOrDefaultWorldSize) {
  EXPECT_EQ(resolve_launch(Backend::local, 3, DeviceKind::cpu).world_size, 3);
  EXPECT_EQ(resolve_launch(Backend::local, 0, DeviceKind::cpu).world_size, 4);
  EXPECT_FALSE(resolve_launch(Backend::local, 3, DeviceKind::cpu).multi_process);
  EXPECT_THROW(resolve_launch(Backend::gloo, 2, DeviceKind::cpu), InputError);
}

// The backend/device pairs: NCCL moves device buffers, MPI host buffers. Without mpirun, NCCL
// ranks are threads of this process (no GPU is needed to resolve the launch).
TEST(LaunchResolve, BackendsMatchTheirDevice) {
  const char* launched = std::getenv("OMPI_COMM_WORLD_SIZE");
  if (launched != nullptr) GTEST_SKIP() << "running under mpirun";
  const LaunchInfo nccl = resolve_launch(Backend::nccl, 2, DeviceKind::cuda);
  EXPECT_EQ(nccl.world_size, 2);
  EXPECT_FALSE(nccl.multi_process);
  EXPECT_EQ(nccl.launcher, Launcher::threads);
  auto message = [](const std::string& comm, const std::string& device) {
    try {
      resolve_launch(parse_backend(comm), 2, parse_device(device));
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message("nccl", "cpu").find("--device cuda"), std::string::npos) << message("nccl", "cpu");
  EXPECT_NE(message("mpi", "cuda").find("--comm mpi"), std::string::npos) << message("mpi", "cuda");
}

}  // namespace
}  // namespace dpbench
