// What the GPU trainers share: the per-rank GPU context (device, allocator, streams, cuBLAS
// handle, communicator) and the launcher that builds it for every rank, and the CUDA-event
// timeline of one step. Placement: rank r (local rank r under mpirun) runs on GPU
// r % device_count; when a node has more ranks than GPUs, ranks share a GPU ("virtual ranks",
// for correctness runs; their timings contend for one device), which the result flags.
// Backends: "local" (threads; collectives over device copies, core/cuda_local_ops.hpp) and
// "nccl" (threads with one communicator each, or one rank per process: under mpirun rank 0
// creates the ncclUniqueId and MPI broadcasts it; in a torchrun-style launch it goes through the
// rendezvous at MASTER_ADDR:MASTER_PORT, core/rendezvous.hpp).
#pragma once

#include <array>
#include <functional>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/cuda_runtime.hpp"
#include "core/device_memory.hpp"
#include "core/memory.hpp"
#include "core/training.hpp"
#include "workloads/cuda_kernels.hpp"

namespace dpbench {

// One GPU rank's resources, valid for the duration of the rank's body. Every pointer is set.
struct CudaRank {
  int rank = 0;
  int device = 0;
  bool virtual_rank = false;
  Communicator* comm = nullptr;   // collectives on device pointers of `device`
  void* comm_stream = nullptr;    // the cudaStream_t the communicator's collectives run on
  cuda::Stream* compute = nullptr;  // the rank's compute stream
  cuda::Blas* blas = nullptr;       // bound to compute, with the run's precision
  DeviceAllocator* allocator = nullptr;  // charges `tracker`
  MemoryTracker* tracker = nullptr;      // device memory by category: what the result reports
  MemoryTracker* host_tracker = nullptr;  // host staging (loader batches, pinned buffers)
};

using CudaRankBody = std::function<void(CudaRank& rank)>;

// "fp32" / "tf32" -> cuda::Precision; InputError naming --precision otherwise.
cuda::Precision parse_precision(const std::string& name);

// Runs body on every GPU rank of the run (config.comm "local" or "nccl"; threads, or this
// process's rank under mpirun, in a torchrun-style launch (config.master_addr set; records
// gathered through the rendezvous) or as config.process_rank with config.nccl_id) and leaves
// each rank's record in ranks[rank] on the output process, with RankResult::device filled (the cudaMemGetInfo view before the body and
// the one the body recorded with record_device_used_after()). Failures as run_ranks: the first
// failing rank's error, rethrown with its rank; the other ranks' communicators are aborted.
// Throws InputError for a backend GPU training cannot use (mpi), or for nccl ranks as threads
// sharing a GPU with an NCCL that refuses that (before 2.30), and Error when no GPU is usable.
void run_cuda_ranks(const TrainConfig& config, std::vector<RankResult>& ranks, const CudaRankBody& body);

// Call at the end of training, with the rank's buffers still allocated: the device's view of
// the memory in use then (cudaMemGetInfo), into result.device.used_after.
void record_device_used_after(const CudaRank& rank, RankResult& result);

// CUDA events marking the phases of one step on the compute stream, recorded in this order:
// start, h2d (inputs on the device), forward (loss included), backward, comm_join (the compute
// stream has waited for the gradients' communication), optimizer.
class StepTimeline {
 public:
  enum Mark { start, h2d, forward, backward, comm_join, optimizer, kMarks };
  void mark(Mark m, void* stream) { events_[m].record(stream); }
  // Blocks until the last mark (optimizer) has been reached.
  void synchronize() const { events_[optimizer].synchronize(); }
  // Seconds between two marks (both reached).
  double seconds(Mark from, Mark to) const {
    return static_cast<double>(cuda::Event::elapsed_ms(events_[from], events_[to])) / 1e3;
  }

 private:
  std::array<cuda::Event, kMarks> events_;
};

}  // namespace dpbench

namespace dpbench {

struct Batch;

// A batch's inputs [rows, features] and int32 labels [rows] on the rank's device. With
// pin_memory, the loader's batch is first copied into page-locked staging buffers, so that the
// host-to-device copy is asynchronous (DataLoader's pin_memory=True); without, it is copied
// from the loader's pageable memory (cudaMemcpyAsync then blocks the host for the copy).
// Device buffers are charged to data_staging on the rank's tracker, pinned ones to its
// host_tracker.
class DeviceBatch {
 public:
  DeviceBatch(const CudaRank& rank, std::size_t max_rows, std::size_t features, bool pin_memory);
  // Enqueues the copy of the batch's first `rows` samples (rows <= max_rows) on `stream`. The
  // staging buffers are reused: the previous upload must have completed.
  void upload(const Batch& batch, std::size_t rows, void* stream);
  float* inputs() { return inputs_.data(); }
  std::int32_t* labels() { return labels_.data(); }

 private:
  std::size_t features_;
  bool pin_memory_;
  DeviceBuffer<float> inputs_;
  DeviceBuffer<std::int32_t> labels_;
  cuda::PinnedBuffer<float> pinned_inputs_;
  cuda::PinnedBuffer<std::int32_t> pinned_labels_;
};

// Per-epoch training-loss sums from per-step loss sums held on the device ([total_steps]
// floats, step s of epoch e at s), in double on the host; steps_per_epoch as in the CPU modes.
std::vector<double> epoch_loss_sums(const DeviceBuffer<float>& step_loss, long steps, long steps_per_epoch,
                                    int epochs);

}  // namespace dpbench
