// The CUDA device behind RankContext (train/rank_context.hpp) and its launcher. One rank's
// context holds its device, caching allocator, compute stream, cuBLAS handle and communicator;
// ops and staging are enqueued on the compute stream, step timing uses CUDA events on it, and
// the gradient bucket sync's ordering is events between the compute stream and the communicator's
// stream. Which ranks run where, and how the ncclUniqueId reaches them, is
// launch/device_launch.hpp's (device-independent, CPU-tested); this file builds one rank: its
// communicator ("local" over device copies, cuda/cuda_local_ops.hpp, or NCCL), streams,
// allocator, cuBLAS handle and context. Ranks sharing a GPU are flagged virtual in the result.
#include "cuda/register.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "core/local_comm.hpp"
#include "cuda/cuda_kernels.hpp"
#include "cuda/cuda_local_ops.hpp"
#include "cuda/cuda_model_ops.hpp"
#include "cuda/cuda_runtime.hpp"
#include "cuda/device_memory.hpp"
#include "cuda/nccl_comm.hpp"
#include "launch/device_launch.hpp"
#include "train/failure_guard.hpp"
#include "train/models.hpp"
#include "train/rank_context.hpp"
#include "workloads/dataloader.hpp"

namespace dpbench {

namespace {

class CudaEvent final : public Event {
 public:
  explicit CudaEvent(void* stream) : stream_(stream) {}
  void record() override { event_.record(stream_); }
  void host_wait() override { event_.synchronize(); }
  const cuda::Event& event() const { return event_; }

 private:
  void* stream_;
  cuda::Event event_{cuda::Event::Timing::off};  // ordering only
};

// Marks are events on the compute stream, created as a step first needs them and reused.
class CudaStepTimer final : public StepTimer {
 public:
  explicit CudaStepTimer(void* stream) : stream_(stream) {}

 protected:
  void record(Mark m) override {
    while (events_.size() <= m) events_.emplace_back();
    events_[m].record(stream_);
  }
  void wait(Mark m) override { events_.at(m).synchronize(); }
  double elapsed(Mark a, Mark b) const override {
    return static_cast<double>(cuda::Event::elapsed_ms(events_.at(a), events_.at(b))) / 1e3;
  }

 private:
  void* stream_;
  std::deque<cuda::Event> events_;  // deque: events stay put as it grows
};

// A batch's inputs and labels on the device. With pin_memory, the loader's batch is first copied
// into page-locked staging buffers, so that the host-to-device copy is asynchronous (DataLoader's
// pin_memory=True); without, it is copied from the loader's pageable memory (cudaMemcpyAsync then
// blocks the host for the copy). Device buffers are charged to data_staging on the rank's
// tracker, pinned ones to its host tracker.
//
// With pin_memory the staging holds two slots (pinned and device buffers each) and a copy stream:
// prefetch() copies the next batch into the slot the current step does not read, on the copy
// stream, after the compute stream has released that slot (an event recorded when the step
// before took its batch); take_prefetched() makes the compute stream wait for the copy. stage()
// copies on the compute stream into the other slot. Without pin_memory: one slot, no prefetch.
class CudaStaging final : public BatchStaging {
 public:
  CudaStaging(DeviceAllocator& allocator, MemoryTracker& host_tracker, void* stream, std::size_t max_rows,
              std::size_t features, bool pin_memory, FailureGuard& guard)
      : guard_(guard), stream_(stream), features_(features), max_rows_(max_rows) {
    for (int i = 0; i < (pin_memory ? 2 : 1); ++i) {
      slots_.emplace_back(allocator, host_tracker, pin_memory ? &cuda::pinned_memory() : nullptr, max_rows, features);
    }
    if (pin_memory) copy_stream_.emplace();
  }

  StagedBatch stage(const Batch& batch, std::size_t rows) override {
    check_rows(batch, rows, max_rows_);
    if (pending_) slots_[other()].copied.wait_on(stream_);  // a prefetch not taken: let it land first
    pending_ = false;
    Slot& slot = switch_to(other());
    copy(slot, batch, rows, stream_);
    return slot.staged();
  }
  bool prefetches() const override { return copy_stream_.has_value(); }
  void prefetch(const Batch& batch, std::size_t rows) override {
    if (!prefetches()) BatchStaging::prefetch(batch, rows);
    check_rows(batch, rows, max_rows_);
    Slot& slot = slots_[other()];
    slot.copied.synchronize();  // its pinned buffers are no longer being read (long since, in practice)
    slot.released.wait_on(copy_stream_->handle());
    copy(slot, batch, rows, copy_stream_->handle());
    slot.copied.record(copy_stream_->handle());
    pending_ = true;
  }
  StagedBatch take_prefetched() override {
    if (!pending_) return BatchStaging::take_prefetched();
    pending_ = false;
    Slot& slot = switch_to(other());
    slot.copied.wait_on(stream_);
    return slot.staged();
  }
  // Freeing page-locked memory synchronises the device: a failing rank aborts its communicators first.
  ~CudaStaging() override { guard_.before_sync_destroy(); }

