// Figures of a step at many identical nodes from simulations at a few: where every node added to
// a schedule adds the same time (a pipelined chain through the nodes, a root that serves them in
// turn), the step is affine in the node count once the pipeline is full, and a simulation at
// 1,024 ranks needs only three at 64 to 256. The premise is checked, never assumed: every figure
// must grow by the same amount per node over two consecutive doublings, to a share `tolerance`
// of that amount.
#pragma once

#include <functional>
#include <optional>
#include <vector>

namespace dpbench {

struct NodeExtrapolation {
  std::vector<double> figures;  // at the requested node count
  std::vector<int> from_nodes;  // the three node counts it was extrapolated from (n, 2n, 4n)
};

// `figures_at(n)`: the figures at n nodes (the same count every call). Tries n = 4, 8, 16, ...
// while 8n <= nodes, each at most once per n: the first n whose figures at n, 2n and 4n grow
// affinely (|slope(2n..4n) - slope(n..2n)| <= tolerance x the larger slope, for every figure)
// gives figures(4n) + slope(2n..4n) x (nodes - 4n). nullopt when none does. Throws what
// figures_at throws.
std::optional<NodeExtrapolation> extrapolate_in_nodes(int nodes,
                                                      const std::function<std::vector<double>(int nodes)>& figures_at,
                                                      double tolerance = 1e-3);

}  // namespace dpbench
