#include "train/engine_probe.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/hierarchical.hpp"

namespace dpbench {

namespace {
// One call of `kind` on the first `n` floats of `buf` (and `out`, as large), the way the modes
// call it: the allreduce and the reduce-scatter through their non-blocking start where the
// communicator has one (DDP's buckets, sharded_ps's push).
void run_collective(Communicator& comm, CollectiveKind kind, std::vector<float>& buf, std::vector<float>& out,
                    std::size_t n, int hierarchy, WireFormat format, const std::vector<std::size_t>& segments = {}) {
  const std::vector<std::size_t> counts = segments.empty() ? even_counts(n, comm.world_size()) : segments;
  switch (kind) {
    case CollectiveKind::allreduce:
      if (hierarchy > 0) {
        hierarchical_allreduce_sum(comm, buf.data(), n, hierarchy, out, format);
        break;
      }
      comm.allreduce_sum_start(buf.data(), n);
      comm.wait_all();
      break;
    case CollectiveKind::reduce:
      if (hierarchy > 0) {
        hierarchical_reduce_sum(comm, buf.data(), n, hierarchy, out);
        break;
      }
      comm.reduce_sum(buf.data(), n, 0);
      break;
    case CollectiveKind::broadcast:
      if (hierarchy > 0) {
        hierarchical_broadcast(comm, buf.data(), n, hierarchy);
        break;
      }
      comm.broadcast(buf.data(), n, 0);
      break;
    case CollectiveKind::reduce_scatter:
      if (hierarchy > 0) {
        hierarchical_reduce_scatterv_sum(comm, buf.data(), counts, hierarchy, out);
        break;
      }
      comm.reduce_scatterv_sum_start(buf.data(), counts, out.data());
      comm.wait_all();
      break;
    case CollectiveKind::allgather:
      if (hierarchy > 0) {
        hierarchical_allgatherv(comm, buf.data(), counts, hierarchy);
        break;
      }
      comm.allgatherv(buf.data(), counts);
      break;
    case CollectiveKind::scatter: comm.scatterv(buf.data(), counts, out.data(), 0); break;
    case CollectiveKind::gather: comm.gatherv(buf.data(), counts, out.data(), 0); break;
    case CollectiveKind::p2p: {  // one round of sendrecv (sharded_ps --sparse-grad's exchanges)
      const int p = comm.world_size(), r = comm.rank();
      comm.sendrecv(buf.data(), counts.front(), (r + 1) % p, out.data(), counts.front(), (r - 1 + p) % p);
      break;
    }
  }
}
// Rank 0's reading of the gathered times (`all`: per rank [reps][1 + k] seconds after its own
// reference; `refs`: each rank's reference as a double's bits; `ref_s`: rank 0's). Each repetition
// starts when its last rank left the barrier (every rank is in the sequence from then on, as every
// rank is at 0 in the simulation) and each collective ends when its last rank left it. Returns the
// k ends of every repetition.
std::vector<std::vector<double>> repetition_ends(const std::vector<float>& all, const std::vector<float>& refs,
                                                 double ref_s, std::size_t ps, std::size_t n, std::size_t k) {
  const std::size_t per = n * (k + 1);
  std::vector<double> offset(ps, 0.0);
  for (std::size_t r = 0; r < ps; ++r) {
    double other = 0;
    std::memcpy(&other, &refs[2 * r], sizeof other);
    offset[r] = other - ref_s;
  }
  const auto at = [&](std::size_t r, std::size_t i, std::size_t j) {
    return offset[r] + all[r * per + i * (k + 1) + j];
  };
  std::vector<std::vector<double>> ends(n, std::vector<double>(k, 0.0));
  for (std::size_t i = 0; i < n; ++i) {
    double start = -std::numeric_limits<double>::infinity();
    for (std::size_t r = 0; r < ps; ++r) start = std::max(start, at(r, i, 0));
    for (std::size_t j = 0; j < k; ++j) {
      double end = -std::numeric_limits<double>::infinity();
      for (std::size_t r = 0; r < ps; ++r) end = std::max(end, at(r, i, j + 1));
      ends[i][j] = std::max(0.0, end - start);
    }
  }
  return ends;
}

// Each collective's mean end over the repetitions (`ends` not empty, each of k >= 1): the mean, as
// the simulation it calibrates is held against the run's mean step.
std::vector<double> mean_ends(const std::vector<std::vector<double>>& ends) {
  std::vector<double> mean(ends.front().size(), 0.0);
  for (const auto& repetition : ends) {
    for (std::size_t j = 0; j < mean.size(); ++j) mean[j] += repetition[j] / static_cast<double>(ends.size());
  }
  return mean;
}

double median_of(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

namespace {
// InputError unless there is a size per kind, each of a float per rank at least, every segments
// list empty or of a count per rank summing to its size, and a repetition.
void check_probe_sizes(std::size_t kinds, const std::vector<std::size_t>& floats,
                       const std::vector<std::vector<std::size_t>>& segments, int p, int reps) {
  const std::size_t least = floats.empty() ? static_cast<std::size_t>(p)
                                           : *std::min_element(floats.begin(), floats.end());
  if (floats.size() != kinds || least < static_cast<std::size_t>(p) || reps < 1) {
    throw InputError(fmt::format("engine probe: {} floats over {} ranks, {} repetitions: needs a float per rank and "
                                 "a repetition",
                                 least, p, reps));
  }
  for (std::size_t j = 0; j < segments.size() && j < floats.size(); ++j) {
    std::size_t sum = 0;
    for (std::size_t c : segments[j]) sum += c;
    if (!segments[j].empty() && (segments[j].size() != static_cast<std::size_t>(p) || sum != floats[j])) {
      throw InputError(fmt::format("engine probe: {} segments summing to {} for {} floats over {} ranks",
                                   segments[j].size(), sum, floats[j], p));
    }
  }
}

// Every rank's times (`mine`) and its reference `ref_s` gathered to rank 0: {all, refs}, the
// references as the bits of a double each (two floats' worth, copied, never summed).
std::pair<std::vector<float>, std::vector<float>> gather_times(Communicator& comm, const std::vector<float>& mine,
                                                               double ref_s) {
  const auto ps = static_cast<std::size_t>(comm.world_size());
  std::vector<float> all(mine.size() * ps, 0.0f);
  comm.gatherv(mine.data(), std::vector<std::size_t>(ps, mine.size()), all.data(), 0);
  std::array<float, 2> ref_bits{};
  std::memcpy(ref_bits.data(), &ref_s, sizeof ref_s);
  std::vector<float> refs(2 * ps, 0.0f);
  comm.gatherv(ref_bits.data(), std::vector<std::size_t>(ps, 2), refs.data(), 0);
  return {std::move(all), std::move(refs)};
}
// Runs `repetition` (which appends its times to `mine`, the last its end on this rank's clock)
// unmeasured, then measured, and returns how many were measured. Unmeasured first: the sequence at
// full size until it has run warmup_seconds, as rank 0 counts (at least once). The first
// repetitions after the connections' first use ran at 2-3x the steady state on an emulated cluster
// whose ranks share the host's cores (the node hierarchy's all-reduce at 1 Gbit/s: 100-130 ms
// against 25-50 ms from the third on). Then `reps`, and more while they would take less than
// min_seconds at the first one's time on rank 0 (short sequences on fast links), at most
// kMaxRepetitions.
int run_repetitions(Communicator& comm, const std::function<void()>& repetition, std::vector<float>& mine,
                    std::size_t k, int reps, double min_seconds, float warmup_seconds) {
  for (float warm = -1; k > 0 && warm < warmup_seconds;) {
    repetition();
    warm = mine.back();
    comm.broadcast(&warm, 1, 0);
    mine.clear();
  }
  repetition();
  float first = k > 0 ? mine.back() - mine.front() : 0.0f;
  comm.broadcast(&first, 1, 0);
  if (min_seconds > 0 && first > 0) {
    reps = std::max(reps, static_cast<int>(std::min<double>(kMaxRepetitions, std::ceil(min_seconds / first))));
  }
  for (int i = 1; i < reps; ++i) repetition();
  return reps;
}
}  // namespace

std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        std::size_t floats, int reps, double min_seconds, int hierarchy,
                                        WireFormat format) {
  return probe_engine(comm, kinds, std::vector<std::size_t>(kinds.size(), floats), reps, min_seconds, hierarchy,
                      format);
}

std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        const std::vector<std::size_t>& floats, int reps, double min_seconds,
                                        int hierarchy, WireFormat format,
                                        const std::vector<std::vector<std::size_t>>& segments, float warmup_seconds) {
  const int p = comm.world_size();
  check_probe_sizes(kinds.size(), floats, segments, p, reps);
  static const std::vector<std::size_t> kEven;
  const auto segments_of = [&](std::size_t j) -> const auto& { return j < segments.size() ? segments[j] : kEven; };
  const std::size_t most = floats.empty() ? 0 : *std::max_element(floats.begin(), floats.end());
  std::vector<float> buf(most, 0.0f), out(most, 0.0f);
  for (CollectiveKind kind : kinds)
    run_collective(comm, kind, buf, out, static_cast<std::size_t>(p), hierarchy, format);
  // Every rank's times, [reps][1 + kinds]: when it left the repetition's barrier, then when it
  // left each collective, seconds after its own reference `ref`; gathered to rank 0 with the
  // references, which put them on the host's one monotonic clock.
  const std::size_t k = kinds.size();
  const auto ref = std::chrono::steady_clock::now();
  const auto since_ref = [&ref] {
    return static_cast<float>(std::chrono::duration<double>(std::chrono::steady_clock::now() - ref).count());
  };
  std::vector<float> mine;
  auto repetition = [&] {
    comm.barrier();
    mine.push_back(since_ref());
    for (std::size_t j = 0; j < k; ++j) {
      run_collective(comm, kinds[j], buf, out, floats[j], hierarchy, format, segments_of(j));
      mine.push_back(since_ref());
    }
  };
  reps = run_repetitions(comm, repetition, mine, k, reps, min_seconds, warmup_seconds);
  comm.barrier();
  const auto ps = static_cast<std::size_t>(p);
  const double ref_s = std::chrono::duration<double>(ref.time_since_epoch()).count();
  const auto [all, refs] = gather_times(comm, mine, ref_s);
  if (comm.rank() != 0 || k == 0) return std::nullopt;
  if (all.size() != static_cast<std::size_t>(reps) * (k + 1) * ps ||
      mine.size() != static_cast<std::size_t>(reps) * (k + 1)) {
    throw Error("engine probe: the ranks ran different repetitions");
  }
  EngineProbe probe{{}, reps, std::nullopt, repetition_ends(all, refs, ref_s, ps, static_cast<std::size_t>(reps), k),
                    1,  {}};
  const std::vector<double> mean = mean_ends(probe.repetition_ends);
  for (std::size_t j = 0; j < k; ++j) {
    probe.collectives.push_back({kinds[j], floats[j], segments_of(j), mean[j], mean[j] - (j == 0 ? 0.0 : mean[j - 1])});
  }
  return probe;
}

std::optional<IntraNodeProbe> probe_intra_node(Communicator& comm, int ranks_per_node, std::size_t floats, int reps,
                                               const std::function<double()>& clock) {
  if (floats == 0 || reps < 1) {
    throw InputError(fmt::format("intra-node probe: {} floats, {} repetitions: needs both", floats, reps));
  }
  const int p = comm.world_size();
  if (ranks_per_node < 2 || p < 2) return std::nullopt;
  const int me = comm.rank();
  // Local ranks 2i and 2i + 1 of every node pair up (a node's odd last rank sits out).
  const int partner = me % 2 == 0 ? me + 1 : me - 1;
  const bool paired = partner < p && partner / ranks_per_node == me / ranks_per_node;
  std::vector<float> send(paired ? floats : 0, 1.0f), recv(paired ? floats : 0, 0.0f);
  // One round trip of n floats: the lower rank of the pair sends first.
  const auto now = [&clock] {
    return clock ? clock() : std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  auto round_trip = [&](std::size_t n) {
    const double t0 = now();
    if (me < partner) {
      comm.send(send.data(), n, partner);
      comm.recv(recv.data(), n, partner);
    } else {
      comm.recv(recv.data(), n, partner);
      comm.send(send.data(), n, partner);
    }
    return now() - t0;
  };
  std::vector<double> small, large;
  for (int i = 0; i <= reps; ++i) {
    comm.barrier();
    if (!paired) continue;
    const double one = round_trip(1);
    const double all = round_trip(floats);
    if (i > 0) {
      small.push_back(one);
      large.push_back(all);
    }
  }
  comm.barrier();
  if (me != 0) return std::nullopt;
  return intra_node_from_round_trips(floats, std::move(small), std::move(large));
}

IntraNodeProbe intra_node_from_round_trips(std::size_t floats, std::vector<double> small, std::vector<double> large) {
  if (small.empty() || large.empty()) {
    throw InputError(fmt::format("intra-node probe: {} and {} round trips: needs both", small.size(), large.size()));
  }
  IntraNodeProbe probe;
  probe.floats = floats;
  probe.seconds = median_of(large);
  probe.latency_s = median_of(small) / 2.0;
  const double bytes = 2.0 * static_cast<double>(floats * sizeof(float));
  // The two latencies come off the round trip only where they are a small part of it: a one-float
  // round trip that waited out a time slice would leave next to nothing, and a rate far too high.
  const bool latency_small = 2.0 * probe.latency_s < 0.5 * probe.seconds;
  probe.bytes_per_s = bytes / (latency_small ? probe.seconds - 2.0 * probe.latency_s : probe.seconds);
  probe.repetitions = static_cast<int>(large.size());
  probe.small_round_trips = std::move(small);
  probe.large_round_trips = std::move(large);
  return probe;
}

namespace {
// The probes' intra-node links pooled (pool_probes); nullopt unless every probe has one on the same floats.
std::optional<IntraNodeProbe> pool_intra_node(const std::vector<const EngineProbe*>& probes) {
  std::vector<double> small, large;
  for (const EngineProbe* p : probes) {
    if (!p->intra_node || p->intra_node->floats != probes.front()->intra_node->floats ||
        p->intra_node->small_round_trips.empty() || p->intra_node->large_round_trips.empty()) {
      return std::nullopt;
    }
    small.insert(small.end(), p->intra_node->small_round_trips.begin(), p->intra_node->small_round_trips.end());
    large.insert(large.end(), p->intra_node->large_round_trips.begin(), p->intra_node->large_round_trips.end());
  }
  IntraNodeProbe pooled = intra_node_from_round_trips(probes.front()->intra_node->floats, std::move(small),
                                                      std::move(large));
  pooled.runs = static_cast<int>(probes.size());
  return pooled;
}

// Whether two probes probed the same collectives on the same floats and kept every repetition.
bool same_sequence(const EngineProbe& a, const EngineProbe& b) {
  if (a.collectives.size() != b.collectives.size()) return false;
  if (!a.collectives.empty() && (a.repetition_ends.empty() || b.repetition_ends.empty())) return false;
  for (std::size_t j = 0; j < a.collectives.size(); ++j) {
    const CollectiveProbe &x = a.collectives[j], &y = b.collectives[j];
    if (x.kind != y.kind || x.floats != y.floats || x.counts != y.counts) return false;
  }
  return true;
}
}  // namespace

std::optional<EngineProbe> pool_probes(const std::vector<const EngineProbe*>& probes) {
  if (probes.empty()) return std::nullopt;
  for (const EngineProbe* p : probes) {
    if (p == nullptr || !same_sequence(*probes.front(), *p)) return std::nullopt;
  }
  EngineProbe pooled{probes.front()->collectives, 0, std::nullopt, {}, static_cast<int>(probes.size()), {}};
  for (const EngineProbe* p : probes) {
    pooled.repetition_ends.insert(pooled.repetition_ends.end(), p->repetition_ends.begin(), p->repetition_ends.end());
    pooled.repetitions += p->repetitions;
  }
  if (!pooled.collectives.empty()) {
    const std::vector<double> mean = mean_ends(pooled.repetition_ends);
    for (std::size_t j = 0; j < pooled.collectives.size(); ++j) {
      pooled.collectives[j].end_s = mean[j];
      pooled.collectives[j].seconds = mean[j] - (j == 0 ? 0.0 : mean[j - 1]);
    }
  }
  pooled.intra_node = pool_intra_node(probes);
  std::vector<const ReductionCost*> reductions;
  for (const EngineProbe* p : probes) {
    if (!p->reduction.empty()) reductions.push_back(&p->reduction);
  }
  if (reductions.size() == probes.size()) pooled.reduction = median_reduction(reductions);
  return pooled;
}

}  // namespace dpbench
