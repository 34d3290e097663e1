// The host's reduction: the add a collective does when it receives floats to sum into its own
// (the local ring's and chain's add, gloo's sum, Open MPI's MPI_SUM on floats: one streaming pass
// reading two arrays and writing one), and what it costs, measured at a few sizes and played by
// the schedules as compute (core/schedule.hpp Collectives, ASTRA-sim's reduction at local memory
// bandwidth). Not for: a GPU's reductions (NCCL's, in its kernels), which this does not measure.
#pragma once

#include <cstddef>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpbench {

// out[i] = peer_in[i] + own[i] for i < n; out may be own. The local engine's add on the host
// (core/local_comm.cpp HostMemOps) and what probe_reduction times.
void sum_floats(float* out, const float* peer_in, const float* own, std::size_t n);

// The rate of a reduction of `bytes` (the floats received and summed in, 4 bytes each).
struct ReductionRate {
  double bytes = 0;        // > 0
  double bytes_per_s = 0;  // > 0
};

// What the host's reductions cost by size: rates measured at a few sizes, in ascending bytes.
// Between two sizes the rate is interpolated linearly in log(bytes); outside, the nearest size's.
// Empty: reductions cost nothing (a schedule without a measured host).
struct ReductionCost {
  std::vector<ReductionRate> rates;

  bool empty() const { return rates.empty(); }
  // Seconds to sum `bytes` received into a rank's own (0 when empty or bytes <= 0).
  double seconds(double bytes) const;
  // [{"bytes", "bytes_per_s"}, ...]
  nlohmann::json to_json() const;
};

// The cost from its to_json() form. Throws InputError naming `where` when it is not a list of
// objects with positive bytes and bytes_per_s in ascending bytes.
ReductionCost reduction_cost_from_json(const nlohmann::json& j, const char* where);

// The sizes probe_reduction measures by default (bytes): 16 KiB, 256 KiB, 4 MiB and 32 MiB, from
// a ring's chunks of a small model to a chain's slices and a large gradient's root sums.
std::vector<double> default_reduction_sizes();

// Times sum_floats at each of `sizes` (bytes, ascending, each at least 4): after one untimed
// pass, the median of `repetitions` passes (each at least 200 us of adds, repeated as needed) over
// buffers of that size, so the rate at a size that fits a cache is the cache's. Throws Error when
// a size is below 4 bytes or repetitions < 1.
ReductionCost probe_reduction(const std::vector<double>& sizes, int repetitions);

// Each size's median rate over `costs` (the probes of several runs, e.g. a host profile's runs),
// at the sizes every cost has; empty when none has any.
ReductionCost median_reduction(const std::vector<const ReductionCost*>& costs);

}  // namespace dpbench
