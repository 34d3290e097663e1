// The kernels of DLRM (Naumov et al. 2019, "Deep Learning Recommendation Model for Personalization
// and Recommendation Systems"; facebookresearch/dlrm dlrm_s_pytorch.py) that an MLP does not
// have: the embedding bag with sum pooling (nn.EmbeddingBag(mode="sum")) and the pairwise dot
// interaction (DLRM's interact_features with arch_interaction_op "dot", without self pairs).
// Plain C++ on host memory; T: float, or double for finite-difference checks.
#pragma once

#include <cstddef>

namespace dpbench::cpu {

// The layout of one DLRM input row and its embedding bags: a row of x holds `dense` floats, then
// `tables` x `lookups` row indices (written as floats: exact below 2^24), table by table.
struct BagShape {
  std::size_t dense = 0;    // dense features per sample
  std::size_t tables = 0;   // K embedding tables
  std::size_t rows = 0;     // rows of each table
  std::size_t dim = 0;      // embedding dimension d
  std::size_t lookups = 0;  // L indices per table per sample (the pooling factor)
  std::size_t row_stride() const { return dense + tables * lookups; }
};

// out[b, t, :] = sum over the L indices i of sample b for table t of tables[t][i, :], for every
// sample b < batch and table t; tables: K tables of [rows, dim] one after another. Throws Error
// naming the sample and table when an index is not an integer in [0, rows).
template <typename T>
void embedding_bag_sum_forward(const T* tables, const T* x, T* out, std::size_t batch, const BagShape& s);

// The gradient of the tables for d_out[batch, K, dim] (overwrites all of dtables, as a dense
// embedding gradient: zero where no index of the batch points).
template <typename T>
void embedding_bag_sum_backward(const T* x, const T* d_out, T* dtables, std::size_t batch, const BagShape& s);

// The dot interaction: features f_0 = z[b, :] (the bottom MLP's output) and f_1..f_K =
// bags[b, 0..K-1, :]; r[b, :] = [z[b, :], f_i . f_j for i = 1..K, j = 0..i-1], i.e.
// dim + K(K+1)/2 values per sample (DLRM's concatenation of the dense features and the lower
// triangle of Z = F F^T).
template <typename T>
void dot_interaction_forward(const T* z, const T* bags, T* r, std::size_t batch, std::size_t tables, std::size_t dim);

// Given dr[batch, dim + K(K+1)/2]: overwrites dz[batch, dim] and dbags[batch, K, dim].
template <typename T>
void dot_interaction_backward(const T* z, const T* bags, const T* dr, T* dz, T* dbags, std::size_t batch,
                              std::size_t tables, std::size_t dim);

// dst[r, 0:width] = src[r * src_stride + 0 : width] for r < rows (a row-major column block).
template <typename T>
void copy_columns(const T* src, std::size_t src_stride, T* dst, std::size_t width, std::size_t rows);

}  // namespace dpbench::cpu
