// Pins every mode's final parameters bit for bit (issue 25, item 8: the step-loop redesign must
// not change what any mode computes). Each case trains TrainConfig's defaults (SGD, seed 0,
// 1, 2 and 4 ranks, batch 256, the MLP 512-256; the CNN with BatchNorm for the buffer paths) for 12 steps
// and compares the CRC-32 of rank 0's final parameters and buffers with the value recorded
// before the redesign, on this CPU.
//
// The bits depend on OpenBLAS's kernels, which it picks for the CPU at run time, so the pins are
// kept per OpenBLAS core name. On a core with no pins the test is skipped with that reason; run
// it with DPBENCH_PRINT_PINS=1 to print the lines to add for it.
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
  c.workload = pc.workload;
  c.mode = pc.mode;
  c.transport = pc.transport;
  c.world_size = pc.world_size;
  c.max_steps = 12;
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

// OpenBLAS core name -> case name -> CRC-32, recorded with the step loop of commit 909e130.
const std::map<std::string, std::map<std::string, std::uint32_t>>& pins() {
  static const std::map<std::string, std::map<std::string, std::uint32_t>> table = {
      // PINS-BEGIN
      {"Prescott", {
          {"mlp_ps_collective_1", 0xe356563fu},
          {"mlp_ps_p2p_1", 0xe356563fu},
          {"mlp_allreduce_collective_1", 0xe356563fu},
          {"mlp_sharded_ps_collective_1", 0xe356563fu},
          {"mlp_sharded_ps_p2p_1", 0xe356563fu},
          {"cnn_ps_collective_1", 0x192daa2bu},
          {"cnn_ps_p2p_1", 0x192daa2bu},
          {"cnn_allreduce_collective_1", 0x192daa2bu},
          {"cnn_sharded_ps_collective_1", 0x192daa2bu},
          {"cnn_sharded_ps_p2p_1", 0x192daa2bu},
          {"mlp_ps_collective_2", 0x08e70b95u},
          {"mlp_ps_p2p_2", 0x08e70b95u},
          {"mlp_allreduce_collective_2", 0x91de51dfu},
          {"mlp_sharded_ps_collective_2", 0x91de51dfu},
          {"mlp_sharded_ps_p2p_2", 0x91de51dfu},
          {"cnn_ps_collective_2", 0x50c6aad2u},
          {"cnn_ps_p2p_2", 0x50c6aad2u},
          {"cnn_allreduce_collective_2", 0x05040db6u},
          {"cnn_sharded_ps_collective_2", 0x05040db6u},
          {"cnn_sharded_ps_p2p_2", 0x05040db6u},
          {"mlp_ps_collective_4", 0xad5af602u},
          {"mlp_ps_p2p_4", 0x6f54da6cu},
          {"mlp_allreduce_collective_4", 0x21e4e8bau},
          {"mlp_sharded_ps_collective_4", 0xf71f0986u},
          {"mlp_sharded_ps_p2p_4", 0x7e01895bu},
          {"cnn_ps_collective_4", 0xc30b0d52u},
          {"cnn_ps_p2p_4", 0x2bc2a390u},
          {"cnn_allreduce_collective_4", 0x297aa03au},
          {"cnn_sharded_ps_collective_4", 0xddd99f52u},
          {"cnn_sharded_ps_p2p_4", 0x314769aeu},
      }},
      // PINS-END
  };
  return table;
}

TEST(StepLoopPin, EveryModeFinalParametersBitwiseEqualToBeforeTheRedesign) {
  const std::string core = openblas_get_corename();
  const bool print = std::getenv("DPBENCH_PRINT_PINS") != nullptr;
  const auto found = pins().find(core);
  if (found == pins().end() && !print) {
    GTEST_SKIP() << "no pinned parameters for OpenBLAS core " << core
                 << " (pins exist only for the cores they were recorded on; DPBENCH_PRINT_PINS=1 prints them)";
  }
  if (print) std::printf("      {\"%s\", {\n", core.c_str());
  for (const PinCase& pc : pin_cases()) {
    const std::uint32_t crc = final_state_crc(pc);
    if (print) std::printf("          {\"%s\", 0x%08xu},\n", pc.name.c_str(), crc);
    if (found == pins().end()) continue;
    const auto pin = found->second.find(pc.name);
    ASSERT_NE(pin, found->second.end()) << "no pin for " << pc.name;
    EXPECT_EQ(crc, pin->second) << pc.name << ": final parameters differ from the pinned ones";
  }
  if (print) std::printf("      }},\n");
}

}  // namespace
}  // namespace dpbench
