// Change points in a metric's history: E-Divisive means (Matteson and James, "A Nonparametric
// Approach for Multiple Change Point Analysis of Multivariate Data", JASA 2014), as MongoDB's
// signal-processing work and Apache Otava (formerly Hunter) use it on performance series: the
// split that maximises the energy distance between the two sides, kept when a permutation test
// finds it significant and the two sides' means differ by at least a minimum effect, then the
// same within each side (binary segmentation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dpbench {

struct ChangePointOptions {
  double max_p_value = 0.05;  // the permutation test's significance
  int permutations = 199;     // p = (1 + permutations at least as extreme) / (1 + permutations)
  double min_effect = 0.05;   // |mean after / mean before - 1| at least this
  int min_segment = 3;        // values on each side of a split, at least
  std::uint64_t seed = 1;     // the permutations' generator: the result is a function of its inputs
};

struct ChangePoint {
  std::size_t index = 0;                   // the first value after the change
  double mean_before = 0, mean_after = 0;  // of the segments the split separates
  double p_value = 1;
};

// The energy statistic of splitting x at tau (x[0..tau) | x[tau..n)), alpha = 1:
// tau m / n * (2/(tau m) sum|a - b| - 1/C(tau,2) sum|a - a'| - 1/C(m,2) sum|b - b'|), m = n - tau.
// Needs 2 <= tau <= n - 2 (Error otherwise).
double energy_statistic(const std::vector<double>& x, std::size_t tau);

// Every change point of `x` in index order. Fewer than 2 x min_segment values: none. Throws
// Error on a non-finite value or options out of range.
std::vector<ChangePoint> change_points(const std::vector<double>& x, const ChangePointOptions& options = {});

}  // namespace dpbench
