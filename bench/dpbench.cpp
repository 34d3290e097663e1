// The dpbench command. Everything it does lives in bench/app/ so that tests can reach it.
#include "bench/app/blas_core.hpp"
#include "bench/app/cli.hpp"

int main(int argc, char** argv) {
  dpbench::select_blas_core(argv);  // may restart the program once with better BLAS kernels
  return dpbench::dpbench_main(argc, argv);
}
