#include "train/engine_probe.hpp"

#include <algorithm>
#include <chrono>
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
                                        std::size_t floats, int reps) {
  const auto p = static_cast<std::size_t>(comm.world_size());
  if (floats < p || reps < 1) {
    throw InputError(fmt::format("engine probe: {} floats over {} ranks, {} repetitions: needs a float per rank and "
                                 "a repetition",
                                 floats, p, reps));
  }
  std::vector<float> buf(floats, 0.0f), out(floats, 0.0f);
  EngineProbe probe{{}, reps};
  for (CollectiveKind kind : kinds) {
    run_collective(comm, kind, buf, out, p);  // the connections' first use
    double best = std::numeric_limits<double>::infinity();
    for (int i = 0; i < reps; ++i) {
      comm.barrier();
      const auto t0 = std::chrono::steady_clock::now();
      run_collective(comm, kind, buf, out, floats);
      comm.barrier();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    probe.collectives.push_back({kind, floats, best});
  }
  if (comm.rank() != 0) return std::nullopt;
  return probe;
}

}  // namespace dpbench
