// main() of the micro-benchmark binaries: Google Benchmark's BENCHMARK_MAIN with dpbench's
// OpenBLAS kernel selection first (record/blas_core.hpp), so kernels run as in `dpbench run`.
#pragma once

#include <benchmark/benchmark.h>

#include "record/blas_core.hpp"
#ifdef DPBENCH_HAVE_CUDA
#include "cuda/register.hpp"
#define DPBENCH_REGISTER_DEVICES() dpbench::register_cuda_device()
#else
#define DPBENCH_REGISTER_DEVICES() (void)0
#endif

#define DPBENCH_BENCHMARK_MAIN()                                              \
  int main(int argc, char** argv) {                                           \
    DPBENCH_REGISTER_DEVICES();                                               \
    dpbench::select_blas_core(argv);                                          \
    benchmark::Initialize(&argc, argv);                                       \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;         \
    benchmark::AddCustomContext("blas_core_note", dpbench::blas_core_note()); \
    benchmark::RunSpecifiedBenchmarks();                                      \
    benchmark::Shutdown();                                                    \
    return 0;                                                                 \
  }
