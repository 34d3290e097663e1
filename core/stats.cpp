#include "core/stats.hpp"

#include <algorithm>
#include <cmath>

namespace dpbench {

double quantile(std::vector<double> samples, double q) {
  if (samples.empty()) return 0.0;
  std::sort(samples.begin(), samples.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(samples.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, samples.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return samples[lo] + (samples[hi] - samples[lo]) * frac;
}

double relative_standard_error(const std::vector<double>& samples) {
  const auto n = static_cast<double>(samples.size());
  if (samples.size() < 2) return 0.0;
  double sum = 0;
  for (const double x : samples) sum += x;
  const double mean = sum / n;
  if (mean == 0) return 0.0;
  double squares = 0;
  for (const double x : samples) squares += (x - mean) * (x - mean);
  return std::sqrt(squares / (n - 1.0)) / std::sqrt(n) / std::abs(mean);
}

}  // namespace dpbench
