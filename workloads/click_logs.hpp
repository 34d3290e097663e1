// Synthetic click logs for the DLRM workload (workloads/dlrm.hpp), generated on demand from
// (seed, index): per sample `dense_features` dense values (standard normal, approximately) and
// `lookups` row indices for each of the `tables` tables, then a click label from a fixed random
// teacher of DLRM's structure (a linear bottom, embedding bags of 4-wide rows, the pairwise dot
// interaction and a linear top; the label is the sign of its logit), so that the loss falls and a
// held-out accuracy means something. Indices are uniform, or bounded Zipf(alpha) over the ranks
// 1..rows as FBGEMM's benchmark requests draw them (a few hot rows, a long tail), each rank mapped
// to a row by a fixed per-table permutation (k -> (a k + c) mod rows), as hashed ids spread.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>

#include "workloads/dataset.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

// Bounded Zipf on {1, ..., n}: P(k) proportional to k^-alpha, any alpha > 0, by rejection-inversion
// (Hörmann & Derflinger 1996, "Rejection-inversion to generate variates from monotone discrete
// distributions"): O(1) memory, a few uniforms per draw.
class ZipfSampler {
 public:
  // Throws InputError when n is 0 or alpha is not a finite number > 0.
  ZipfSampler(std::uint64_t n, double alpha);
  // One draw in [1, n] from the uniforms next() returns in [0, 1).
  template <typename Next>
  std::uint64_t operator()(Next&& next) const {
    for (;;) {
      const double u = h_integral_n_ + next() * (h_integral_x1_ - h_integral_n_);
      const double x = h_integral_inverse(u);
      double k = std::floor(x + 0.5);
      k = k < 1 ? 1 : (k > n_ ? n_ : k);
      if (k - x <= s_ || u >= h_integral(k + 0.5) - h(k)) return static_cast<std::uint64_t>(k);
    }
  }

 private:
  double h(double x) const;
  double h_integral(double x) const;
  double h_integral_inverse(double x) const;
  double n_, alpha_, h_integral_x1_, h_integral_n_, s_;
};

// The click logs' options: --zipf-alpha (0: uniform indices).
struct ClickLogOptions {
  double zipf_alpha = 0;
};

// `size` samples of `shape`'s input rows (features() = dense + tables x lookups), labels 0/1.
// Same (seed, index) -> same sample. Throws InputError when size < 1, the shape is invalid
// (check_dlrm_shape), or zipf_alpha is negative or not finite.
std::unique_ptr<Dataset> make_click_logs(const DlrmShape& shape, const ClickLogOptions& options, std::int64_t size,
                                         std::uint64_t seed);

}  // namespace dpbench
