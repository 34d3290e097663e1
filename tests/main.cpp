// main() of dpbench_tests: GoogleTest's, after registering the CUDA device when this build has
// one (as the dpbench command does), so that the GPU suites and the CLI see the same devices.
#include <gtest/gtest.h>

#ifdef DPBENCH_HAVE_CUDA
#include "cuda/register.hpp"
#endif

int main(int argc, char** argv) {
#ifdef DPBENCH_HAVE_CUDA
  dpbench::register_cuda_device();
#endif
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
