// Pins every launcher's final parameters bit for bit (issue 34: moving the launch code into
// launch/ must not change what any mode computes under any launcher). At 2 ranks every backend
// sums a gradient as a + b, so every launcher gives the bits of 2 in-process threads: threads,
// mpirun, torchrun's variables (env://), --init-method tcp:// and file://, and Slurm's variables
// (srun, set by hand). Each launch trains every mode for 12 steps on a tiny synthetic MLP and
// writes its parameters (--save-params); the CRC-32 of each mode's file must equal the pin.
//
// The pins were recorded with the binary of commit 691a445 (the main branch before launch/
// existed), whose threads, mpirun, env, tcp and srun launches all gave them; file:// came later
// and is held to the same pins. As tests/test_step_loop_pin.cpp, the processes run OpenBLAS's
// Haswell kernels (OPENBLAS_CORETYPE=Haswell, set on every command here), which every x86-64 CPU
// with AVX2 and FMA runs; the GEMMs are too small for OpenBLAS to split over threads.
#include <unistd.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "core/gloo_comm.hpp"
#include "core/mpi_comm.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

// --device cpu: the pins are CPU ranks' parameters, also on a machine with a GPU (auto picks it).
constexpr const char* kLaunchPinArgs =
    "--device cpu --data synthetic --input 64 --synthetic-samples 600 --hidden 32 --epochs 1 --batch-size 20 "
    "--max-steps 12 --no-eval -q";

// The CRC-32 of every mode's parameters at 2 ranks, by mode.
const std::map<std::string, std::uint32_t>& launch_pins() {
  static const std::map<std::string, std::uint32_t> pins = {
      {"ps", 0x3938ae8au},
      {"sharded_ps", 0xd59f74aeu},  // at 2 ranks the reduce-scatter + all-gather sum as the ring does
      {"allreduce", 0xd59f74aeu},
  };
  return pins;
}

// One launch of the 2-rank job: the shell line that runs it, writing rank 0's parameters to
// DIR/<launcher>-<mode>.f32 and its result to DIR/<launcher>.json.
struct LaunchCase {
  std::string launcher;
  std::string command;
};

// A shell line running `one` (rank 1) in the background and `zero` (rank 0), exiting non-zero
// when either does.
std::string two_processes(const std::string& one, const std::string& zero) {
  return fmt::format("{} & p=$!; {}; s=$?; wait $p && exit $s", one, zero);
}

std::vector<LaunchCase> launch_cases(const fs::path& dir) {
  // OMP_NUM_THREADS=1: every rank's GEMMs on one BLAS thread, as the pins were recorded, on any
  // number of cores (OpenBLAS's bits depend on its thread count).
  const std::string run = fmt::format("env OPENBLAS_CORETYPE=Haswell OMP_NUM_THREADS=1 timeout -k 5 120 {} run {}",
                                      DPBENCH_BINARY, kLaunchPinArgs);
  const auto rank0 = [&](const std::string& launcher) {
    return fmt::format("--save-params {} --out {}.json", (dir / launcher).string(), (dir / launcher).string());
  };
  const auto rank1 = [&](const std::string& launcher) {
    return fmt::format("--out {}-1.json", (dir / launcher).string());
  };
  std::vector<LaunchCase> cases;
  cases.push_back({"threads", fmt::format("{} --comm local --ranks 2 {}", run, rank0("threads"))});
  if (mpi_built()) {
    cases.push_back({"mpirun", fmt::format("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun "
                                           "--oversubscribe -np 2 {} --comm mpi {}",
                                           run, rank0("mpirun"))});
  }
  if (!gloo_built()) return cases;
  const int env_port = free_tcp_port();
  const auto env = [&](int rank, const std::string& tail) {
    return fmt::format("env RANK={} LOCAL_RANK={} WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT={} "
                       "{} --comm gloo {}",
                       rank, rank, env_port, run, tail);
  };
  cases.push_back({"env", two_processes(env(1, rank1("env")), env(0, rank0("env")))});
  const int tcp_port = free_tcp_port();
  const auto tcp = [&](int rank, const std::string& tail) {
    return fmt::format("{} --comm gloo --world-size 2 --init-method tcp://127.0.0.1:{} --rank {} {}", run, tcp_port,
                       rank, tail);
  };
  cases.push_back({"tcp", two_processes(tcp(1, rank1("tcp")), tcp(0, rank0("tcp")))});
  const auto file = [&](int rank, const std::string& tail) {
    return fmt::format("env MASTER_ADDR=127.0.0.1 {} --comm gloo --world-size 2 --init-method file://{} --rank {} {}",
                       run, (dir / "job.init").string(), rank, tail);
  };
  cases.push_back({"file", two_processes(file(1, rank1("file")), file(0, rank0("file")))});
  const auto srun = [&](int rank, const std::string& tail) {
    return fmt::format("env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT SLURM_JOB_ID={} SLURM_PROCID={} "
                       "SLURM_LOCALID={} SLURM_NODEID=0 SLURM_NTASKS=2 SLURM_STEP_NUM_TASKS=2 "
                       "SLURM_STEP_TASKS_PER_NODE=2 SLURM_STEP_NODELIST=127.0.0.1 {} --comm gloo {}",
                       34000 + getpid() % 1000, rank, rank, run, tail);
  };
  cases.push_back({"srun", two_processes(srun(1, rank1("srun")), srun(0, rank0("srun")))});
  return cases;
}

std::uint32_t file_crc(const std::string& path) {
  const std::vector<float> params = read_f32(path);
  return static_cast<std::uint32_t>(
      crc32(0L, reinterpret_cast<const Bytef*>(params.data()), static_cast<uInt>(params.size() * sizeof(float))));
}

TEST(StepLoopPin, EveryLauncherAtTwoRanksGivesThePinnedParameters) {
  if (const std::string why = haswell_kernels_unavailable(); !why.empty()) GTEST_SKIP() << why;
  // DPBENCH_PRINT_PINS=1 prints each launcher's CRCs instead of only checking them.
  const bool print = std::getenv("DPBENCH_PRINT_PINS") != nullptr;
  const TempDir tmp;
  const auto cases = launch_cases(tmp.path());
  for (const LaunchCase& c : cases) {
    SCOPED_TRACE(c.launcher);
    const Outcome o = shell(c.command, tmp.path());
    ASSERT_EQ(o.exit_code, 0) << c.command << "\n" << o.err;
    for (const char* mode : {"ps", "sharded_ps", "allreduce"}) {
      const std::uint32_t crc = file_crc(fmt::format("{}-{}.f32", (tmp.path() / c.launcher).string(), mode));
      if (print) std::printf("%s %s 0x%08xu\n", c.launcher.c_str(), mode, crc);
      const auto pin = launch_pins().find(mode);
      ASSERT_NE(pin, launch_pins().end()) << "no pin for " << mode;
      EXPECT_EQ(crc, pin->second) << c.launcher << " " << mode << ": final parameters differ from the pinned ones";
    }
  }
  // What this build could not launch is a skip that names it, not a pass.
  std::string missing;
  if (!mpi_built()) missing += "mpirun (this build has no MPI)";
  if (!gloo_built()) missing += std::string(missing.empty() ? "" : "; ") + "env, tcp, file, srun (no gloo)";
  if (!missing.empty()) GTEST_SKIP() << "checked " << cases.size() << " launcher(s); not run: " << missing;
}

}  // namespace
}  // namespace dpbench
