#include "history/change_points.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {

// Sums of |x_i - x_j| over pairs, precomputed once per series: within [a, b) in O(1) from
// prefix tables would need sorting per window; series are short (a history), so O(n^2) per split.
double pair_sum(const std::vector<double>& x, std::size_t a, std::size_t b) {
  double s = 0;
  for (std::size_t i = a; i < b; ++i) {
    for (std::size_t j = i + 1; j < b; ++j) s += std::abs(x[i] - x[j]);
  }
  return s;
}

double cross_sum(const std::vector<double>& x, std::size_t tau) {
  double s = 0;
  for (std::size_t i = 0; i < tau; ++i) {
    for (std::size_t j = tau; j < x.size(); ++j) s += std::abs(x[i] - x[j]);
  }
  return s;
}

// The best split of x (its statistic and index), splits leaving min_segment on each side.
std::pair<double, std::size_t> best_split(const std::vector<double>& x, std::size_t min_segment) {
  double best = -1;
  std::size_t at = 0;
  for (std::size_t tau = min_segment; tau + min_segment <= x.size(); ++tau) {
    const double q = energy_statistic(x, tau);
    if (q > best) {
      best = q;
      at = tau;
    }
  }
  return {best, at};
}

double mean(const std::vector<double>& x, std::size_t a, std::size_t b) {
  return std::accumulate(x.begin() + static_cast<std::ptrdiff_t>(a), x.begin() + static_cast<std::ptrdiff_t>(b), 0.0) /
         static_cast<double>(b - a);
}

void segment(const std::vector<double>& x, std::size_t a, std::size_t b, const ChangePointOptions& o,
             std::mt19937_64& rng, std::vector<ChangePoint>& out) {
  const auto min_segment = static_cast<std::size_t>(o.min_segment);
  if (b - a < 2 * min_segment) return;
  std::vector<double> part(x.begin() + static_cast<std::ptrdiff_t>(a), x.begin() + static_cast<std::ptrdiff_t>(b));
  const auto [observed, tau] = best_split(part, min_segment);
  int extreme = 0;
  std::vector<double> shuffled = part;
  for (int k = 0; k < o.permutations; ++k) {
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    if (best_split(shuffled, min_segment).first >= observed) ++extreme;
  }
  const double p = (1.0 + extreme) / (1.0 + o.permutations);
  const double before = mean(part, 0, tau), after = mean(part, tau, part.size());
  const double effect = before != 0 ? std::abs(after / before - 1.0) : std::abs(after - before);
  if (p > o.max_p_value || effect < o.min_effect) return;
  segment(x, a, a + tau, o, rng, out);
  out.push_back({a + tau, before, after, p});
  segment(x, a + tau, b, o, rng, out);
}

}  // namespace

double energy_statistic(const std::vector<double>& x, std::size_t tau) {
  const std::size_t n = x.size();
  if (tau < 2 || tau + 2 > n) throw Error(fmt::format("energy statistic: split {} of {} values", tau, n));
  const auto t = static_cast<double>(tau), m = static_cast<double>(n - tau);
  const double between = 2.0 / (t * m) * cross_sum(x, tau);
  const double left = pair_sum(x, 0, tau) / (t * (t - 1) / 2.0);
  const double right = pair_sum(x, tau, n) / (m * (m - 1) / 2.0);
  return t * m / static_cast<double>(n) * (between - left - right);
}

std::vector<ChangePoint> change_points(const std::vector<double>& x, const ChangePointOptions& o) {
  if (o.min_segment < 2 || o.permutations < 1 || !(o.max_p_value > 0) || !(o.min_effect >= 0)) {
    throw Error("change points: min_segment >= 2, permutations >= 1, max_p_value > 0 and min_effect >= 0");
  }
  for (const double v : x) {
    if (!std::isfinite(v)) throw Error("change points: a value of the series is not finite");
  }
  std::mt19937_64 rng(o.seed);
  std::vector<ChangePoint> out;
  segment(x, 0, x.size(), o, rng, out);
  return out;
}

}  // namespace dpbench
