#include "workloads/click_logs.hpp"

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/hash_stream.hpp"

namespace dpbench {

namespace {
// log1p(x) / x and expm1(x) / x, continued to x = 0 by their series.
double log1p_over_x(double x) {
  return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x));
}
double expm1_over_x(double x) {
  return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x));
}
}  // namespace

ZipfSampler::ZipfSampler(std::uint64_t n, double alpha) : n_(static_cast<double>(n)), alpha_(alpha) {
  if (n == 0) throw InputError("zipf: needs at least one row");
  if (!(alpha > 0) || !std::isfinite(alpha)) {
    throw InputError(fmt::format("--zipf-alpha {}: must be a number > 0", alpha));
  }
  h_integral_x1_ = h_integral(1.5) - 1.0;
  h_integral_n_ = h_integral(n_ + 0.5);
  s_ = 2.0 - h_integral_inverse(h_integral(2.5) - h(2.0));
}

// h(x) = x^-alpha; H(x), its integral from 1 (as (x^(1-alpha) - 1) / (1 - alpha), log x at
// alpha = 1); H's inverse.
double ZipfSampler::h(double x) const { return std::exp(-alpha_ * std::log(x)); }
double ZipfSampler::h_integral(double x) const {
  const double log_x = std::log(x);
  return expm1_over_x((1.0 - alpha_) * log_x) * log_x;
}
double ZipfSampler::h_integral_inverse(double x) const {
  const double t = std::max(-1.0, x * (1.0 - alpha_));
  return std::exp(log1p_over_x(t) * x);
}

namespace {

constexpr std::uint64_t kDenseTag = 0x64656e73655f7461ull;
constexpr std::uint64_t kIndexTag = 0x696e6465785f7461ull;
constexpr std::uint64_t kPermutationTag = 0x7065726d75746174ull;
constexpr std::uint64_t kTeacherTag = 0x7465616368657221ull;
constexpr std::size_t kTeacherDim = 4;  // the teacher's embedding and bottom width

// A uniform in [-1, 1) from a key and a counter.
double symmetric(std::uint64_t key, std::uint64_t i) {
  return 2.0 * unit53(splitmix64(key + i * 0x9e3779b97f4a7c15ull)) - 1.0;
}

class ClickLogs final : public Dataset {
 public:
  ClickLogs(const DlrmShape& shape, const ClickLogOptions& options, std::int64_t size, std::uint64_t seed)
      : shape_(shape), size_(size), seed_(seed), alpha_(options.zipf_alpha), teacher_(hash3(seed, kTeacherTag, 0)) {
    if (alpha_ > 0) zipf_.emplace(shape.rows, alpha_);
    for (std::size_t t = 0; t < shape.tables; ++t) {
      const std::uint64_t h = hash3(seed, kPermutationTag, t);
      std::uint64_t a = (h % shape.rows) | 1;
      while (std::gcd(a, static_cast<std::uint64_t>(shape.rows)) != 1) ++a;
      permutation_.emplace_back(a % shape.rows == 0 ? 1 : a, splitmix64(h) % shape.rows);
    }
  }

  std::int64_t size() const override { return size_; }
  SampleShape shape() const override { return SampleShape{1, 1, static_cast<int>(shape_.input_features())}; }
  int num_classes() const override { return 2; }
  std::string name() const override {
    return fmt::format("click-logs {}x{} rows, {} lookups, {}", shape_.tables, shape_.rows, shape_.lookups,
                       alpha_ > 0 ? fmt::format("zipf {:g}", alpha_) : std::string("uniform"));
  }

