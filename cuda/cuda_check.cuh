// The CUDA error checks of the CUDA target (include from .cu files only): every failed CUDA call
// is described by cuda_failure() as "<call>: <cause> at <file>:<line>", as nccl-tests' check
// macros report where; the kernels' launchers throw Error("cuda: <launcher>: " + that), the
// allocator prefixes its device and the NCCL backend its rank.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstddef>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/error_location.hpp"

namespace dpbench::cuda::detail {

// "<call>: <cause> at <file>:<line>" for a failed CUDA call, after clearing CUDA's last error so
// that it does not resurface in an unrelated call.
inline std::string cuda_failure(cudaError_t err, const char* call, const char* file, int line) {
  cudaGetLastError();
  return fmt::format("{}: {} at {}", call_name(call), cudaGetErrorString(err), source_location(file, line));
}

[[noreturn]] inline void fail(const char* launcher, const std::string& cause, const char* file,
                       int line) {
  throw Error(fmt::format("cuda: {}: {} at {}", launcher, cause, source_location(file, line)));
}

inline void check_cuda(cudaError_t err, const char* launcher, const char* call, const char* file,
                int line) {
  if (err == cudaSuccess) return;
  throw Error(fmt::format("cuda: {}: {}", launcher, cuda_failure(err, call, file, line)));
}

inline void check_cublas(cublasStatus_t status, const char* launcher, const char* call,
                  const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  fail(launcher,
       fmt::format("{}: {} ({})", call_name(call), cublasGetStatusName(status),
                   cublasGetStatusString(status)),
       file, line);
}

// Adds one to the calling thread's launch_count() (cuda/cuda_kernels.hpp).
void note_launch() noexcept;

// After a kernel launch: counted in launch_count(); a refused launch (bad configuration, no
// device, no kernel image for this GPU) is reported here; a fault while the kernel runs surfaces
// at the next sync.
inline void check_launch(const char* launcher, const char* file, int line) {
  note_launch();
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) fail(launcher, cudaGetErrorString(err), file, line);
}

#define DPBENCH_CUDA_CHECK(launcher, call) check_cuda((call), (launcher), #call, __FILE__, __LINE__)
#define DPBENCH_CUBLAS_CHECK(launcher, call) \
  check_cublas((call), (launcher), #call, __FILE__, __LINE__)
#define DPBENCH_LAUNCH_CHECK(launcher) check_launch((launcher), __FILE__, __LINE__)

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// cuBLAS takes int dimensions.
inline int to_int(std::size_t value, const char* launcher, const char* what) {
  if (value > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("cuda: {}: {} = {} exceeds cuBLAS's int range", launcher, what, value));
  }
  return static_cast<int>(value);
}

}  // namespace dpbench::cuda::detail
