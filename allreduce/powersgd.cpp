#include "allreduce/powersgd.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hierarchical.hpp"
#include "workloads/blas_gemm.hpp"

namespace dpbench {

std::vector<PowerSgdTensor> powersgd_tensors(const std::vector<ParamView>& params, const Bucket& bucket, int rank) {
  std::vector<PowerSgdTensor> out;
  for (const std::size_t i : bucket.params) {
    const ParamView& v = params.at(i);
    PowerSgdTensor t;
    t.param = i;
    t.offset = v.offset;
    t.rows = v.shape.empty() ? 1 : v.shape[0];
    t.cols = t.rows == 0 ? 0 : v.size / t.rows;
    t.rank = std::min({t.rows, t.cols, static_cast<std::size_t>(rank)});
    // _should_compress with min_compression_rate 2. A 1-D tensor is a [n, 1] matrix: rank 1, never
    // compressed, as in PyTorch.
    t.compressed = (t.rows + t.cols) * t.rank * 2 < t.rows * t.cols;
    out.push_back(t);
  }
  return out;
}

PowerSgdMessages powersgd_messages(const std::vector<PowerSgdTensor>& tensors) {
  PowerSgdMessages m;
  for (const PowerSgdTensor& t : tensors) {
    if (t.compressed) {
      m.p += t.rows * t.rank;
      m.q += t.cols * t.rank;
    } else {
      m.uncompressed += t.rows * t.cols;
    }
  }
  return m;
}

std::vector<float> powersgd_initial_q(const PowerSgdTensor& t, std::uint64_t seed) {
  // Box-Muller over a per-parameter mt19937_64 stream: the same on every platform.
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + t.param + 1);
  auto uniform = [&] { return (static_cast<double>(rng() >> 11) + 1.0) * 0x1.0p-53; };  // (0, 1]
  std::vector<float> q(t.cols * t.rank);
  for (std::size_t i = 0; i < q.size(); i += 2) {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    const double angle = 2.0 * M_PI * uniform();
    q[i] = static_cast<float>(radius * std::cos(angle));
    if (i + 1 < q.size()) q[i + 1] = static_cast<float>(radius * std::sin(angle));
  }
  return q;
}

void orthogonalize_columns(float* m, std::size_t rows, std::size_t cols) {
  for (std::size_t i = 0; i < cols; ++i) {
    float norm2 = 0;
    for (std::size_t r = 0; r < rows; ++r) norm2 += m[r * cols + i] * m[r * cols + i];
    const float norm = std::sqrt(norm2);
    for (std::size_t r = 0; r < rows; ++r) m[r * cols + i] = norm > 0 ? m[r * cols + i] / norm : 0.0f;
    for (std::size_t j = i + 1; j < cols; ++j) {
      float dot = 0;
      for (std::size_t r = 0; r < rows; ++r) dot += m[r * cols + i] * m[r * cols + j];
      for (std::size_t r = 0; r < rows; ++r) m[r * cols + j] -= dot * m[r * cols + i];
    }
  }
}

PowerSgdHook::PowerSgdHook(const std::vector<ParamView>& params, const std::vector<Bucket>& buckets, int rank,
                           std::uint64_t seed, int ranks_per_node)
    : seed_(seed), ranks_per_node_(ranks_per_node) {
  for (const Bucket& b : buckets) {
    BucketState s;
    s.tensors = powersgd_tensors(params, b, rank);
    for (PowerSgdTensor& t : s.tensors) t.offset -= b.offset;  // within the bucket
    s.size = b.size;
    buckets_.push_back(std::move(s));
  }
}

