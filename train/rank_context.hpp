// One rank's view of its device, as a synchronisation strategy sees it: the communicator, an
// allocator that charges memory categories, the model, element-wise ops, a step timer, events
// for ordering the communication after the compute, and batch staging. The step loop and the
// modes (train/step_loop.hpp; ps/, allreduce/, sharded_ps/) are written once against it; a
// device supplies an implementation and a launcher that builds one context per rank
// (train/cpu_context.cpp here; the CUDA target registers its own at start-up, as PyTorch's
// Reducer picks a Timer per device type in reducer_cuda.cpp). Not for: kernels, streams or NCCL
// calls themselves (they stay behind it).
//
// The stream model every device follows. A rank has a compute stream and a communication
// stream. Compute work (model, ops, staging) is ordered on the compute stream; the calls only
// enqueue it, so the host must not read device results before synchronize(). Blocking
// communicator calls (reduce, broadcast, scatterv, ...) read and write buffers from the host's
// point of view: a strategy calls synchronize() before one that reads what the compute stream
// wrote, and after one returns its results are in place for later compute work. The gradient
// bucket sync (train/grad_bucket_sync.hpp) is the one overlapped path: a bucket's reduction starts
// when an event recorded after its gradients is reached, and the compute stream waits for every
// reduction before the optimizer. On the CPU the compute stream is the rank's own thread
// (work completes when the call returns), the communication stream is a thread with an
// in-order queue (core/comm_stream.hpp) or the backend's nonblocking requests (MPI), and events
// are flags with waiters: the same ordering, exercised by the CPU tests and ThreadSanitizer.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/comm.hpp"
#include "core/memory.hpp"
#include "train/training.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/model.hpp"

namespace dpbench {

struct Batch;

// Times one step on the rank's compute stream (wall clock on the CPU, CUDA events on GPUs).
// begin() starts a step; lap(&PhaseTimes::x) adds the time since the previous lap (or begin) to
// phase x and returns its mark; note() marks a moment without closing a phase (e.g. the first
// gradient bucket being ready). end() waits for every mark and returns the phases and the step
// time (begin to the last lap); seconds(a, b) is then the time between two marks of the step.
class StepTimer {
 public:
  using Mark = std::size_t;
  virtual ~StepTimer() = default;

  void begin();
  Mark lap(double PhaseTimes::*phase);
  Mark note();
  StepRecord end();
  double seconds(Mark from, Mark to) const { return elapsed(from, to); }

 protected:
  // Records mark m (marks are numbered 0, 1, ... within a step) at the compute stream's
  // current point; storage grows as needed.
  virtual void record(Mark m) = 0;
  // Blocks until mark m has been reached.
  virtual void wait(Mark m) = 0;
  // Seconds from mark a to mark b, both reached.
  virtual double elapsed(Mark a, Mark b) const = 0;

 private:
  Mark next_ = 0;
  std::vector<std::pair<double PhaseTimes::*, Mark>> laps_;
};

// An ordering point on the compute stream (cudaEvent on GPUs, a flag on the CPU).
class Event {
 public:
  virtual ~Event() = default;
  // Marks the compute stream's current point: the event is reached when the work enqueued on
  // the compute stream so far has finished.
  virtual void record() = 0;
  // Blocks the calling thread (any thread) until the last record() has been reached.
  virtual void host_wait() = 0;
};

// A batch's inputs [rows, features] and int32 labels [rows] where the rank's compute reads them.
struct StagedBatch {
  const float* inputs = nullptr;
  const std::int32_t* labels = nullptr;
};

// Moves loader batches to the device: nothing on the CPU (the loader's buffers are used in
// place); on GPUs a host-to-device copy on the compute stream, through page-locked buffers with
// pin_memory. A staging that prefetches (GPUs with pin_memory) also copies the next step's batch
// on a stream of its own while the current step computes (the CUDA prefetcher of NVIDIA's
// ImageNet example, apex's data_prefetcher): prefetch() starts the copy, take_prefetched()
// hands it to the next step, and the step loop calls them within an epoch only.
class BatchStaging {
 public:
  virtual ~BatchStaging() = default;
  // The first `rows` samples of `batch` (rows <= the staging's max_rows), valid until the next
  // stage() or take_prefetched() call and until `batch` is reused. The copy is enqueued on the
  // compute stream.
  virtual StagedBatch stage(const Batch& batch, std::size_t rows) = 0;
  // Whether prefetch() overlaps the next batch's copy with the current step.
  virtual bool prefetches() const { return false; }
  // Starts copying the first `rows` samples of `batch` for the next step, into buffers the current
  // step does not read; `batch` may be reused once it returns. Throws Error as stage() does, and
  // Error("... does not prefetch") unless prefetches().
  virtual void prefetch(const Batch& batch, std::size_t rows);
  // The batch the last prefetch() copied; the compute stream's later work waits for its copy.
  // Valid as stage()'s result. Throws Error if no prefetch() is pending.
  virtual StagedBatch take_prefetched();