  int load(std::int64_t index, float* out) const override {
    const auto idx = static_cast<std::uint64_t>(index);
    const std::uint64_t dense_key = hash3(seed_, kDenseTag, idx);
    for (std::size_t j = 0; j < shape_.dense_features; ++j) {
      // Sum of four 16-bit uniforms (Irwin-Hall, variance 4/12) rescaled to unit variance.
      const std::uint64_t r = splitmix64(dense_key + j * 0x9e3779b97f4a7c15ull);
      const double sum = static_cast<double>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
      out[j] = static_cast<float>((sum - 2.0 * 65536.0) * (1.7320508075688772 / 65536.0));
    }
    float* indices = out + shape_.dense_features;
    for (std::size_t t = 0; t < shape_.tables; ++t) {
      for (std::size_t l = 0; l < shape_.lookups; ++l) {
        indices[t * shape_.lookups + l] = static_cast<float>(row(idx, t, l));
      }
    }
    return teacher_logit(out) > 0 ? 1 : 0;
  }

 private:
  // The row of lookup l of table t: a rank (uniform, or Zipf's k - 1) through the permutation.
  std::uint64_t row(std::uint64_t idx, std::size_t t, std::size_t l) const {
    const std::uint64_t key = hash3(seed_ ^ kIndexTag, idx, t * shape_.lookups + l);
    std::uint64_t counter = 0;
    const auto next = [&] { return unit53(splitmix64(key + counter++ * 0x9e3779b97f4a7c15ull)); };
    const std::uint64_t rank = zipf_ ? (*zipf_)(next)-1 : static_cast<std::uint64_t>(next() * shape_.rows);
    const auto [a, c] = permutation_[t];
    return static_cast<std::uint64_t>((static_cast<unsigned __int128>(a) * rank + c) % shape_.rows);
  }

  // The teacher: bottom u = W x (kTeacherDim wide), bags of fixed random kTeacherDim-wide rows
  // (scaled by 1/sqrt(L)), the dot products of every pair of [u, bag_1 ... bag_K], and a linear
  // top over them and u.
  double teacher_logit(const float* sample) const {
    const std::size_t D = shape_.dense_features, K = shape_.tables, m = kTeacherDim;
    std::vector<double> f((K + 1) * m, 0.0);
    for (std::size_t c = 0; c < m; ++c) {
      for (std::size_t j = 0; j < D; ++j) f[c] += symmetric(teacher_, c * D + j) * sample[j];
      f[c] /= std::sqrt(static_cast<double>(D));
    }
    const float* indices = sample + D;
    const double bag_scale = 1.0 / std::sqrt(static_cast<double>(shape_.lookups));
    for (std::size_t t = 0; t < K; ++t) {
      for (std::size_t l = 0; l < shape_.lookups; ++l) {
        const auto r = static_cast<std::uint64_t>(indices[t * shape_.lookups + l]);
        const std::uint64_t key = hash3(teacher_, t + 1, r);
        for (std::size_t c = 0; c < m; ++c) f[(t + 1) * m + c] += symmetric(key, c) * bag_scale;
      }
    }
    const std::uint64_t top = splitmix64(teacher_ ^ kTeacherTag);
    double logit = 0;
    std::uint64_t p = 0;
    for (std::size_t c = 0; c < m; ++c) logit += symmetric(top, p++) * f[c];
    for (std::size_t i = 1; i <= K; ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        double d = 0;
        for (std::size_t c = 0; c < m; ++c) d += f[i * m + c] * f[j * m + c];
        logit += symmetric(top, p++) * d;
      }
    }
    return logit;
  }

  DlrmShape shape_;
  std::int64_t size_;
  std::uint64_t seed_;
  double alpha_;
  std::uint64_t teacher_;
  std::optional<ZipfSampler> zipf_;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> permutation_;  // (a, c) per table
};

}  // namespace

std::unique_ptr<Dataset> make_click_logs(const DlrmShape& shape, const ClickLogOptions& options, std::int64_t size,
                                         std::uint64_t seed) {
  check_dlrm_shape(shape);
  if (size < 1) throw InputError(fmt::format("click logs: {} samples, need at least 1", size));
  if (options.zipf_alpha < 0 || !std::isfinite(options.zipf_alpha)) {
    throw InputError(fmt::format("--zipf-alpha {}: must be a number > 0", options.zipf_alpha));
  }
  return std::make_unique<ClickLogs>(shape, options, size, seed);
}

}  // namespace dpbench