 private:
  struct Slot {
    Slot(DeviceAllocator& allocator, MemoryTracker& host_tracker, const HostMemory* pinned, std::size_t max_rows,
         std::size_t features)
        : pinned(host_tracker, pinned, max_rows, features),
          inputs(allocator, MemoryCategory::data_staging, max_rows * features),
          labels(allocator, MemoryCategory::data_staging, max_rows) {}
    StagedBatch staged() const { return {inputs.data(), labels.data()}; }
    PinnedBatch pinned;
    DeviceBuffer<float> inputs;
    DeviceBuffer<std::int32_t> labels;
    cuda::Event copied{cuda::Event::Timing::off};    // the last copy into `inputs`, `labels`
    cuda::Event released{cuda::Event::Timing::off};  // the compute stream's last read of them
  };

  std::size_t other() const { return slots_.size() == 1 ? 0 : 1 - current_; }
  // Slot i becomes the one the compute stream reads; the one it read before is released.
  Slot& switch_to(std::size_t i) {
    if (i != current_) slots_[current_].released.record(stream_);
    current_ = i;
    return slots_[i];
  }
  void copy(Slot& slot, const Batch& batch, std::size_t rows, void* stream) {
    const StagedBatch host = slot.pinned.stage(batch, rows);
    if (rows == 0) return;
    cuda::memcpy_async(slot.inputs.data(), host.inputs, rows * features_ * sizeof(float), stream);
    cuda::memcpy_async(slot.labels.data(), host.labels, rows * sizeof(std::int32_t), stream);
  }

  FailureGuard& guard_;
  void* stream_;
  std::size_t features_, max_rows_;
  std::deque<Slot> slots_;  // deque: slots hold events and buffers that stay put
  std::optional<cuda::Stream> copy_stream_;
  std::size_t current_ = 0;
  bool pending_ = false;
};

// One GPU rank's context. Every pointer is valid for the duration of the rank's body.
class CudaRankContext final : public RankContext {
 public:
  CudaRankContext(int rank, int device, Communicator& comm, void* comm_stream, cuda::Stream& compute, cuda::Blas& blas,
                  DeviceAllocator& allocator, MemoryTracker& host_tracker, FailureGuard& guard,
                  std::function<void()> shared_gpu_barrier)
      : RankContext(rank, comm, allocator.tracker(), host_tracker),
        guard_(guard),
        shared_gpu_barrier_(std::move(shared_gpu_barrier)),
        device_(device),
        comm_stream_(comm_stream),
        compute_(compute),
        blas_(blas),
        allocator_(allocator) {}

  void* allocate(std::size_t bytes, MemoryCategory category) override {
    return allocator_.allocate_zeroed(bytes, category, nullptr, false);
  }
  void release(void* ptr, std::size_t, MemoryCategory) noexcept override { allocator_.release(ptr); }

  std::unique_ptr<Model> make_model(const TrainConfig& config, const SampleShape& shape, std::size_t num_classes,
                                    std::size_t max_batch) override {
    auto model = dpbench::make_model(config, shape, num_classes);
    model->reserve(max_batch, make_cuda_model_ops(blas_, allocator_));
    return model;
  }