 protected:
  // Throws Error("device batch: R rows do not fit (staging S, batch B)") unless rows fit both
  // the staging's max_rows and the batch.
  static void check_rows(const Batch& batch, std::size_t rows, std::size_t max_rows);
};

// The host half of pin_memory staging (DataLoader pin_memory=True): page-locked copies of a
// batch's first rows, from which a device's host-to-device copy can be asynchronous. Both
// buffers are charged to data_staging on `host_tracker`; `pinned` is the page-locked memory
// (e.g. cuda::pinned_memory()). Without pinned memory stage() returns the loader's buffers.
class PinnedBatch {
 public:
  PinnedBatch(MemoryTracker& host_tracker, const HostMemory* pinned, std::size_t max_rows, std::size_t features);
  // inputs [rows, features] and labels [rows] to copy from; rows <= max_rows (unchecked).
  StagedBatch stage(const Batch& batch, std::size_t rows);

 private:
  std::size_t features_;
  bool pinned_;
  TrackedBuffer<float> inputs_;
  TrackedBuffer<std::int32_t> labels_;
};

class RankContext;

// An owning, zero-initialised array of `count` T in the rank's device memory, charged to one
// memory category of the rank's tracker while it lives (host memory on the CPU, a caching
// allocator block on GPUs). Move-only; the context must outlive it.
template <typename T>
class Array {
 public:
  Array() = default;
  Array(RankContext& ctx, MemoryCategory category, std::size_t count);

  T* data() { return memory_.get(); }
  const T* data() const { return memory_.get(); }
  std::size_t size() const { return count_; }

 private:
  struct Release {
    RankContext* ctx = nullptr;
    MemoryCategory category = MemoryCategory::parameters;
    std::size_t bytes = 0;
    void operator()(T* ptr) const noexcept;
  };
  std::unique_ptr<T, Release> memory_;
  std::size_t count_ = 0;
};

// One rank's context. Every pointer the ops take is rank-device memory (from Array or the
// model) unless its name says host. Errors throw Error (InputError for bad configuration).
class RankContext {
 public:
  RankContext(int rank, Communicator& comm, MemoryTracker& tracker, MemoryTracker& host_tracker)
      : rank_(rank), comm_(comm), tracker_(tracker), host_tracker_(host_tracker) {}
  virtual ~RankContext() = default;
  RankContext(const RankContext&) = delete;
  RankContext& operator=(const RankContext&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return comm_.world_size(); }
  // Collectives on rank-device pointers.
  Communicator& comm() { return comm_; }
  // Rank-device memory by category: what the result reports as the rank's memory.
  MemoryTracker& tracker() { return tracker_; }
  // Host memory of the data pipeline (the loader's batches, page-locked staging); the same
  // tracker as tracker() on the CPU.
  MemoryTracker& host_tracker() { return host_tracker_; }
  // Where timing begins: notes the time (for RankResult::timed_wall_s) and, on an emulated
  // cluster's node, its link's counters (core/net_interface.hpp, for RankResult::wire_per_step).
  void mark_timed_start();
  const std::optional<CommStats>& wire_start() const { return wire_start_; }
  std::chrono::steady_clock::time_point timed_start_time() const { return timed_start_time_; }
  // A pause between steps that the timed figures leave out (a --test-freq evaluation):
  // pause_timing() notes the time and the link's counters; resume_timing(pause) moves the timed
  // start later by the pause's seconds and link bytes (so timed_wall_s and wire_per_step leave
  // it out) and returns its duration.
  struct TimingPause {
    std::chrono::steady_clock::time_point start;
    std::optional<CommStats> wire;
  };
  TimingPause pause_timing() const;
  std::chrono::steady_clock::duration resume_timing(const TimingPause& pause);

  // ---- memory (used through Array<T>)
  // `bytes` of zeroed memory charged to `category`; the zeros are in place on return.
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  // Returns a block from allocate() with the same bytes and category. Never throws.
  virtual void release(void* ptr, std::size_t bytes, MemoryCategory category) noexcept = 0;

  // ---- model
  // config.model.workload for samples of `shape`, with activations for max_batch samples charged to
  // tracker() as activations. Throws InputError as make_model().
  virtual std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape,
                                            std::size_t num_classes, std::size_t max_batch) = 0;

  // ---- element-wise ops, enqueued on the compute stream
  // SGD with momentum and weight decay, PyTorch torch.optim.SGD semantics, over n elements.
  virtual void sgd_momentum(float* params, const float* grads, float* velocity, std::size_t n, float lr, float momentum,
                            float weight_decay) = 0;
  // Adam / AdamW with one step's scalars (cpu::adam_scalars), torch.optim.Adam / AdamW semantics.
  virtual void adam(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
                    const cpu::AdamScalars& scalars) = 0;
  virtual void add_inplace(float* dst, const float* src, std::size_t n) = 0;  // dst += src
  virtual void copy(float* dst, const float* src, std::size_t n) = 0;
  virtual void fill_zero(float* dst, std::size_t n) = 0;
  // Softmax cross-entropy of logits [rows, classes] against labels [rows]: writes
  // dlogits = scale * d(sum of losses)/d(logits) and records the sum of the rows' losses as
  // step `step`'s loss (added to what the step already has).
  virtual void cross_entropy(const float* logits, const std::int32_t* labels, std::size_t rows, std::size_t classes,
                             float* dlogits, float scale, long step) = 0;
  // The recorded loss of steps 0..steps-1, in double on the host (waits for the compute stream).
  virtual std::vector<double> step_losses(long steps) = 0;
  // What step_losses returns from per-step sums on the host: [steps], 0 for steps not recorded.
  template <typename T>
  static std::vector<double> first_steps(const std::vector<T>& per_step, long steps) {
    std::vector<double> out(static_cast<std::size_t>(steps), 0.0);
    for (std::size_t s = 0; s < out.size() && s < per_step.size(); ++s) out[s] = static_cast<double>(per_step[s]);
    return out;
  }

