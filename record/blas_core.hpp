// OpenBLAS picks its kernels from the CPU model at load time. Debian 12's OpenBLAS 0.3.21 does
// not know recent Xeons and falls back to its SSE3 "Prescott" kernels, about 4x slower GEMMs on
// an AVX-512 machine, which would make every CPU result here compute-bound for the wrong
// reason. select_blas_core() notices that fallback and restarts the program with
// OPENBLAS_CORETYPE set to the kernels the CPU's flags support (SkylakeX for AVX-512, Haswell for
// AVX2). It does nothing when OPENBLAS_CORETYPE or DPBENCH_KEEP_BLAS_CORE is set, when OpenBLAS
// chose anything else, or when the CPU has neither extension.
#pragma once

#include <string>

namespace dpbench {

// The OpenBLAS core type to ask for, given the core OpenBLAS chose and the CPU's flags (the
// /proc/cpuinfo flags line): "SkylakeX", "Haswell", or "" to leave OpenBLAS alone.
std::string preferred_blas_core(const std::string& chosen, const std::string& cpu_flags);

// Call first thing in main(). Returns only if no restart was needed (or execv failed).
void select_blas_core(char** argv);

// What happened, for the result's env: "" when dpbench left OpenBLAS alone.
std::string blas_core_note();

}  // namespace dpbench
