// Tests of the CUDA DLRM kernels (cuda/cuda_dlrm_kernels.hpp) against their CPU counterparts
// (workloads/dlrm_kernels.hpp): the same random inputs of odd shapes (batch 5, 3 tables of 11
// rows, dimension 7, 4 lookups, 3 dense features: nothing a multiple of a warp), with indices
// that repeat within a bag and across samples, go through both. The forward bag, the interaction
// and the copy must agree bit for bit; the bag's backward, which adds with atomics, within a
// tolerance, and exactly where a row is looked up once. Built with the CUDA target only; without
// a usable GPU every test is skipped with the reason.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cuda/cuda_dlrm_kernels.hpp"
#include "tests/cuda_test_util.hpp"
#include "workloads/dlrm_kernels.hpp"

namespace dpbench {
namespace {

using testing::DeviceBuffer;
using testing::random_floats;

class CudaDlrmKernels : public testing::CudaStreamTest {};

constexpr std::size_t kBatch = 5;
const cpu::BagShape kShape{.dense = 3, .tables = 3, .rows = 11, .dim = 7, .lookups = 4};

// kBatch input rows: random dense features, then indices drawn from the first half of each
// table's rows (so rows repeat) as floats.
std::vector<float> bag_inputs(std::uint64_t seed) {
  std::vector<float> x = random_floats(kBatch * kShape.row_stride(), seed);
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<std::size_t> row(0, kShape.rows / 2);
  for (std::size_t b = 0; b < kBatch; ++b) {
    for (std::size_t k = 0; k < kShape.tables * kShape.lookups; ++k) {
      x[b * kShape.row_stride() + kShape.dense + k] = static_cast<float>(row(rng));
    }
  }
  return x;
}

// Elements whose bits differ.
std::size_t bits_differ(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return n;
}

TEST_F(CudaDlrmKernels, EmbeddingBagForwardMatchesCpuBitForBit) {
  const std::vector<float> tables = random_floats(kShape.tables * kShape.rows * kShape.dim, 1);
  const std::vector<float> x = bag_inputs(2);
  std::vector<float> want(kBatch * kShape.tables * kShape.dim);
  cpu::embedding_bag_sum_forward(tables.data(), x.data(), want.data(), kBatch, kShape);
  DeviceBuffer<float> d_tables(tables), d_x(x), d_out(want.size());
  cuda::embedding_bag_sum_forward(d_tables.get(), d_x.get(), d_out.get(), kBatch, kShape, stream());
  EXPECT_EQ(bits_differ(d_out.to_host(), want), 0u);
}

TEST_F(CudaDlrmKernels, EmbeddingBagForwardWritesNanForAnIndexOutOfRange) {
  const std::vector<float> tables = random_floats(kShape.tables * kShape.rows * kShape.dim, 1);
  std::vector<float> x = bag_inputs(2);
  x[kShape.row_stride() + kShape.dense + kShape.lookups] = static_cast<float>(kShape.rows);  // sample 1, table 1
  DeviceBuffer<float> d_tables(tables), d_x(x), d_out(kBatch * kShape.tables * kShape.dim);
  cuda::embedding_bag_sum_forward(d_tables.get(), d_x.get(), d_out.get(), kBatch, kShape, stream());
  const std::vector<float> out = d_out.to_host();
  for (std::size_t i = 0; i < out.size(); ++i) {
    const bool bad_bag = i / kShape.dim == 1 * kShape.tables + 1;
    EXPECT_EQ(std::isnan(out[i]), bad_bag) << "element " << i;
  }
}

TEST_F(CudaDlrmKernels, EmbeddingBagBackwardMatchesCpu) {
  const std::vector<float> x = bag_inputs(3);
  const std::vector<float> d_out = random_floats(kBatch * kShape.tables * kShape.dim, 4);
  std::vector<float> want(kShape.tables * kShape.rows * kShape.dim);
  cpu::embedding_bag_sum_backward(x.data(), d_out.data(), want.data(), kBatch, kShape);
  DeviceBuffer<float> d_x(x), d_dout(d_out), d_tables(want.size());  // 0xFF: every row must be written
  cuda::embedding_bag_sum_backward(d_x.get(), d_dout.get(), d_tables.get(), kBatch, kShape, stream());
  const std::vector<float> got = d_tables.to_host();
  // Each row sums at most 20 lookups' floats in another order: a few ulps of the largest.
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::abs(static_cast<double>(w)));
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * scale) << "element " << i;
    if (want[i] == 0.0f) EXPECT_EQ(got[i], 0.0f) << "a row no lookup names stays 0, element " << i;
  }
}

TEST_F(CudaDlrmKernels, DotInteractionForwardAndBackwardMatchCpuBitForBit) {
  const std::size_t K = kShape.tables, dim = kShape.dim, width = dim + K * (K + 1) / 2;
  const std::vector<float> z = random_floats(kBatch * dim, 5), bags = random_floats(kBatch * K * dim, 6);
  const std::vector<float> dr = random_floats(kBatch * width, 7);
  std::vector<float> r(kBatch * width), dz(kBatch * dim), dbags(kBatch * K * dim);
  cpu::dot_interaction_forward(z.data(), bags.data(), r.data(), kBatch, K, dim);
  cpu::dot_interaction_backward(z.data(), bags.data(), dr.data(), dz.data(), dbags.data(), kBatch, K, dim);
  DeviceBuffer<float> d_z(z), d_bags(bags), d_dr(dr), d_r(r.size()), d_dz(dz.size()), d_dbags(dbags.size());
  cuda::dot_interaction_forward(d_z.get(), d_bags.get(), d_r.get(), kBatch, K, dim, stream());
  cuda::dot_interaction_backward(d_z.get(), d_bags.get(), d_dr.get(), d_dz.get(), d_dbags.get(), kBatch, K, dim,
                                 stream());
  EXPECT_EQ(bits_differ(d_r.to_host(), r), 0u);
  EXPECT_EQ(bits_differ(d_dz.to_host(), dz), 0u);
  EXPECT_EQ(bits_differ(d_dbags.to_host(), dbags), 0u);
}

TEST_F(CudaDlrmKernels, CopyColumnsMatchesCpu) {
  const std::vector<float> x = bag_inputs(8);
  std::vector<float> want(kBatch * kShape.dense);
  cpu::copy_columns(x.data(), kShape.row_stride(), want.data(), kShape.dense, kBatch);
  DeviceBuffer<float> d_x(x), d_dense(want.size());
  cuda::copy_columns(d_x.get(), kShape.row_stride(), d_dense.get(), kShape.dense, kBatch, stream());
  EXPECT_EQ(bits_differ(d_dense.to_host(), want), 0u);
}

}  // namespace
}  // namespace dpbench