  // ---- host transfers (synchronous: complete on return)
  virtual void upload(float* dst, const float* host_src, std::size_t n) = 0;
  virtual void download(float* host_dst, const float* src, std::size_t n) = 0;
  // Blocks until the compute stream's work has finished.
  virtual void synchronize() = 0;

  // ---- staging, timing, ordering
  virtual std::unique_ptr<BatchStaging> make_staging(std::size_t max_rows, std::size_t features, bool pin_memory) = 0;
  virtual std::unique_ptr<StepTimer> make_step_timer() = 0;
  virtual std::unique_ptr<Event> make_event() = 0;
  // Makes the communicator's own stream wait for `ready` before the nonblocking operations
  // started after this call (comm().supports_async() backends: NCCL's stream; nothing on the
  // CPU, whose compute has finished when an event is recorded).
  virtual void comm_stream_wait(Event& ready) = 0;
  // Makes the compute stream wait for every nonblocking operation started on the communicator
  // (MPI: completes them; NCCL: the compute stream waits for its stream, the host does not).
  virtual void compute_wait_comm() = 0;
  // Called first on a communication thread the rank starts (GPUs: binds the rank's device).
  virtual void bind_thread() {}
  // Called by a strategy once the rank has allocated what it trains with, right before its first
  // collective. GPU ranks sharing a device wait there for each other (NCCL: no allocation may
  // wait behind a peer's spinning kernel); nothing to do elsewhere.
  virtual void before_first_collective() {}

  // Called once at the end of training with the rank's buffers still held: device-specific
  // parts of the rank's record (a GPU's cudaMemGetInfo view).
  virtual void record_device_view(RankResult&) {}

 private:
  int rank_;
  Communicator& comm_;
  MemoryTracker& tracker_;
  MemoryTracker& host_tracker_;
  std::optional<CommStats> wire_start_;
  std::chrono::steady_clock::time_point timed_start_time_ = std::chrono::steady_clock::now();
};

template <typename T>
Array<T>::Array(RankContext& ctx, MemoryCategory category, std::size_t count)
    : memory_(count > 0 ? static_cast<T*>(ctx.allocate(count * sizeof(T), category)) : nullptr,
              Release{&ctx, category, count * sizeof(T)}),
      count_(count) {}

template <typename T>
void Array<T>::Release::operator()(T* ptr) const noexcept {
  ctx->release(ptr, bytes, category);
}

// Per-epoch sums of per-step losses: step s belongs to epoch s / steps_per_epoch; [epochs].
std::vector<double> epoch_loss_sums(const std::vector<double>& step_losses, long steps_per_epoch, int epochs);

// After a rank's timed steps: its device's view of memory, and finish_rank with the bytes its
// communicator moved since `timed_start` (the stats when timing began) over its timed steps.
void finish_timed_rank(RankContext& ctx, RankResult& me, const CommStats& timed_start);

// Rank 0's last act in every strategy: copies `params` [model.num_params()] and the model's
// buffers to the host, records the mean loss of every step's global batch from
// `step_loss_sums` (per step, summed over the global batch's samples, all ranks) and calls
// finish_result() with the per-epoch sums of those (`spe` steps per epoch).
void finish_result_on_rank(RankContext& ctx, RunResult& result, const TrainData& data, Model& model,
                           const float* params, const std::vector<double>& step_loss_sums, long spe,
                           const std::vector<long>& steps_in_epoch);

// evaluate_test of `model`'s rank-device `params` (model.num_params() floats) and buffers, after
// the work enqueued so far (copied to the host first).
TestMetrics evaluate_on_rank(RankContext& ctx, const TrainConfig& config, const Dataset& test, Model& model,
                             const float* params);

using RankContextBody = std::function<void(RankContext& ctx)>;

// Runs body(ctx) for every rank of the run on config.device and leaves each rank's record in
// ranks[rank] on the output process, with run_ranks' failure handling (the first failing rank's
// error, with its rank; the others aborted). Throws InputError for a device this build has no
// launcher for.
void run_rank_contexts(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body);

// A device's launcher: builds one context per rank of config and runs body on each, as
// run_rank_contexts describes. The CPU is built in; the CUDA target registers cuda at start-up
// (cuda/register.hpp).
using RankLauncher = void (*)(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body);
void register_rank_launcher(DeviceKind device, RankLauncher launcher);

}  // namespace dpbench
