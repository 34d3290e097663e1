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

[[noreturn]] inline void fail(const char* launcher, const std::string& cause, const char* file, int line) {
  throw Error(fmt::format("cuda: {}: {} at {}", launcher, cause, source_location(file, line)));
}

// Who reports a failed call, and how: report_failure(where, what) for each kind of `where`, found
// by overload (or argument-dependent lookup for a caller's own type, as the NCCL backend's, which
// aborts its communicator first). Each throws Error.
//   const char* launcher: "cuda: <launcher>: <what>" (the kernels' launchers, the runtime);
//   OnDevice{d}:          "device <d>: <what>" (the allocator).
[[noreturn]] inline void report_failure(const char* launcher, const std::string& what) {
  throw Error(fmt::format("cuda: {}: {}", launcher, what));
}
struct OnDevice {
  int device;
};
[[noreturn]] inline void report_failure(OnDevice where, const std::string& what) {
  throw Error(fmt::format("device {}: {}", where.device, what));
}

// The checks behind the one macro per library below: nothing on success, else report_failure
// with "<call>: <cause> at <file>:<line>".
template <typename Where>
void check_cuda(cudaError_t err, Where&& where, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  report_failure(where, cuda_failure(err, call, file, line));
}

template <typename Where>
void check_cublas(cublasStatus_t status, Where&& where, const char* call, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  report_failure(where, fmt::format("{}: {} ({}) at {}", call_name(call), cublasGetStatusName(status),
                                    cublasGetStatusString(status), source_location(file, line)));
}

// Adds one to the calling thread's launch_count() (cuda/cuda_kernels.hpp).
void note_launch() noexcept;

// A kernel launch, as a call to check: counted in launch_count(), and CUDA's last error (a refused
// launch: bad configuration, no device, no kernel image for this GPU). A fault while the kernel
// runs surfaces at the next sync. DPBENCH_CUDA_CHECK(launcher, kernel_launched()) after each launch.
inline cudaError_t kernel_launched() {
  note_launch();
  return cudaGetLastError();
}

// One check macro per library: DPBENCH_CUDA_CHECK (the runtime, kernel launches included),
// DPBENCH_CUBLAS_CHECK, and DPBENCH_NCCL_CHECK (cuda/nccl_comm.cu, its only user).
#define DPBENCH_CUDA_CHECK(where, call) ::dpbench::cuda::detail::check_cuda((call), (where), #call, __FILE__, __LINE__)
#define DPBENCH_CUBLAS_CHECK(where, call) \
  ::dpbench::cuda::detail::check_cublas((call), (where), #call, __FILE__, __LINE__)

inline cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }

// cuBLAS takes int dimensions.
inline int to_int(std::size_t value, const char* launcher, const char* what) {
  if (value > static_cast<std::size_t>(INT_MAX)) {
    throw Error(fmt::format("cuda: {}: {} = {} exceeds cuBLAS's int range", launcher, what, value));
  }
  return static_cast<int>(value);
}

}  // namespace dpbench::cuda::detail