  void sgd_momentum(float* params, const float* grads, float* velocity, std::size_t n, float lr, float momentum,
                    float weight_decay) override {
    cuda::sgd_momentum(params, grads, velocity, n, lr, momentum, weight_decay, stream());
  }
  void adam(float* params, const float* grads, float* exp_avg, float* exp_avg_sq, std::size_t n,
            const cpu::AdamScalars& scalars) override {
    cuda::adam(params, grads, exp_avg, exp_avg_sq, n, scalars, stream());
  }
  void add_inplace(float* dst, const float* src, std::size_t n) override { cuda::add_inplace(dst, src, n, stream()); }
  void copy(float* dst, const float* src, std::size_t n) override {
    if (n > 0) cuda::memcpy_async(dst, src, n * sizeof(float), stream());
  }
  void fill_zero(float* dst, std::size_t n) override {
    if (n > 0) allocator_.backend().zero(dst, n * sizeof(float), stream(), true);
  }
  void cross_entropy(const float* logits, const std::int32_t* labels, std::size_t rows, std::size_t classes,
                     float* dlogits, float scale, long step) override {
    const auto s = static_cast<std::size_t>(step);
    if (s >= step_loss_.size()) grow_step_loss(s + 1);
    cuda::softmax_cross_entropy(logits, labels, rows, classes, dlogits, scale, step_loss_.data() + s, stream());
  }
  std::vector<double> step_losses(long steps) override {
    std::vector<float> host(step_loss_.size());
    download(host.data(), step_loss_.data(), host.size());
    return first_steps(host, steps);
  }

  void upload(float* dst, const float* host_src, std::size_t n) override {
    copy(dst, host_src, n);
    synchronize();
  }
  void download(float* host_dst, const float* src, std::size_t n) override {
    copy(host_dst, src, n);
    synchronize();
  }
  void synchronize() override { compute_.synchronize(); }

  std::unique_ptr<BatchStaging> make_staging(std::size_t max_rows, std::size_t features, bool pin_memory) override {
    return std::make_unique<CudaStaging>(allocator_, host_tracker(), stream(), max_rows, features, pin_memory, guard_);
  }
  std::unique_ptr<StepTimer> make_step_timer() override { return std::make_unique<CudaStepTimer>(stream()); }
  std::unique_ptr<Event> make_event() override { return std::make_unique<CudaEvent>(stream()); }
  void comm_stream_wait(Event& ready) override { static_cast<CudaEvent&>(ready).event().wait_on(comm_stream_); }
  void compute_wait_comm() override {
    comm_done_.record(comm_stream_);
    comm_done_.wait_on(stream());
  }
  void bind_thread() override { cuda::set_device(device_); }
  void before_first_collective() override {
    if (shared_gpu_barrier_) shared_gpu_barrier_();
  }
  void record_device_view(RankResult& result) override {
    result.device.used_after = device_mem_info(device_).used_bytes();
  }

 private:
  void* stream() const { return compute_.handle(); }
  // Per-step losses live on the device until the run asks for them; the buffer doubles as
  // steps grow (the old one is freed after the compute stream has copied it).
  void grow_step_loss(std::size_t steps) {
    DeviceBuffer<float> bigger(allocator_, MemoryCategory::activations,
                               std::max<std::size_t>(steps, 2 * step_loss_.size()), stream());
    if (!step_loss_.empty()) cuda::memcpy_async(bigger.data(), step_loss_.data(), step_loss_.bytes(), stream());
    synchronize();
    step_loss_ = std::move(bigger);
  }

