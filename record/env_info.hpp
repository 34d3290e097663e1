// The `env` block of a result file: where and how the numbers were produced (git commit, host,
// OS, CPU, compiler and flags, build type, BLAS, CUDA runtime and driver, NCCL, MPI, GPUs).
#pragma once

#include <nlohmann/json.hpp>

namespace dpbench {

nlohmann::json collect_env();

}  // namespace dpbench
