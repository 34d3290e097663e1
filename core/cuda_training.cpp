#include "core/cuda_training.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "core/cuda_local_ops.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/mpi_comm.hpp"
#include "core/nccl_comm.hpp"
#include "core/rendezvous.hpp"
#include "workloads/dataloader.hpp"

namespace dpbench {

cuda::Precision parse_precision(const std::string& name) {
  if (name == "fp32") return cuda::Precision::fp32;
  if (name == "tf32") return cuda::Precision::tf32;
  throw InputError(fmt::format("--precision {}: unknown (choose fp32 or tf32)", name));
}

void record_device_used_after(const CudaRank& rank, RankResult& result) {
  result.device.used_after = device_mem_info(rank.device).used_bytes();
}

namespace {

// How a rank gets its communicator: the local backend over device copies on a stream of the
// rank's own, or NCCL (which owns its stream).
struct CommSource {
  std::shared_ptr<LocalGroup> group;  // local
  const NcclUniqueIdBytes* id = nullptr;  // nccl
  // Called with the rank's communicator once it exists and with nullptr before it is destroyed
  // (so that a failing peer can abort it); may be empty.
  std::function<void(int rank, Communicator*)> on_live;
  // nccl ranks as threads: their group, for the teardown barrier and for aborting every rank's
  // communicator as soon as one rank fails.
  LocalGroup* nccl_threads = nullptr;
  int peer_devices = 1;  // local: the devices hosting the group's ranks (0..peer_devices-1)
};

// How many of `ranks` ranks (placed r % gpus) run on `device`.
int ranks_on_device(int ranks, int gpus, int device) { return (ranks - device + gpus - 1) / gpus; }

// Builds one rank's context on `device`, runs body, and fills result.device. Destruction runs
// in reverse: the rank's buffers (inside body) go before the communicator, streams and allocator.
void run_gpu_rank(const TrainConfig& config, int rank, int device, bool virtual_rank, RankResult& result,
                  const CommSource& source, const CudaRankBody& body) {
  cuda::set_device(device);
  const DeviceMemInfo before = device_mem_info(device);
  MemoryTracker tracker, host_tracker;
  DeviceAllocator allocator(device, tracker);
  cuda::Stream compute;
  std::optional<cuda::Stream> local_comm_stream;
  std::unique_ptr<Communicator> comm;
  void* comm_stream = nullptr;
  if (source.group) {
    local_comm_stream.emplace();
    comm_stream = local_comm_stream->handle();
    comm = std::make_unique<LocalCommunicator>(source.group, rank,
                                               make_cuda_mem_ops(device, allocator, comm_stream, source.peer_devices));
  } else {
    auto nccl = make_nccl_communicator(*source.id, config.world_size, rank, device, config.timeout);
    comm_stream = nccl->comm_stream_handle();
    comm = std::move(nccl);
  }
  struct Unregister {
    const CommSource& source;
    int rank;
    ~Unregister() {
      if (source.on_live) source.on_live(rank, nullptr);
    }
  } unregister{source, rank};
  if (source.on_live) source.on_live(rank, comm.get());

  try {
    cuda::Blas blas(compute.handle(), parse_precision(config.precision));
    CudaRank ctx;
    ctx.rank = rank;
    ctx.device = device;
    ctx.virtual_rank = virtual_rank;
    ctx.comm = comm.get();
    ctx.comm_stream = comm_stream;
    ctx.compute = &compute;
    ctx.blas = &blas;
    ctx.allocator = &allocator;
    ctx.tracker = &tracker;
    ctx.host_tracker = &host_tracker;
    result.device.device = device;
    result.device.virtual_rank = virtual_rank;
    result.device.used_before = before.used_bytes();
    result.device.total = before.total_bytes;
    body(ctx);
    // Nothing the rank enqueued may outlive its buffers.
    compute.synchronize();
    // nccl threads: ncclCommDestroy is intra-node collective; either every rank gets there, or
    // (a peer failed: the barrier throws Aborted) every rank aborts its communicator instead.
    if (source.nccl_threads != nullptr) source.nccl_threads->barrier(rank);
  } catch (const std::exception& e) {
    // nccl: abort this rank's communicator before its destructor runs. Otherwise that destructor
    // calls ncclCommDestroy, which waits for the peers, while the peers wait in a collective for
    // this rank: the failing rank would hang in its own cleanup until the peers time out, and
    // their timeouts would be reported instead of its error. Ranks as threads abort their peers'
    // communicators now too (through the group's hook), before this rank's buffers are freed:
    // freeing waits for the device, where a peer's kernel may be waiting for this rank. (A local
    // group is aborted by run_rank_threads once this rank has unwound.)
    const std::string reason = fmt::format("rank {}: {}", rank, e.what());
    if (!source.group) comm->abort(reason);
    if (source.nccl_threads != nullptr) source.nccl_threads->abort(reason);
    // Best effort: let the work already queued finish before its buffers go back to the system.
    try {
      compute.synchronize();
      if (local_comm_stream) local_comm_stream->synchronize();
    } catch (const std::exception&) {
      // the stream failed too (a sticky CUDA error): the original error is the one to report
    }
    throw;
  }
}

// Whether the linked NCCL lets two ranks of one communicator share a GPU: NCCL before 2.30
// refuses it ("Duplicate GPU detected"). True when the version is unknown (no NCCL: creating the
// communicator says so).
bool nccl_allows_shared_gpu() {
  int major = 0, minor = 0;
  if (std::sscanf(nccl_version().c_str(), "%d.%d", &major, &minor) != 2) return true;
  return major > 2 || (major == 2 && minor >= 30);
}

// One rank of a torchrun-style launch: the ncclUniqueId comes through the rendezvous at
// MASTER_ADDR:MASTER_PORT, the GPU from the node-local rank, and every rank's record goes to
// rank 0 the same way. A failing rank tells the others through the rendezvous before it rethrows
// (with its rank prepended, InputError staying InputError); peers inside NCCL learn of it from
// NCCL's own error or their timeout.
void run_env_process(const TrainConfig& config, std::vector<RankResult>& ranks, int gpus,
                     const CudaRankBody& body) {
  const int p = config.world_size;
  const int rank = config.process_rank;
  Rendezvous& rendezvous = process_rendezvous(config.master_addr, config.master_port, p, rank, config.timeout);
  // Every process runs the same sequence of runs (one per mode), so the n-th run has one tag.
  static int runs = 0;
  const std::string tag = fmt::format("run {}", ++runs);
  const int local_rank = config.local_rank >= 0 ? config.local_rank : rank;
  const int node_ranks = config.ranks_on_this_node > 0 ? config.ranks_on_this_node : p;
  auto with_rank = [rank](const std::string& what) {
    const std::string prefix = fmt::format("rank {}:", rank);
    return what.rfind(prefix, 0) == 0 ? what : fmt::format("rank {}: {}", rank, what);
  };
  try {
    NcclUniqueIdBytes id{};
    if (rank == 0) id = nccl_create_unique_id();
    const std::string shared = rendezvous.broadcast(tag, std::string(id.data(), id.size()));
    if (shared.size() != id.size()) {
      throw Error(fmt::format("rendezvous: rank 0 sent {} bytes for the ncclUniqueId, not {}", shared.size(),
                              id.size()));
    }
    std::memcpy(id.data(), shared.data(), id.size());
    CommSource source;
    source.id = &id;
    run_gpu_rank(config, rank, local_rank % gpus, ranks_on_device(node_ranks, gpus, local_rank % gpus) > 1,
                 ranks[static_cast<std::size_t>(rank)], source, body);
  } catch (const InputError& e) {
    rendezvous.fail(with_rank(e.what()));
    throw InputError(with_rank(e.what()));
  } catch (const std::exception& e) {
    const std::string mine = with_rank(e.what());
    rendezvous.fail(mine);
    // Rank 0 is usually failing because another rank did: name that one first.
    if (auto first = rendezvous.peer_failure(std::chrono::seconds(1))) {
      throw Error(fmt::format("{} (and then {})", *first, mine));
    }
    throw Error(mine);
  }
  const auto all = rendezvous.gather(tag, rank_to_json(ranks[static_cast<std::size_t>(rank)]).dump());
  for (std::size_t r = 0; r < all.size(); ++r) ranks[r] = rank_from_json(nlohmann::json::parse(all[r]));
}

}  // namespace

void run_cuda_ranks(const TrainConfig& config, std::vector<RankResult>& ranks, const CudaRankBody& body) {
  if (config.comm != "local" && config.comm != "nccl") {
    throw InputError(fmt::format("--comm {}: moves host buffers; GPU training runs on --comm local or nccl",
                                 config.comm));
  }
  const int gpus = cuda::device_count();
  if (gpus < 1) throw Error("no CUDA device: cudaGetDeviceCount found none");
  const int p = config.world_size;

  if (config.comm == "nccl" && config.process_rank >= 0) {
    // One rank of a job whose processes the caller started and gave the id: run it, and leave
    // only its own record (the caller gathers the others if it needs them).
    const int rank = config.process_rank;
    if (rank >= p) {
      throw InputError(fmt::format("rank {}: out of range for a world size of {}", rank, p));
    }
    if (!config.master_addr.empty()) return run_env_process(config, ranks, gpus, body);
    CommSource source;
    source.id = &config.nccl_id;
    run_gpu_rank(config, rank, rank % gpus, ranks_on_device(p, gpus, rank % gpus) > 1,
                 ranks[static_cast<std::size_t>(rank)], source, body);
    return;
  }

  if (config.comm == "nccl" && mpi_launched()) {
    // One rank per process: the GPU comes from the node-local rank. Rank 0 creates the id inside
    // run_mpi_process, so that a failure there ends the job with MPI_Abort rather than leaving
    // the other ranks in MPI_Bcast.
    MpiRuntime::init();
    const int local_rank = MpiRuntime::local_rank();
    const bool shared = ranks_on_device(MpiRuntime::local_size(), gpus, local_rank % gpus) > 1;
    run_mpi_process(config, ranks, [&](int rank) {
      NcclUniqueIdBytes id{};
      if (rank == 0) id = nccl_create_unique_id();
      mpi_broadcast_bytes(id.data(), id.size(), 0);
      CommSource source;
      source.id = &id;
      run_gpu_rank(config, rank, local_rank % gpus, shared, ranks[static_cast<std::size_t>(rank)], source, body);
    });
    return;
  }

  if (config.comm == "nccl" && p > gpus && !nccl_allows_shared_gpu()) {
    // Refused up front: inside ncclCommInitRank only the ranks that share a GPU fail, and the
    // others may be left waiting for them there (where no abort reaches).
    throw InputError(fmt::format("--comm nccl --ranks {}: {} GPU(s) here, and NCCL {} refuses two ranks of one "
                                 "communicator on one GPU (NCCL 2.30 allows it); use --comm local for "
                                 "ranks sharing a GPU",
                                 p, gpus, nccl_version()));
  }
  if (config.comm == "nccl" && p > gpus) {
    // NCCL >= 2.30 lets ranks of one communicator share a GPU when asked to; it reads this when
    // the communicators are created (a user's own setting wins).
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 0);
  }
  auto group = std::make_shared<LocalGroup>(p, config.timeout);
  NcclUniqueIdBytes id{};
  CommSource source;
  if (config.comm == "nccl") {
    id = nccl_create_unique_id();
    source.id = &id;
    source.nccl_threads = group.get();
  } else {
    source.group = group;
    source.peer_devices = std::min(p, gpus);
  }
  // NCCL communicators live outside the group: the group's abort reaches them through the hook.
  std::mutex live_mutex;
  std::vector<Communicator*> live(static_cast<std::size_t>(p), nullptr);
  if (config.comm == "nccl") {
    source.on_live = [&](int rank, Communicator* comm) {
      std::lock_guard<std::mutex> lock(live_mutex);
      live[static_cast<std::size_t>(rank)] = comm;
      // A peer that failed before this rank registered has run the hook already (the group is
      // marked aborted before the hook runs): abort this communicator here instead.
      if (comm != nullptr && group->aborted()) comm->abort(group->abort_reason());
    };
    group->set_abort_hook([&](const std::string& reason) {
      std::lock_guard<std::mutex> lock(live_mutex);
      for (Communicator* c : live) {
        if (c != nullptr) c->abort(reason);
      }
    });
  }
  run_rank_threads(*group, [&](int rank) {
    run_gpu_rank(config, rank, rank % gpus, ranks_on_device(p, gpus, rank % gpus) > 1,
                 ranks[static_cast<std::size_t>(rank)], source, body);
  });
}

}  // namespace dpbench

