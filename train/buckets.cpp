#include "train/buckets.hpp"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

std::vector<Bucket> assign_buckets(const std::vector<ParamView>& params, std::size_t elem_bytes, double first_bucket_mb,
                                   double bucket_cap_mb, const std::vector<std::size_t>& ready_order) {
  if (!(bucket_cap_mb > 0)) {
    throw InputError(fmt::format("--bucket-cap-mb {}: must be positive", bucket_cap_mb));
  }
  if (!(first_bucket_mb > 0)) {
    throw InputError(fmt::format("first bucket size {} MiB: must be positive", first_bucket_mb));
  }
  std::vector<std::size_t> order = ready_order;
  if (order.empty()) {
    for (std::size_t i = params.size(); i-- > 0;) order.push_back(i);
  }
  std::vector<char> seen(params.size(), 0);
  for (std::size_t i : order) {
    if (i >= params.size() || seen[i]++) throw Error("assign_buckets: the ready order is not a permutation");
  }
  if (order.size() != params.size()) throw Error("assign_buckets: the ready order is not a permutation");
  const auto mib = [](double mb) { return static_cast<std::size_t>(mb * 1024.0 * 1024.0); };
  std::vector<Bucket> buckets;
  Bucket current;
  std::size_t limit = mib(first_bucket_mb);
  for (std::size_t i : order) {
    const ParamView& p = params[i];
    current.offset = current.params.empty() ? p.offset : std::min(current.offset, p.offset);
    current.size += p.size;
    current.params.push_back(i);
    if (current.size * elem_bytes >= limit) {
      buckets.push_back(std::move(current));
      current = Bucket{};
      limit = mib(bucket_cap_mb);
    }
  }
  if (!current.params.empty()) buckets.push_back(std::move(current));
  for (const Bucket& b : buckets) {  // the elements of its tensors are exactly [offset, offset + size)
    std::size_t lo = SIZE_MAX, hi = 0;
    for (std::size_t i : b.params) {
      lo = std::min(lo, params[i].offset);
      hi = std::max(hi, params[i].offset + params[i].size);
    }
    if (lo != b.offset || hi - lo != b.size) {
      throw Error(fmt::format("assign_buckets: a bucket of {} tensors is not one contiguous range of the flat buffer",
                              b.params.size()));
    }
  }
  return buckets;
}

BucketLauncher::BucketLauncher(const std::vector<Bucket>& buckets, std::size_t num_params,
                               std::function<void(std::size_t)> launch)
    : buckets_(buckets), bucket_of_(num_params), pending_(buckets.size()), launch_(std::move(launch)) {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (std::size_t p : buckets_[b].params) bucket_of_[p] = b;
  }
  reset();
}

void BucketLauncher::reset() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) pending_[b] = buckets_[b].params.size();
  next_ = 0;
}

void BucketLauncher::mark_ready(std::size_t param) {
  --pending_[bucket_of_[param]];
  while (next_ < buckets_.size() && pending_[next_] == 0) launch_(next_++);
}

}  // namespace dpbench
