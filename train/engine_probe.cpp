#include "train/engine_probe.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {
// One call of `kind` on the first `n` floats of `buf` (and `out`, as large), the way the modes
// call it: the allreduce and the reduce-scatter through their non-blocking start where the
// communicator has one (DDP's buckets, sharded_ps's push).
void run_collective(Communicator& comm, CollectiveKind kind, std::vector<float>& buf, std::vector<float>& out,
                    std::size_t n) {
  const std::vector<std::size_t> counts = even_counts(n, comm.world_size());
  switch (kind) {
    case CollectiveKind::allreduce:
      comm.allreduce_sum_start(buf.data(), n);
      comm.wait_all();
      break;
    case CollectiveKind::reduce: comm.reduce_sum(buf.data(), n, 0); break;
    case CollectiveKind::broadcast: comm.broadcast(buf.data(), n, 0); break;
    case CollectiveKind::reduce_scatter:
      comm.reduce_scatterv_sum_start(buf.data(), counts, out.data());
      comm.wait_all();
      break;
    case CollectiveKind::allgather: comm.allgatherv(buf.data(), counts); break;
    case CollectiveKind::scatter: comm.scatterv(buf.data(), counts, out.data(), 0); break;
    case CollectiveKind::gather: comm.gatherv(buf.data(), counts, out.data(), 0); break;
    case CollectiveKind::p2p: break;
  }
}
}  // namespace

std::vector<CollectiveKind> probed_collectives(const std::string& mode, const std::string& transport) {
  using K = CollectiveKind;
  const bool p2p = transport == "p2p";
  if (mode == "ps") {
    return p2p ? std::vector<K>{K::scatter, K::gather} : std::vector<K>{K::broadcast, K::scatter, K::gather, K::reduce};
  }
  if (mode == "sharded_ps") return p2p ? std::vector<K>{} : std::vector<K>{K::reduce_scatter, K::allgather};
  if (mode == "allreduce") return {K::allreduce};
  return {};
}

std::optional<EngineProbe> probe_engine(Communicator& comm, const std::vector<CollectiveKind>& kinds,
                                        std::size_t floats, int reps, double min_seconds) {
  const int p = comm.world_size();
  if (floats < static_cast<std::size_t>(p) || reps < 1) {
    throw InputError(fmt::format("engine probe: {} floats over {} ranks, {} repetitions: needs a float per rank and "
                                 "a repetition",
                                 floats, p, reps));
  }
  std::vector<float> buf(floats, 0.0f), out(floats, 0.0f);
  for (CollectiveKind kind : kinds) run_collective(comm, kind, buf, out, static_cast<std::size_t>(p));
  // Every rank's exit times, [reps][kinds], seconds after its own barrier exit, gathered to rank 0.
  const std::size_t k = kinds.size();
  std::vector<float> mine;
  auto repetition = [&] {
    comm.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t j = 0; j < k; ++j) {
      run_collective(comm, kinds[j], buf, out, floats);
      mine.push_back(static_cast<float>(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
    }
  };
  repetition();
  // Short sequences (fast links) repeat until min_seconds, as rank 0 counts them, at most
  // kMaxRepetitions times.
  float first = k > 0 ? mine.back() : 0.0f;
  comm.broadcast(&first, 1, 0);
  if (min_seconds > 0 && first > 0) {
    reps = std::max(reps, static_cast<int>(std::min<double>(kMaxRepetitions, std::ceil(min_seconds / first))));
  }
  for (int i = 1; i < reps; ++i) repetition();
  comm.barrier();
  std::vector<float> all(mine.size() * static_cast<std::size_t>(p), 0.0f);
  comm.gatherv(mine.data(), std::vector<std::size_t>(static_cast<std::size_t>(p), mine.size()), all.data(), 0);
  if (comm.rank() != 0 || k == 0) return std::nullopt;
  // Each repetition's ends: the latest rank's; then the repetition of the median total.
  std::vector<std::vector<double>> ends(static_cast<std::size_t>(reps), std::vector<double>(k, 0.0));
  if (all.size() != ends.size() * k * static_cast<std::size_t>(p)) throw Error("engine probe: the ranks ran different repetitions");
  for (std::size_t r = 0; r < static_cast<std::size_t>(p); ++r) {
    for (std::size_t i = 0; i < ends.size(); ++i) {
      for (std::size_t j = 0; j < k; ++j) ends[i][j] = std::max(ends[i][j], double{all[(r * ends.size() + i) * k + j]});
    }
  }
  std::sort(ends.begin(), ends.end(), [](const auto& a, const auto& b) { return a.back() < b.back(); });
  const std::vector<double>& median = ends[ends.size() / 2];
  EngineProbe probe{{}, reps};
  for (std::size_t j = 0; j < k; ++j) {
    probe.collectives.push_back({kinds[j], floats, median[j], median[j] - (j == 0 ? 0.0 : median[j - 1])});
  }
  return probe;
}

}  // namespace dpbench
