// The dpbench command. Everything it does lives in bench/app/ so that tests can reach it.
#include <cstdlib>

#include "record/blas_core.hpp"
#include "bench/app/cli.hpp"
#ifdef DPBENCH_HAVE_CUDA
#include "cuda/register.hpp"
#endif

int main(int argc, char** argv) {
  // Load every kernel when CUDA starts rather than at its first launch (CUDA 12+ loads lazily):
  // a lazy load may wait for the whole context, where another rank's NCCL kernel can be waiting
  // for this rank (NCCL ranks as threads sharing a GPU). A user's own setting wins.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
#ifdef DPBENCH_HAVE_CUDA
  dpbench::register_cuda_device();
#endif
  dpbench::select_blas_core(argv);  // may restart the program once with better BLAS kernels
  return dpbench::dpbench_main(argc, argv);
}
