// Order statistics of timing samples, as benchmark reports use them (medians and percentiles
// rather than means of noisy samples).
#pragma once

#include <vector>

namespace dpbench {

// q-th quantile (q in [0, 1]) with linear interpolation between closest ranks (numpy's default).
// Returns 0 for an empty sample.
double quantile(std::vector<double> samples, double q);
inline double median(const std::vector<double>& samples) { return quantile(samples, 0.5); }
// The standard error of the samples' mean over their mean (sample standard deviation, n - 1, over
// sqrt(n), as for independent samples); 0 for fewer than two samples or a zero mean.
double relative_standard_error(const std::vector<double>& samples);

}  // namespace dpbench