void PowerSgdHook::orthogonalize_all(const BucketState& s, float* memory, bool p_side) const {
  for (const PowerSgdTensor& t : s.tensors) {
    if (!t.compressed) continue;
    const std::size_t rows = p_side ? t.rows : t.cols;
    orthogonalize_columns(memory, rows, t.rank);
    memory += rows * t.rank;
  }
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void PowerSgdHook::sum(Communicator& comm, std::vector<float>& v) {
  if (v.empty()) return;
  time_collective(timings_, CollectiveKind::allreduce, v.size(),
                  [&] { hierarchical_allreduce_sum(comm, v.data(), v.size(), ranks_per_node_, scratch_); });
  in_sum_s_ += timings_.back().exit_s - timings_.back().enter_s;
}

void PowerSgdHook::start(BucketState& s) const {
  const PowerSgdMessages sizes = powersgd_messages(s.tensors);
  s.error.assign(s.size, 0.0f);
  s.p.assign(sizes.p, 0.0f);
  s.q.clear();
  for (const PowerSgdTensor& t : s.tensors) {
    if (!t.compressed) continue;
    const std::vector<float> q = powersgd_initial_q(t, seed_);
    s.q.insert(s.q.end(), q.begin(), q.end());
  }
  s.uncompressed.resize(sizes.uncompressed);
  s.started = true;
}

void PowerSgdHook::average_uncompressed(Communicator& comm, BucketState& s, float* grads) {
  const auto world = static_cast<float>(comm.world_size());
  std::size_t at = 0;
  for (const PowerSgdTensor& t : s.tensors) {
    if (t.compressed) continue;
    std::copy_n(grads + t.offset, t.rows * t.cols, s.uncompressed.begin() + static_cast<std::ptrdiff_t>(at));
    at += t.rows * t.cols;
  }
  sum(comm, s.uncompressed);
  at = 0;
  for (const PowerSgdTensor& t : s.tensors) {
    if (t.compressed) continue;
    for (std::size_t i = 0; i < t.rows * t.cols; ++i) grads[t.offset + i] = s.uncompressed[at + i] / world;
    at += t.rows * t.cols;
  }
}

void PowerSgdHook::power_step(Communicator& comm, BucketState& s, float* grads) {
  using cpu::detail::gemm;  // row-major sgemm through OpenBLAS
  auto each_compressed = [&](auto&& f) {
    std::size_t p_at = 0, q_at = 0;
    for (const PowerSgdTensor& t : s.tensors) {
      if (!t.compressed) continue;
      f(t, grads + t.offset, s.p.data() + p_at, s.q.data() + q_at);
      p_at += t.rows * t.rank;
      q_at += t.cols * t.rank;
    }
  };
  orthogonalize_all(s, s.q.data(), false);
  each_compressed([](const PowerSgdTensor& t, const float* m, float* p, const float* q) {
    gemm(CblasNoTrans, CblasNoTrans, t.rows, t.rank, t.cols, m, t.cols, q, t.rank, 0.0f, p, t.rank);  // P = M Q
  });
  sum(comm, s.p);
  orthogonalize_all(s, s.p.data(), true);
  each_compressed([](const PowerSgdTensor& t, const float* m, const float* p, float* q) {
    gemm(CblasTrans, CblasNoTrans, t.cols, t.rank, t.rows, m, t.cols, p, t.rank, 0.0f, q, t.rank);  // Q = M^T P
  });
  sum(comm, s.q);
  const auto world = static_cast<float>(comm.world_size());
  for (float& x : s.q) x /= world;
  each_compressed([](const PowerSgdTensor& t, float* m, const float* p, const float* q) {
    gemm(CblasNoTrans, CblasTrans, t.rows, t.cols, t.rank, p, t.rank, q, t.rank, 0.0f, m, t.cols);  // M = P Q^T
  });
}

void PowerSgdHook::reduce(Communicator& comm, std::size_t b, float* grads) {
  const auto t0 = std::chrono::steady_clock::now();
  const double summing_before = in_sum_s_;
  BucketState& s = buckets_.at(b);
  if (!s.started) start(s);  // the first compressed step: zero error, the initial Qs
  const auto world = static_cast<float>(comm.world_size());
  for (std::size_t i = 0; i < s.size; ++i) grads[i] = grads[i] * world + s.error[i];
  s.input.assign(grads, grads + s.size);
  average_uncompressed(comm, s, grads);
  power_step(comm, s, grads);
  for (std::size_t i = 0; i < s.size; ++i) s.error[i] = s.input[i] - grads[i];
  compute_s_ += std::max(0.0, seconds_since(t0) - (in_sum_s_ - summing_before));
}

}  // namespace dpbench
