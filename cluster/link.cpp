#include "cluster/link.hpp"

#include <algorithm>
#include <cmath>
#include <regex>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench::cluster {

const LinkRate& ClusterSpec::rate_of(int node) const {
  const auto it = link_of.find(node);
  return it == link_of.end() ? link : it->second;
}

void parse_link_of(const std::vector<std::string>& values, ClusterSpec& spec) {
  static const std::regex form(R"(^([0-9]+)=(.+)$)");
  for (const auto& v : values) {
    std::smatch m;
    if (!std::regex_match(v, m, form)) {
      throw InputError(fmt::format("--link-of {}: expected NODE=RATE, e.g. 2=100mbit", v));
    }
    const int node = std::stoi(m[1].str());
    if (node >= spec.nodes) {
      throw InputError(
          fmt::format("--link-of {}: node {} is not one of the {} nodes (0..{})", v, node, spec.nodes, spec.nodes - 1));
    }
    spec.link_of[node] = parse_rate(m[2].str(), "--link-of");
  }
}

void validate(const ClusterSpec& spec) {
  if (spec.nodes < 2 || spec.nodes > 64) {
    throw InputError(fmt::format("--nodes {}: an emulated cluster has 2 to 64 nodes", spec.nodes));
  }
  if (spec.ranks_per_node < 1 || spec.ranks_per_node > 16) {
    throw InputError(fmt::format("--ranks-per-node {}: must be 1 to 16", spec.ranks_per_node));
  }
  if (spec.link.bits_per_s <= 0) throw InputError("--nodes: give the links' rate with --link RATE (e.g. 1gbit)");
  if (spec.rdzv_backend != "c10d" && spec.rdzv_backend != "etcd") {
    throw InputError(fmt::format("--rdzv-backend {}: expected c10d or etcd", spec.rdzv_backend));
  }
  if (spec.max_restarts < 0 || spec.max_restarts > 10) {
    throw InputError(fmt::format("--max-restarts {}: must be 0 to 10", spec.max_restarts));
  }
}

void dilate(ClusterSpec& spec, double factor) {
  auto one = [factor](LinkRate& r, const char* option) {
    r.bits_per_s /= factor;
    r.text = fmt::format("{}/{:g}", r.text, factor);
    if (r.bits_per_s > 100e9 || r.bits_per_s < 1e3) {
      throw InputError(fmt::format("{} {}: {:g} bit/s once dilated, outside tc's 1 kbit/s to 100 gbit/s", option,
                                   r.text, r.bits_per_s));
    }
  };
  one(spec.link, "--link");
  for (auto& [node, rate] : spec.link_of) one(rate, "--link-of");
}

std::vector<std::string> tbf_args(const std::string& dev, const LinkRate& rate) {
  const double bytes_per_s = rate.bits_per_s / 8.0;
  const auto burst = static_cast<long>(std::max(bytes_per_s * 0.001, 64.0 * 1024.0));
  return {"qdisc",   "replace",
          "dev",     dev,
          "root",    "tbf",
          "rate",    fmt::format("{:.0f}bit", rate.bits_per_s),
          "burst",   std::to_string(burst),
          "latency", "50ms"};
}

std::string node_address(int node) { return fmt::format("198.18.0.{}", node + 1); }
std::string switch_address() { return "198.18.0.254"; }

}  // namespace dpbench::cluster
