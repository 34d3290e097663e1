#include "sim/extrapolate.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace dpbench {

std::optional<NodeExtrapolation> extrapolate_in_nodes(int nodes,
                                                      const std::function<std::vector<double>(int nodes)>& figures_at,
                                                      double tolerance) {
  std::map<int, std::vector<double>> seen;
  const auto at = [&](int n) -> const std::vector<double>& {
    auto it = seen.find(n);
    if (it == seen.end()) it = seen.emplace(n, figures_at(n)).first;
    return it->second;
  };
  for (int n = 4; 8L * n <= nodes; n *= 2) {
    const std::vector<double>& a = at(n);
    const std::vector<double>& b = at(2 * n);
    const std::vector<double>& c = at(4 * n);
    NodeExtrapolation out{{}, {n, 2 * n, 4 * n}};
    for (std::size_t i = 0; i < c.size(); ++i) {
      const double first = (b[i] - a[i]) / n, second = (c[i] - b[i]) / (2.0 * n);
      if (std::abs(second - first) > tolerance * std::max(std::abs(first), std::abs(second))) break;
      out.figures.push_back(c[i] + second * (nodes - 4.0 * n));
    }
    if (out.figures.size() == c.size()) return out;
  }
  return std::nullopt;
}

}  // namespace dpbench
