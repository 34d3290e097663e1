// Column-major cuBLAS GEMM for the CUDA kernel files (include from .cu files only): row-major
// tensors are multiplied as their transposes, as each caller's derivation comment explains.
#pragma once

#include <cublas_v2.h>

#include <cstddef>

#include "cuda/cuda_check.cuh"
#include "cuda/cuda_kernels.hpp"

namespace dpbench::cuda::detail {

// gemm() below: C (m x n, column-major, ldc == m) = op(A) . op(B) + beta * C, alpha 1, beta 0
// or 1; each cuBLAS call counts as one launch in launch_count(). k == 0 with beta 0 writes zeros (an empty sum), with beta 1 leaves C as it is.
inline void gemm(Blas& blas, const char* launcher, cublasOperation_t op_a, cublasOperation_t op_b, std::size_t m,
                 std::size_t n, std::size_t k, const float* A, std::size_t lda, const float* B, std::size_t ldb,
                 float beta, float* C, std::size_t ldc, void* stream) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (beta == 0.0f) {
      DPBENCH_CUDA_CHECK(launcher, cudaMemsetAsync(C, 0, sizeof(float) * ldc * n, as_stream(stream)));
    }
    return;
  }
  blas.set_stream(stream);
  const float one = 1.0f;
  const cublasComputeType_t compute = blas.precision() == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                          : CUBLAS_COMPUTE_32F;
  DPBENCH_CUBLAS_CHECK(launcher,
                       cublasGemmEx(blas.handle(), op_a, op_b, to_int(m, launcher, "m"), to_int(n, launcher, "n"),
                                    to_int(k, launcher, "k"), &one, A, CUDA_R_32F, to_int(lda, launcher, "lda"), B,
                                    CUDA_R_32F, to_int(ldb, launcher, "ldb"), &beta, C, CUDA_R_32F,
                                    to_int(ldc, launcher, "ldc"), compute, CUBLAS_GEMM_DEFAULT));
  note_launch();
}

}  // namespace dpbench::cuda::detail