namespace dpbench {

DeviceBatch::DeviceBatch(const CudaRank& rank, std::size_t max_rows, std::size_t features, bool pin_memory)
    : features_(features),
      pin_memory_(pin_memory),
      inputs_(*rank.allocator, MemoryCategory::data_staging, max_rows * features),
      labels_(*rank.allocator, MemoryCategory::data_staging, max_rows) {
  if (pin_memory_) {
    pinned_inputs_ = cuda::PinnedBuffer<float>(*rank.host_tracker, MemoryCategory::data_staging, max_rows * features);
    pinned_labels_ = cuda::PinnedBuffer<std::int32_t>(*rank.host_tracker, MemoryCategory::data_staging, max_rows);
  }
}

void DeviceBatch::upload(const Batch& batch, std::size_t rows, void* stream) {
  if (rows > labels_.size() || rows > batch.size) {
    throw Error(fmt::format("device batch: {} rows do not fit (staging {}, batch {})", rows, labels_.size(),
                            batch.size));
  }
  if (rows == 0) return;
  const float* x = batch.inputs.data();
  const std::int32_t* y = batch.labels.data();
  if (pin_memory_) {
    std::memcpy(pinned_inputs_.data(), x, rows * features_ * sizeof(float));
    std::memcpy(pinned_labels_.data(), y, rows * sizeof(std::int32_t));
    x = pinned_inputs_.data();
    y = pinned_labels_.data();
  }
  cuda::memcpy_async(inputs_.data(), x, rows * features_ * sizeof(float), stream);
  cuda::memcpy_async(labels_.data(), y, rows * sizeof(std::int32_t), stream);
}

std::vector<double> epoch_loss_sums(const DeviceBuffer<float>& step_loss, long steps, long steps_per_epoch,
                                    int epochs) {
  std::vector<float> host(step_loss.size());
  step_loss.copy_to_host(host.data(), host.size());
  std::vector<double> sums(static_cast<std::size_t>(epochs), 0.0);
  for (long s = 0; s < steps && s < static_cast<long>(host.size()); ++s) {
    sums[static_cast<std::size_t>(s / steps_per_epoch)] += host[static_cast<std::size_t>(s)];
  }
  return sums;
}

}  // namespace dpbench
