// Pins every mode's final parameters bit for bit (issue 25, item 8: the step-loop redesign must
// not change what any mode computes). Each case trains TrainConfig's defaults (SGD, seed 0,
// 1, 2 and 4 ranks, batch 256, the MLP 512-256; the CNN with BatchNorm for the buffer paths) for 12 steps
// and compares the CRC-32 of rank 0's final parameters and buffers with the pinned value.
//
// The bits depend on OpenBLAS's kernels, which it picks for the CPU at start-up, so the test runs
// with one kernel set forced: OPENBLAS_CORETYPE=Haswell (ctest sets it; tests/CMakeLists.txt),
// which every x86-64 CPU with AVX2 and FMA runs, AMD and Intel alike. Run under another core, or
// with a case missing from the pins, the test fails; on a CPU without AVX2 and FMA it is skipped
// with that reason. The Haswell pins were recorded from commit 5c02d31's step loop, whose results
// matched the pins recorded before the redesign (commit 909e130) on the machine that has them
// (OpenBLAS core Prescott). DPBENCH_PRINT_PINS=1 prints the lines of the current core.
//
// The bits also depend on how many threads OpenBLAS splits a GEMM over (by default one per core:
// on a 16-core machine every case differed), so the test runs OpenBLAS on kPinBlasThreads threads,
// the count the pins were recorded with, whatever the machine's core count.
#include <cblas.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zlib.h>

#include "tests/training_fixtures.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

struct PinCase {
  std::string name;  // "<workload>_<mode>_<transport>_<world_size>"
  std::string workload;
  std::string mode;
  std::string transport;
  int world_size;
};

std::vector<PinCase> pin_cases() {
  std::vector<PinCase> cases;
  for (int p : {1, 2, 4}) {
    for (const char* workload : {"mlp", "cnn"}) {
      cases.push_back({"", workload, "ps", "collective", p});
      cases.push_back({"", workload, "ps", "p2p", p});
      cases.push_back({"", workload, "allreduce", "collective", p});
      cases.push_back({"", workload, "sharded_ps", "collective", p});
      cases.push_back({"", workload, "sharded_ps", "p2p", p});
    }
  }
  for (PinCase& c : cases) c.name = c.workload + "_" + c.mode + "_" + c.transport + "_" + std::to_string(c.world_size);
  return cases;
}

// CRC-32 (zlib) of rank 0's final parameters followed by its BatchNorm buffers.
std::uint32_t final_state_crc(const PinCase& pc) {
  TrainConfig c;  // the defaults: SGD lr 0.1 momentum 0.9, seed 0, batch 256, warm-up 5
  c.model.workload = pc.workload;
  c.mode = parse_mode(pc.mode);
  c.transport = parse_transport(pc.transport);
  c.world_size = pc.world_size;
  c.run.max_steps = 12;
  c.evaluate = false;
  c.keep_final_params = true;
  const SampleShape shape = pc.workload == "cnn" ? SampleShape{1, 12, 12} : SampleShape{1, 28, 28};
  const auto data = make_synthetic_dataset(shape, 10, 4096, 7);
  const RunResult r = testing::train_mode(c, *data);
  EXPECT_EQ(r.final_params.size(), r.num_params) << pc.name;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  crc = ::crc32(crc, reinterpret_cast<const Bytef*>(r.final_params.data()),
                static_cast<uInt>(r.final_params.size() * sizeof(float)));
  if (!r.final_buffers.empty()) {  // (zlib's crc32 of a null buffer is its initial value, 0)
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(r.final_buffers.data()),
                  static_cast<uInt>(r.final_buffers.size() * sizeof(float)));
  }
  return static_cast<std::uint32_t>(crc);
}

// OpenBLAS threads of the recorded pins (the 2-core machine's default).
constexpr int kPinBlasThreads = 2;

