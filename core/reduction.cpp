#include "core/reduction.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/stats.hpp"

namespace dpbench {

void sum_floats(float* out, const float* peer_in, const float* own, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = peer_in[i] + own[i];
}

double ReductionCost::seconds(double bytes) const {
  if (rates.empty() || !(bytes > 0)) return 0.0;
  if (bytes <= rates.front().bytes) return bytes / rates.front().bytes_per_s;
  if (bytes >= rates.back().bytes) return bytes / rates.back().bytes_per_s;
  const auto hi = std::upper_bound(rates.begin(), rates.end(), bytes,
                                   [](double b, const ReductionRate& r) { return b < r.bytes; });
  const auto lo = hi - 1;
  const double t = std::log(bytes / lo->bytes) / std::log(hi->bytes / lo->bytes);
  return bytes / (lo->bytes_per_s + t * (hi->bytes_per_s - lo->bytes_per_s));
}

nlohmann::json ReductionCost::to_json() const {
  nlohmann::json out = nlohmann::json::array();
  for (const ReductionRate& r : rates) out.push_back({{"bytes", r.bytes}, {"bytes_per_s", r.bytes_per_s}});
  return out;
}

ReductionCost reduction_cost_from_json(const nlohmann::json& j, const char* where) {
  if (!j.is_array()) throw InputError(fmt::format("{}: the reduction's rates are not a list", where));
  ReductionCost cost;
  for (const auto& r : j) {
    const auto positive = [&](const char* key) {
      if (!r.is_object() || !r.contains(key) || !r[key].is_number() || !(r[key].get<double>() > 0)) {
        throw InputError(fmt::format("{}: a reduction rate's {} is missing or not a positive number", where, key));
      }
      return r[key].get<double>();
    };
    const ReductionRate rate{positive("bytes"), positive("bytes_per_s")};
    if (!cost.rates.empty() && rate.bytes <= cost.rates.back().bytes) {
      throw InputError(fmt::format("{}: the reduction's rates are not in ascending bytes", where));
    }
    cost.rates.push_back(rate);
  }
  return cost;
}

std::vector<double> default_reduction_sizes() {
  return {16.0 * 1024, 256.0 * 1024, 4.0 * 1024 * 1024, 32.0 * 1024 * 1024};
}

ReductionCost probe_reduction(const std::vector<double>& sizes, int repetitions) {
  if (repetitions < 1) throw Error(fmt::format("reduction probe: {} repetitions", repetitions));
  using clock = std::chrono::steady_clock;
  constexpr double kMinPassSeconds = 200e-6;
  ReductionCost cost;
  for (double bytes : sizes) {
    if (!(bytes >= 4)) throw Error(fmt::format("reduction probe: a size of {} bytes", bytes));
    const auto n = static_cast<std::size_t>(bytes / 4);
    std::vector<float> own(n, 0.0f), peer(n, 1e-3f);
    auto t0 = clock::now();
    sum_floats(own.data(), peer.data(), own.data(), n);
    const double once = std::chrono::duration<double>(clock::now() - t0).count();
    const int passes = std::max(1, static_cast<int>(std::ceil(kMinPassSeconds / std::max(once, 1e-9))));
    std::vector<double> rates;
    for (int k = 0; k < repetitions; ++k) {
      t0 = clock::now();
      for (int i = 0; i < passes; ++i) sum_floats(own.data(), peer.data(), own.data(), n);
      const double s = std::chrono::duration<double>(clock::now() - t0).count();
      rates.push_back(4.0 * static_cast<double>(n) * passes / std::max(s, 1e-9));
    }
    volatile float sink = own[n / 2];  // the sums are used
    (void)sink;
    cost.rates.push_back({4.0 * static_cast<double>(n), median(rates)});
  }
  return cost;
}

ReductionCost median_reduction(const std::vector<const ReductionCost*>& costs) {
  ReductionCost out;
  if (costs.empty()) return out;
  for (const ReductionRate& r : costs.front()->rates) {
    std::vector<double> rates;
    for (const ReductionCost* c : costs) {
      const auto it = std::find_if(c->rates.begin(), c->rates.end(),
                                   [&](const ReductionRate& x) { return x.bytes == r.bytes; });
      if (it != c->rates.end()) rates.push_back(it->bytes_per_s);
    }
    if (rates.size() == costs.size()) out.rates.push_back({r.bytes, median(rates)});
  }
  return out;
}

}  // namespace dpbench
