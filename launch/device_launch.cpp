#include "launch/device_launch.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/mpi_comm.hpp"

namespace dpbench {

namespace {

// One rank of a torchrun-style launch (run_env_process: the id and the records go through the
// rendezvous at MASTER_ADDR:MASTER_PORT), on device local_rank % devices.
void run_env_device_rank(const LaunchSpec& spec, const RecordCodec& records, const DeviceRanks& device) {
  const ProcessIdentity& me = spec.process;
  const int rank = me.rank;
  const int local_rank = me.local_rank >= 0 ? me.local_rank : rank;
  const int node_ranks = me.ranks_on_this_node > 0 ? me.ranks_on_this_node : spec.world_size;
  const int gpus = device.devices;
  run_env_process(
      spec, records,
      [&] {
    const CommIdBytes id = device.create_id();
    return std::string(id.data(), id.size());
      },
      [&](const std::string& shared) {
    CommIdBytes id{};
    if (shared.size() != id.size()) {
      throw Error(
          fmt::format("rendezvous: rank 0 sent {} bytes for the ncclUniqueId, not {}", shared.size(), id.size()));
    }
    std::memcpy(id.data(), shared.data(), id.size());
    CommSource source;
    source.id = &id;
    device.run_rank(rank, local_rank % gpus, ranks_on_device(node_ranks, gpus, local_rank % gpus) > 1, source);
  });
}

// --comm nccl, one rank of a job whose processes the caller started and gave the ncclUniqueId
// (spec.process.rank, spec.process.nccl_id): runs it and leaves only its own record.
// Throws InputError for a rank outside the world or ranks sharing a GPU NCCL refuses.
void run_caller_launched_rank(const LaunchSpec& spec, const RecordCodec& records, const DeviceRanks& device) {
  const int gpus = device.devices, p = spec.world_size;
  const ProcessIdentity& me = spec.process;
  const int rank = me.rank;
  if (rank >= p) {
    throw InputError(fmt::format("rank {}: out of range for a world size of {}", rank, p));
  }
  // The caller says how many of the job's ranks share this node's GPUs (ranks_on_this_node,
  // LOCAL_WORLD_SIZE); without it, all of them do.
  const int node_ranks = me.ranks_on_this_node > 0 ? me.ranks_on_this_node : p;
  if (me.meets_at_rendezvous()) {
    apply_nccl_launch_policy(node_ranks, gpus, device.nccl_version(),
                             fmt::format("--comm nccl, {} ranks on this node (LOCAL_WORLD_SIZE)", node_ranks));
    return run_env_device_rank(spec, records, device);
  }
  apply_nccl_launch_policy(node_ranks, gpus, device.nccl_version(),
                           fmt::format("--comm nccl, rank {} of {}, {} on this node", rank, p, node_ranks));
  CommSource source;
  source.id = &me.nccl_id;
  device.run_rank(rank, rank % gpus, ranks_on_device(p, gpus, rank % gpus) > 1, source);
}

}  // namespace

bool apply_nccl_launch_policy(int ranks_on_node, int devices, const std::string& nccl_version,
                              const std::string& launch) {
  const bool allowed = nccl_allows_shared_gpu(nccl_version);
  if (allowed) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  const bool shared = ranks_on_node > devices;
  if (shared && !allowed) {
    // Refused up front: inside ncclCommInitRank only the ranks that share a GPU fail, and the
    // others may be left waiting for them there (where no abort reaches).
    throw InputError(fmt::format("{}: {} rank(s) on {} GPU(s) here, and NCCL {} refuses two ranks of one "
                                 "communicator on one GPU (NCCL 2.30 allows it); use --comm local for "
                                 "ranks sharing a GPU",
                                 launch, ranks_on_node, devices, nccl_version));
  }
  return shared;
}

void launch_device_ranks(const LaunchSpec& spec, const RecordCodec& records, const DeviceRanks& device) {
  if (spec.comm != Backend::local && spec.comm != Backend::nccl) {
    throw InputError(
        fmt::format("--comm {}: moves host buffers; GPU training runs on --comm local or nccl", name(spec.comm)));
  }
  const int gpus = device.devices;
  if (gpus < 1) throw Error("no CUDA device: cudaGetDeviceCount found none");
  const int p = spec.world_size;
  const bool nccl = spec.comm == Backend::nccl;

  if (nccl && spec.process.rank >= 0) return run_caller_launched_rank(spec, records, device);

  if (nccl && mpi_launched()) {
    // One rank per process: the GPU comes from the node-local rank. Rank 0 creates the id inside
    // run_mpi_process, so that a failure there ends the job with MPI_Abort rather than leaving
    // the other ranks in MPI_Bcast.
    MpiRuntime::init();
    const int local_rank = MpiRuntime::local_rank();
    const bool any_shared = apply_nccl_launch_policy(MpiRuntime::local_size(), gpus, device.nccl_version(),
                                                     fmt::format("mpirun --comm nccl, {} processes on this node",
                                                                 MpiRuntime::local_size()));
    const bool shared = ranks_on_device(MpiRuntime::local_size(), gpus, local_rank % gpus) > 1;
    run_mpi_process(spec, records, [&](int rank) {
      CommIdBytes id{};
      if (rank == 0) id = device.create_id();
      mpi_broadcast_bytes(id.data(), id.size(), 0);
      CommSource source;
      source.id = &id;
      // Every process meets, sharing or not, when any GPU of this node is shared: an MPI barrier
      // needs every rank.
      if (any_shared) source.shared_gpu_barrier = [](int) { mpi_idle_barrier(); };
      device.run_rank(rank, local_rank % gpus, shared, source);
    });
    return;
  }

  const bool shared = nccl && apply_nccl_launch_policy(p, gpus, device.nccl_version(),
                                                       fmt::format("--comm nccl --ranks {}", p));
  auto group = std::make_shared<LocalGroup>(p, spec.timeout);
  CommIdBytes id{};
  CommSource source;
  if (nccl) {
    id = device.create_id();
    source.id = &id;
    source.nccl_threads = group.get();
    if (shared) source.shared_gpu_barrier = [g = group.get()](int rank) { g->barrier(rank); };
  } else {
    source.group = group;
    source.peer_devices = std::min(p, gpus);
  }
  // NCCL communicators live outside the group: the group's abort reaches them through the registry.
  std::optional<CommAbortRegistry> live;
  if (nccl) {
    live.emplace(*group);
    source.on_live = [&](int rank, Communicator* comm) { live->set(rank, comm); };
  }
  run_rank_threads(*group, [&](int rank) {
    device.run_rank(rank, rank % gpus, ranks_on_device(p, gpus, rank % gpus) > 1, source);
  });
}

}  // namespace dpbench