// Sets OpenBLAS's thread count for its lifetime, then restores the previous one.
class BlasThreads {
 public:
  explicit BlasThreads(int threads) : before_(openblas_get_num_threads()) { openblas_set_num_threads(threads); }
  ~BlasThreads() { openblas_set_num_threads(before_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int before_;
};

// OpenBLAS core name -> case name -> CRC-32 (OPENBLAS_CORETYPE=Haswell; see the file's head).
const std::map<std::string, std::map<std::string, std::uint32_t>>& pins() {
  static const std::map<std::string, std::map<std::string, std::uint32_t>> table = {
      // PINS-BEGIN
      {"Haswell",
       {
           {"mlp_ps_collective_1", 0xbfffca80u},
           {"mlp_ps_p2p_1", 0xbfffca80u},
           {"mlp_allreduce_collective_1", 0xbfffca80u},
           {"mlp_sharded_ps_collective_1", 0xbfffca80u},
           {"mlp_sharded_ps_p2p_1", 0xbfffca80u},
           {"cnn_ps_collective_1", 0xbb157affu},
           {"cnn_ps_p2p_1", 0xbb157affu},
           {"cnn_allreduce_collective_1", 0xbb157affu},
           {"cnn_sharded_ps_collective_1", 0xbb157affu},
           {"cnn_sharded_ps_p2p_1", 0xbb157affu},
           {"mlp_ps_collective_2", 0xab83ae4du},
           {"mlp_ps_p2p_2", 0xab83ae4du},
           {"mlp_allreduce_collective_2", 0xaf0c1113u},
           {"mlp_sharded_ps_collective_2", 0xaf0c1113u},
           {"mlp_sharded_ps_p2p_2", 0xaf0c1113u},
           {"cnn_ps_collective_2", 0xee88607du},
           {"cnn_ps_p2p_2", 0xee88607du},
           {"cnn_allreduce_collective_2", 0x8b798564u},
           {"cnn_sharded_ps_collective_2", 0x8b798564u},
           {"cnn_sharded_ps_p2p_2", 0x8b798564u},
           {"mlp_ps_collective_4", 0x1b404da2u},
           {"mlp_ps_p2p_4", 0xb41e5926u},
           {"mlp_allreduce_collective_4", 0x735e7bfcu},
           {"mlp_sharded_ps_collective_4", 0x53ff06fdu},
           {"mlp_sharded_ps_p2p_4", 0x2cdd18bau},
           {"cnn_ps_collective_4", 0xc07ef0aeu},
           {"cnn_ps_p2p_4", 0x429405b5u},
           {"cnn_allreduce_collective_4", 0xba51f88au},
           {"cnn_sharded_ps_collective_4", 0x7bf11c0bu},
           {"cnn_sharded_ps_p2p_4", 0x2b628497u},
       }},
      // PINS-END
  };
  return table;
}

TEST(StepLoopPin, EveryModeFinalParametersBitwiseEqualToBeforeTheRedesign) {
  const std::string core = openblas_get_corename();
  const bool print = std::getenv("DPBENCH_PRINT_PINS") != nullptr;
  if (const std::string why = dpbench::testing::haswell_kernels_unavailable(); !why.empty()) GTEST_SKIP() << why;
  if (print) std::printf("      {\"%s\", {\n", core.c_str());
  const BlasThreads threads(kPinBlasThreads);
  ASSERT_EQ(openblas_get_num_threads(), kPinBlasThreads) << "OpenBLAS did not take " << kPinBlasThreads << " threads";
  const auto found = pins().find(core);
  if (!print) {
    ASSERT_NE(found, pins().end()) << "OpenBLAS runs core " << core << ", which has no pins: run the test with "
                                   << "OPENBLAS_CORETYPE=Haswell (ctest sets it)";
  }
  // DPBENCH_PIN_CASES=TEXT runs only the cases whose name contains TEXT (for slow checks, such as
  // the pins under an emulated CPU: `qemu-x86_64 -cpu EPYC-Rome`); it says how many ran.
  const char* only = std::getenv("DPBENCH_PIN_CASES");
  int ran = 0, all = 0;
  for (const PinCase& pc : pin_cases()) {
    ++all;
    if (only != nullptr && pc.name.find(only) == std::string::npos) continue;
    ++ran;
    const std::uint32_t crc = final_state_crc(pc);
    if (print) std::printf("          {\"%s\", 0x%08xu},\n", pc.name.c_str(), crc);
    if (found == pins().end()) continue;
    const auto pin = found->second.find(pc.name);
    ASSERT_NE(pin, found->second.end()) << "no pin for " << pc.name;
    EXPECT_EQ(crc, pin->second) << pc.name << ": final parameters differ from the pinned ones";
  }
  if (print) std::printf("      }},\n");
  if (only != nullptr)
    std::printf("DPBENCH_PIN_CASES=%s: %d of %d cases ran (OpenBLAS core %s)\n", only, ran, all, core.c_str());
  EXPECT_GT(ran, 0) << "DPBENCH_PIN_CASES=" << (only != nullptr ? only : "") << " matches no case";
}

}  // namespace
}  // namespace dpbench
