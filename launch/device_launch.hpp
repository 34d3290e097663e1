// How a device's ranks are launched when they talk over "local" (the in-process group, on a GPU
// over device copies) or "nccl" (one communicator per rank, all created from one id that rank 0
// makes): which ranks this process runs and on which device (rank r, or local rank r, on device
// r % devices; more ranks than devices make virtual ranks), as threads or one rank per process
// (mpirun, a torchrun-style launch, or a rank the caller names), how the id reaches every rank
// and how a failing rank's peers are aborted. Written once here, with no CUDA in it, so that the
// CUDA target supplies only how one rank runs (cuda/cuda_context.cpp) and CPU tests can drive
// every path with a fake device. The CPU device's launchers: launch/rank_launch.hpp.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "launch/rank_launch.hpp"

namespace dpbench {

class LocalGroup;

// An ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES = 128), as ProcessIdentity::nccl_id holds them.
using CommIdBytes = std::array<char, 128>;

// How one rank gets its communicator: the local group (on a GPU over device copies), or NCCL
// from the id every rank shares.
struct CommSource {
  std::shared_ptr<LocalGroup> group;  // local
  const CommIdBytes* id = nullptr;    // nccl
  // Called with the rank's communicator once it exists and with nullptr before it is destroyed
  // (so that a failing peer can abort it); may be empty.
  std::function<void(int rank, Communicator*)> on_live;
  // nccl ranks as threads: their group, for the teardown barrier and for aborting every rank's
  // communicator as soon as one rank fails.
  LocalGroup* nccl_threads = nullptr;
  int peer_devices = 1;  // local: the devices hosting the group's ranks (0..peer_devices-1)
  // nccl launches where ranks share a GPU: how every rank of the launch meets once it has
  // allocated, before its first collective (RankContext::before_first_collective). Threads: the
  // group's barrier; under mpirun: an MPI barrier. Empty when no GPU is shared, and on launches
  // that offer no way to meet (torchrun-style, a rank the caller names).
  std::function<void(int rank)> shared_gpu_barrier;
};

// What a device supplies to launch_device_ranks.
struct DeviceRanks {
  int devices = 0;  // devices this node can use
  // The linked NCCL's version ("2.28.9"; "" without NCCL), asked only when ranks share a device.
  std::function<std::string()> nccl_version;
  // ncclGetUniqueId's bytes; called on rank 0 (or this process) once per run. Throws on failure.
  std::function<CommIdBytes()> create_id;
  // Runs `rank` on `device` (virtual_rank: other ranks of this run share the device) with its
  // communicator from `source`, filling the rank's record (the one the RecordCodec encodes);
  // throws what the rank threw.
  std::function<void(int rank, int device, bool virtual_rank, const CommSource& source)> run_rank;
};

// Runs every rank of the run this process owns on `device` and leaves each rank's record on the
// output process (through `records` across processes): spec.comm local or nccl; ranks as threads,
// this process's rank under mpirun (rank 0 makes the id, MPI broadcasts it; the GPU is the
// node-local rank's), a rendezvous launch (spec.process.meets_at_rendezvous(): the id and the records go
// through the rendezvous), or spec.process.rank with spec.process.nccl_id. Failures as the CPU
// launchers (launch/rank_launch.hpp): the first failing rank's error, rethrown with its rank; the
// other ranks' communicators aborted. Throws InputError for a backend other than local or nccl (it
// moves host buffers), a process rank out of range, or nccl ranks as threads sharing a device with
// an NCCL that refuses that (before 2.30: "Duplicate GPU detected"); Error when device.devices < 1.
void launch_device_ranks(const LaunchSpec& spec, const RecordCodec& records, const DeviceRanks& device);

// NCCL's launch policy, applied the same way by every launch path (threads, mpirun,
// torchrun-style, a rank the caller names), before any NCCL call but the version query:
//   - NCCL_MULTI_RANK_GPU_ENABLE=1 is set whenever `nccl_version` allows ranks to share a GPU
//     (2.30 on), whatever this launch's shape: NCCL reads its parameters once per process, so a
//     sweep whose first point has a GPU per rank could not turn it on for a later point. A
//     user's own setting wins.
//   - `ranks_on_node` ranks on `devices` GPUs share GPUs when ranks_on_node > devices; an NCCL
//     that refuses that (before 2.30: "Duplicate GPU detected", and ranks left in a blocking
//     ncclCommInitRank) is an InputError naming `launch` (e.g. "--comm nccl --ranks 3").
// Returns whether ranks share GPUs.
bool apply_nccl_launch_policy(int ranks_on_node, int devices, const std::string& nccl_version,
                              const std::string& launch);

}  // namespace dpbench
