// CUDA kernels of the DLRM workload: the GPU side of workloads/dlrm_kernels.hpp (the embedding
// bag with sum pooling, nn.EmbeddingBag(mode="sum"); DLRM's dot interaction without self pairs,
// facebookresearch/dlrm dlrm_s_pytorch.py interact_features; a column block of the input rows).
// Each launcher keeps its cpu:: counterpart's arguments and semantics, plus a trailing stream, so
// one test compares the two. float only.
//
// Every pointer is a DEVICE pointer; `void* stream` is a cudaStream_t passed as void* (nullptr:
// the default stream). Launchers only enqueue work and throw dpbench::Error("cuda: <launcher>:
// <cause> at <file>:<line>") when a launch is refused.
//
// Bit for bit with the CPU: the forward bag, the interaction (forward and backward) and the copy
// add in the cpu:: loops' order with the _rn intrinsics (no fused multiply-add). The embedding
// bag's backward scatters each lookup's gradient row with atomicAdd (as PyTorch's index_add_ on
// CUDA): the sums per table row are the CPU's up to the order of their additions, so two runs may
// differ in the last bits where a row is looked up more than once.
//
// The CPU kernels throw Error on an index that is not a row of its table; a kernel cannot, so the
// forward writes NaN into that bag (the loss turns NaN) and the backward skips it. The data path
// (workloads/click_logs.hpp, the Criteo reader) checks every index on the host first.
//
// This header includes no CUDA header, so plain C++ files of the CUDA target can include it.
#pragma once

#include <cstddef>

#include "workloads/dlrm_kernels.hpp"

namespace dpbench::cuda {

// out[b, t, :] = sum over the L indices of sample b for table t of tables[t][i, :], as
// cpu::embedding_bag_sum_forward. One thread per output float.
void embedding_bag_sum_forward(const float* tables, const float* x, float* out, std::size_t batch,
                               const cpu::BagShape& s, void* stream);

// dtables [K, rows, dim] = 0, then each lookup's d_out row added to its table row (atomicAdd),
// as cpu::embedding_bag_sum_backward up to the order of the additions (see above).
void embedding_bag_sum_backward(const float* x, const float* d_out, float* dtables, std::size_t batch,
                                const cpu::BagShape& s, void* stream);

// r[b, :] = [z[b, :], f_i . f_j for i = 1..K, j < i] (dim + K(K+1)/2 per sample), as
// cpu::dot_interaction_forward. One thread per output float.
void dot_interaction_forward(const float* z, const float* bags, float* r, std::size_t batch, std::size_t tables,
                             std::size_t dim, void* stream);

// Given dr [batch, dim + K(K+1)/2]: overwrites dz [batch, dim] and dbags [batch, K, dim], as
// cpu::dot_interaction_backward. One thread per output float, adding the pairs in the CPU's order.
void dot_interaction_backward(const float* z, const float* bags, const float* dr, float* dz, float* dbags,
                              std::size_t batch, std::size_t tables, std::size_t dim, void* stream);

// dst[r, 0:width] = src[r * src_stride + 0 : width] for r < rows, as cpu::copy_columns.
void copy_columns(const float* src, std::size_t src_stride, float* dst, std::size_t width, std::size_t rows,
                  void* stream);

}  // namespace dpbench::cuda