  FailureGuard& guard_;
  std::function<void()> shared_gpu_barrier_;
  int device_;
  void* comm_stream_;
  cuda::Stream& compute_;
  cuda::Blas& blas_;
  DeviceAllocator& allocator_;
  DeviceBuffer<float> step_loss_;
  cuda::Event comm_done_{cuda::Event::Timing::off};  // ordering only
};

// The rank's communicator: over the local group, with a communication stream of its own
// (created in local_comm_stream), or over NCCL on NCCL's stream. comm_stream gets that stream's
// handle. Throws what the communicator's constructor throws.
std::unique_ptr<Communicator> make_gpu_communicator(const TrainConfig& config, int rank, int device,
                                                    DeviceAllocator& allocator, const CommSource& source,
                                                    std::optional<cuda::Stream>& local_comm_stream,
                                                    void*& comm_stream) {
  if (source.group) {
    local_comm_stream.emplace();
    comm_stream = local_comm_stream->handle();
    return std::make_unique<LocalCommunicator>(source.group, rank,
                                               make_cuda_mem_ops(device, allocator, comm_stream, source.peer_devices));
  }
  auto nccl = make_nccl_communicator(*source.id, config.world_size, rank, device, config.timeout);
  comm_stream = nccl->comm_stream_handle();
  return nccl;
}

// Best effort after a failure: the work already queued on the rank's streams finishes before
// its buffers go back to the system; a stream that fails too (a sticky CUDA error) is ignored,
// the original error is the one to report.
void drain_streams(cuda::Stream& compute, std::optional<cuda::Stream>& local_comm_stream) noexcept {
  try {
    compute.synchronize();
    if (local_comm_stream) local_comm_stream->synchronize();
  } catch (const std::exception&) {
  }
}

// Registers the rank's communicator with the launch (CommSource::on_live) while it lives, so
// that a failing peer can abort it.
struct LiveCommunicator {
  LiveCommunicator(const CommSource& s, int r, Communicator* comm) : source(s), rank(r) {
    if (source.on_live) source.on_live(rank, comm);
  }
  ~LiveCommunicator() {
    if (source.on_live) source.on_live(rank, nullptr);
  }
  LiveCommunicator(const LiveCommunicator&) = delete;
  LiveCommunicator& operator=(const LiveCommunicator&) = delete;
  const CommSource& source;
  int rank;
};

// Builds one rank's context on `device`, runs body, and fills result.device. Destruction runs
// in reverse: the rank's buffers (inside body) go before the communicator, streams and allocator.
void run_gpu_rank(const TrainConfig& config, int rank, int device, bool virtual_rank, RankResult& result,
                  const CommSource& source, const RankContextBody& body) {
  cuda::set_device(device);
  const DeviceMemInfo before = device_mem_info(device);
  MemoryTracker tracker, host_tracker;
  DeviceAllocator allocator(device, tracker);
  cuda::Stream compute;
  std::optional<cuda::Stream> local_comm_stream;
  void* comm_stream = nullptr;
  std::unique_ptr<Communicator> comm = make_gpu_communicator(config, rank, device, allocator, source, local_comm_stream,
                                                             comm_stream);
  const LiveCommunicator live{source, rank, comm.get()};
  // Built before anything whose destruction synchronises the device: when the rank throws, its
  // NCCL communicator (and its thread peers') are aborted before cuBLAS's handle or pinned
  // staging go (train/failure_guard.hpp); the catch below names the error.
  FailureGuard failure_guard([&] {
    const std::string reason = fmt::format("rank {}: failed", rank);
    if (!source.group) comm->abort(reason);
    if (source.nccl_threads != nullptr) source.nccl_threads->abort(reason);
  });
  // When ranks share a GPU, every rank of the launch meets once it has allocated what it trains
  // with, before the first collective: no allocation may wait behind a peer's spinning NCCL kernel.
  std::function<void()> shared_gpu_barrier;
  if (source.shared_gpu_barrier) shared_gpu_barrier = [&] { source.shared_gpu_barrier(rank); };

  try {
    cuda::Blas blas(compute.handle(), config.precision);
    struct AbortBeforeBlasDestroy {  // destroyed before blas: cublasDestroy synchronises
      FailureGuard& guard;
      ~AbortBeforeBlasDestroy() { guard.before_sync_destroy(); }
    } abort_before_blas{failure_guard};
    CudaRankContext ctx(rank, device, *comm, comm_stream, compute, blas, allocator, host_tracker, failure_guard,
                        shared_gpu_barrier);
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
    // their timeouts would be reported instead of its error. (The failure guard has done so
    // already, with a generic reason, before cuBLAS's handle or pinned staging went; the first
    // reason stays. A local group is aborted by run_rank_threads once this rank has unwound.)
    const std::string reason = fmt::format("rank {}: {}", rank, e.what());
    if (!source.group) comm->abort(reason);
    if (source.nccl_threads != nullptr) source.nccl_threads->abort(reason);
    drain_streams(compute, local_comm_stream);
    throw;
  }
}

// The "cuda" launcher (run_rank_contexts): launch/device_launch.hpp's launch over this node's
// GPUs, each rank run by run_gpu_rank. Throws as launch_device_ranks.
void run_cuda_ranks(const TrainConfig& config, std::vector<RankResult>& ranks, const RankContextBody& body) {
  DeviceRanks gpus;
  gpus.devices = cuda::device_count();
  gpus.nccl_version = [] { return nccl_version(); };
  gpus.create_id = [] { return nccl_create_unique_id(); };
  gpus.run_rank = [&](int rank, int device, bool virtual_rank, const CommSource& source) {
    run_gpu_rank(config, rank, device, virtual_rank, ranks.at(static_cast<std::size_t>(rank)), source, body);
  };
  launch_device_ranks(launch_spec(config), rank_records(ranks), gpus);
}

}  // namespace

void register_cuda_device() {
  register_cuda_probe(&probe_cuda_runtime);
  register_rank_launcher(DeviceKind::cuda, &run_cuda_ranks);
}

}  // namespace dpbench
