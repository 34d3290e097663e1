// The `nccl` backend (cuda/nccl_comm.hpp): each Communicator call is one NCCL call (or one group
// of ncclSend/ncclRecv) on the communicator's own stream, followed by a polled wait. The waits
// follow NCCL's fault-tolerance example and nccl-tests' testStreamSynchronize: cudaStreamQuery
// in a loop that also checks ncclCommGetAsyncError, a pending abort() and the timeout, and
// aborts the communicator instead of hanging. The abort state machine, the back-off and the
// timeout are core/abortable_calls.hpp (CPU-tested); this file says what finished means and
// calls ncclCommAbort. No kernels of our own: NCCL's do the work.
// Calls that return ncclInProgress (non-blocking communicators, NCCL_COMM_BLOCKING=0) are
// polled the same way until NCCL has finished enqueueing them.
// Part of the CUDA target; in a CUDA build without NCCL its functions say that NCCL is missing.
#include "cuda/nccl_comm.hpp"

#ifdef DPBENCH_HAVE_NCCL

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "core/abortable_calls.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "core/error_location.hpp"
#include "cuda/cuda_check.cuh"

namespace dpbench {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclUniqueIdBytes),
              "NcclUniqueIdBytes must hold exactly one ncclUniqueId");

namespace {

// NCCL's name for a result, plus its last warning (often the useful part: "Duplicate GPU
// detected ...") on one line.
std::string nccl_cause(ncclResult_t result) {
  std::string cause = ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  const std::string detail = one_line(last != nullptr ? last : "");
  if (!detail.empty()) cause += ": " + detail;
  return cause + " (NCCL_DEBUG=INFO for details)";
}

}  // namespace

// NCCL's check macro (nccl-tests style), where = the NcclCommunicatorImpl: a failed call aborts
// the communicator and throws Error("rank R: <call>: <cause> at <file>:<line>"); a nonblocking
// call still in progress is waited for. CUDA calls use DPBENCH_CUDA_CHECK(*this, call), reported
// the same way (report_failure below).
#define DPBENCH_NCCL_CHECK(where, call) (where).check_nccl((call), #call, __FILE__, __LINE__)

namespace {

class NcclCommunicatorImpl final : public NcclCommunicator {
 public:
  NcclCommunicatorImpl(int world_size, int rank, int device, std::chrono::milliseconds timeout)
      : world_size_(world_size), rank_(rank), device_(device), calls_(fmt::format("rank {}", rank), timeout, [this] {
          if (comm_ != nullptr) ncclCommAbort(comm_);  // makes this rank's kernels exit, frees it
        }) {}
  ~NcclCommunicatorImpl() override;
  NcclCommunicatorImpl(const NcclCommunicatorImpl&) = delete;
  NcclCommunicatorImpl& operator=(const NcclCommunicatorImpl&) = delete;

  // cudaSetDevice, the stream, the barrier scratch, then ncclCommInitRank (a rendezvous with
  // every rank). Allocations come first so that no rank allocates while a peer's NCCL kernels
  // may already run on the same device.
  void init(const NcclUniqueIdBytes& id);

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  Backend backend() const override { return Backend::nccl; }
  void* comm_stream_handle() const override { return stream_; }
  int device() const override { return device_; }

  void allreduce_sum(float* buf, std::size_t n) override;
  void reduce_sum(float* buf, std::size_t n, int root) override;
  void broadcast(float* buf, std::size_t n, int root) override;
  void allgather(const float* send, float* recv, std::size_t n) override;
  void reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) override;
  void reduce_scatterv_sum_start(float* send, const std::vector<std::size_t>& counts, float* recv) override;
  void allgatherv(float* buf, const std::vector<std::size_t>& counts) override;
  void scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override;
  void gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) override;
  void send(const float* buf, std::size_t n, int dst) override;
  void recv(float* buf, std::size_t n, int src) override;
  void sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n, int src) override;
  void barrier() override;
  void abort(const std::string& reason) override { calls_.abort(reason); }

  bool supports_async() const override { return true; }
  void allreduce_sum_start(float* buf, std::size_t n) override;
  void progress() override {}
  void wait_all() override;

 private:
  // Starts a call: holds the call lock for its duration; throws Aborted if abort() came first.
  std::unique_lock<std::mutex> enter() { return calls_.enter(); }

  // A failed CUDA call (DPBENCH_CUDA_CHECK(*this, call)): aborts the communicator, throws
  // "rank R: <what>".
  [[noreturn]] void fail(const std::string& what) { calls_.fail(fmt::format("rank {}: {}", rank_, what)); }
  [[noreturn]] friend void report_failure(NcclCommunicatorImpl& where, const std::string& what) { where.fail(what); }
  void check_nccl(ncclResult_t result, const char* call, const char* file, int line);
  // Enqueues the NCCL calls of enqueue() (which returns the first failure) as one
  // group. The group is closed even when a call fails, so NCCL's per-thread group state stays
  // clean.
  template <typename Enqueue>
  void p2p_group(Enqueue enqueue, const char* file, int line);
  // Enqueues a reduce-scatter over segments: ncclReduceScatter when every count is equal,
  // otherwise one ncclReduce per non-empty segment (root: the segment's rank) in one group.
  void enqueue_reduce_scatterv(float* send, const std::vector<std::size_t>& counts, float* recv);

  // Waits until the stream has finished everything enqueued on it.
  void wait_stream(const std::string& op);
  // Waits until an NCCL call that returned ncclInProgress has been enqueued.
  void settle(const std::string& op);
  // One poll of a wait: fails on an NCCL error, throws Aborted after abort(); returns the
  // communicator's state (ncclSuccess or ncclInProgress).
  ncclResult_t comm_state(const std::string& op);

  const int world_size_;
  const int rank_;
  const int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;     // the communication stream (cudaStreamNonBlocking)
  float* barrier_scratch_ = nullptr;  // [1] float on device_, all-reduced by barrier()
  // One call at a time, abort() from any thread, the timed waits; aborting is ncclCommAbort.
  AbortableCalls calls_;
};

// ---------------------------------------------------------------------------------------------
// Setup and teardown

void NcclCommunicatorImpl::init(const NcclUniqueIdBytes& id) {
  const auto lock = calls_.lock();
  DPBENCH_CUDA_CHECK(*this, cudaSetDevice(device_));
  DPBENCH_CUDA_CHECK(*this, cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DPBENCH_CUDA_CHECK(*this, cudaMalloc(&barrier_scratch_, sizeof(float)));
  DPBENCH_CUDA_CHECK(*this, cudaMemsetAsync(barrier_scratch_, 0, sizeof(float), stream_));
  DPBENCH_CUDA_CHECK(*this, cudaStreamSynchronize(stream_));
  ncclUniqueId uid;
  std::memcpy(uid.internal, id.data(), sizeof(uid.internal));
  // On failure NCCL leaves comm_ null (blocking) or a communicator to abort (non-blocking).
  DPBENCH_NCCL_CHECK(*this, ncclCommInitRank(&comm_, world_size_, uid, rank_));
}

NcclCommunicatorImpl::~NcclCommunicatorImpl() {
  const auto lock = calls_.lock();
  int previous_device = -1;
  if (cudaGetDevice(&previous_device) != cudaSuccess) previous_device = -1;
  cudaSetDevice(device_);
  // Let started work finish first (or fail, which aborts): ncclCommDestroy would wait for it
  // without a timeout.
  if (comm_ != nullptr && !calls_.backend_aborted() && !calls_.abort_requested()) {
    try {
      wait_stream("destroy");
    } catch (...) {
    }
  }
  if (comm_ != nullptr && !calls_.backend_aborted()) {
    if (calls_.abort_requested()) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (barrier_scratch_ != nullptr) cudaFree(barrier_scratch_);
  cudaGetLastError();
  if (previous_device >= 0) cudaSetDevice(previous_device);
}

// ---------------------------------------------------------------------------------------------
// Failure handling

void NcclCommunicatorImpl::check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
  if (result == ncclSuccess) return;
  if (result == ncclInProgress && comm_ != nullptr) {
    settle(call_name(call));
    return;
  }
  calls_.fail(
      fmt::format("rank {}: {}: {} at {}", rank_, call_name(call), nccl_cause(result), source_location(file, line)));
}

ncclResult_t NcclCommunicatorImpl::comm_state(const std::string& op) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) {
    calls_.fail(
        fmt::format("rank {}: {}: ncclCommGetAsyncError: {}; communicator aborted", rank_, op, nccl_cause(result)));
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    calls_.fail(fmt::format("rank {}: {}: NCCL async error {}; communicator aborted", rank_, op, nccl_cause(state)));
  }
  calls_.throw_if_aborted();
  return state;
}

void NcclCommunicatorImpl::wait_stream(const std::string& op) {
  calls_.wait(op, [&] {
    const cudaError_t err = cudaStreamQuery(stream_);
    if (err == cudaSuccess) return true;
    if (err != cudaErrorNotReady) {
      cudaGetLastError();
      calls_.fail(fmt::format("rank {}: {}: {}; communicator aborted", rank_, op, cudaGetErrorString(err)));
    }
    comm_state(op);
    return false;
  });
}

void NcclCommunicatorImpl::settle(const std::string& op) {
  calls_.wait(op, [&] { return comm_state(op) != ncclInProgress; });
}

template <typename Enqueue>
void NcclCommunicatorImpl::p2p_group(Enqueue enqueue, const char* file, int line) {
  check_nccl(ncclGroupStart(), "ncclGroupStart", file, line);
  const ncclResult_t first = enqueue();
  const ncclResult_t end = ncclGroupEnd();
  check_nccl(first, "grouped NCCL call", file, line);
  check_nccl(end, "ncclGroupEnd", file, line);
}

// ---------------------------------------------------------------------------------------------
// Collectives. Byte counts: the formulas of core/comm.hpp, as the `local` backend moves them.

void NcclCommunicatorImpl::allreduce_sum(float* buf, std::size_t n) {
  const auto lock = enter();
  if (n == 0) return;
  DPBENCH_NCCL_CHECK(*this, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_));
  wait_stream("allreduce");
  count(ring_allreduce_counts(n, world_size_, rank_));
}

void NcclCommunicatorImpl::allreduce_sum_start(float* buf, std::size_t n) {
  const auto lock = enter();
  if (n == 0) return;
  DPBENCH_NCCL_CHECK(*this, ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm_, stream_));
  count(ring_allreduce_counts(n, world_size_, rank_));
}

void NcclCommunicatorImpl::wait_all() {
  const auto lock = enter();
  wait_stream("allreduce (wait_all)");
}

// In place: on the root sendbuff == recvbuff; elsewhere NCCL only reads buf (recvbuff is used
// on the root only), so the other ranks' buf stays unchanged.
void NcclCommunicatorImpl::reduce_sum(float* buf, std::size_t n, int root) {
  check_root(root, "reduce");
  const auto lock = enter();
  if (n == 0) return;
  DPBENCH_NCCL_CHECK(*this, ncclReduce(buf, buf, n, ncclFloat, ncclSum, root, comm_, stream_));
  wait_stream("reduce");
  count(chain_reduce_counts(n, world_size_, rank_, root));
}

// In place: sendbuff is read on the root only, recvbuff written everywhere.
void NcclCommunicatorImpl::broadcast(float* buf, std::size_t n, int root) {
  check_root(root, "broadcast");
  const auto lock = enter();
  if (n == 0) return;
  DPBENCH_NCCL_CHECK(*this, ncclBroadcast(buf, buf, n, ncclFloat, root, comm_, stream_));
  wait_stream("broadcast");
  count(chain_broadcast_counts(n, world_size_, rank_, root));
}

void NcclCommunicatorImpl::allgather(const float* send, float* recv, std::size_t n) {
  const auto lock = enter();
  if (n == 0) return;
  DPBENCH_NCCL_CHECK(*this, ncclAllGather(send, recv, n, ncclFloat, comm_, stream_));
  wait_stream("allgather");
  const std::size_t others = static_cast<std::size_t>(world_size_ - 1) * n;
  count(others, others);
}

void NcclCommunicatorImpl::enqueue_reduce_scatterv(float* send, const std::vector<std::size_t>& counts, float* recv) {
  check_counts(counts, "reduce_scatter");
  if (equal_counts(counts)) {
    if (counts[0] > 0)
      DPBENCH_NCCL_CHECK(*this, ncclReduceScatter(send, recv, counts[0], ncclFloat, ncclSum, comm_, stream_));
    return;
  }
  p2p_group(  // recvbuff is written on the root only
      [&] {
    return for_each_segment(counts, -1, ncclSuccess, [&](int k, std::size_t off, std::size_t c) {
      return ncclReduce(send + off, k == rank_ ? recv : send + off, c, ncclFloat, ncclSum, k, comm_, stream_);
    });
      },
      __FILE__, __LINE__);
}

void NcclCommunicatorImpl::reduce_scatterv_sum(float* send, const std::vector<std::size_t>& counts, float* recv) {
  const auto lock = enter();
  enqueue_reduce_scatterv(send, counts, recv);
  wait_stream("reduce_scatter");
  count(ring_reduce_scatter_counts(counts, rank_));
}

void NcclCommunicatorImpl::reduce_scatterv_sum_start(float* send, const std::vector<std::size_t>& counts, float* recv) {
  const auto lock = enter();
  enqueue_reduce_scatterv(send, counts, recv);
  count(ring_reduce_scatter_counts(counts, rank_));
}

// In place: ncclAllGather when every count is equal (sendbuff = recvbuff + rank * count),
// otherwise one in-place ncclBroadcast per non-empty segment (root: its rank) in one group.
void NcclCommunicatorImpl::allgatherv(float* buf, const std::vector<std::size_t>& counts) {
  check_counts(counts, "allgather");
  const auto lock = enter();
  if (equal_counts(counts)) {
    if (counts[0] > 0) {
      DPBENCH_NCCL_CHECK(*this, ncclAllGather(buf + counts[0] * static_cast<std::size_t>(rank_), buf, counts[0],
                                              ncclFloat, comm_, stream_));
    }
  } else {
    p2p_group(
        [&] {
      return for_each_segment(counts, -1, ncclSuccess, [&](int k, std::size_t off, std::size_t c) {
        return ncclBroadcast(buf + off, buf + off, c, ncclFloat, k, comm_, stream_);
      });
        },
        __FILE__, __LINE__);
  }
  wait_stream("allgather");
  count(ring_allgather_counts(counts, rank_));
}

// The root sends each rank its part (one group of ncclSend) and copies its own; every other
// rank receives one message. Ranks with a count of 0 exchange nothing.
void NcclCommunicatorImpl::scatterv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) {
  check_root(root, "scatter");
  check_counts(counts, "scatter");
  const auto lock = enter();
  const std::vector<std::size_t> offsets = segment_offsets(counts);
  const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
  if (rank_ == root) {
    if (mine > 0) {
      DPBENCH_CUDA_CHECK(*this, cudaMemcpyAsync(recv, send + offsets[static_cast<std::size_t>(rank_)],
                                                mine * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    }
    p2p_group(
        [&] {
      return for_each_segment(counts, root, ncclSuccess, [&](int r, std::size_t off, std::size_t c) {
        return ncclSend(send + off, c, ncclFloat, r, comm_, stream_);
      });
        },
        __FILE__, __LINE__);
  } else if (mine > 0) {
    DPBENCH_NCCL_CHECK(*this, ncclRecv(recv, mine, ncclFloat, root, comm_, stream_));
  }
  wait_stream("scatter");
  count(root_scatter_counts(counts, rank_, root));
}

// Inverse of scatterv: the root receives every part (one group of ncclRecv) and copies its own.
void NcclCommunicatorImpl::gatherv(const float* send, const std::vector<std::size_t>& counts, float* recv, int root) {
  check_root(root, "gather");
  check_counts(counts, "gather");
  const auto lock = enter();
  const std::vector<std::size_t> offsets = segment_offsets(counts);
  const std::size_t mine = counts[static_cast<std::size_t>(rank_)];
  if (rank_ == root) {
    if (mine > 0) {
      DPBENCH_CUDA_CHECK(*this, cudaMemcpyAsync(recv + offsets[static_cast<std::size_t>(rank_)], send,
                                                mine * sizeof(float), cudaMemcpyDeviceToDevice, stream_));
    }
    p2p_group(
        [&] {
      return for_each_segment(counts, root, ncclSuccess, [&](int r, std::size_t off, std::size_t c) {
        return ncclRecv(recv + off, c, ncclFloat, r, comm_, stream_);
      });
        },
        __FILE__, __LINE__);
  } else if (mine > 0) {
    DPBENCH_NCCL_CHECK(*this, ncclSend(send, mine, ncclFloat, root, comm_, stream_));
  }
  wait_stream("gather");
  count(root_gather_counts(counts, rank_, root));
}

void NcclCommunicatorImpl::send(const float* buf, std::size_t n, int dst) {
  check_peer(dst, "send", "destination");
  const auto lock = enter();
  if (n > 0) {
    DPBENCH_NCCL_CHECK(*this, ncclSend(buf, n, ncclFloat, dst, comm_, stream_));
    wait_stream("send");
  }
  count(n, 0);
}

void NcclCommunicatorImpl::recv(float* buf, std::size_t n, int src) {
  check_peer(src, "recv", "source");
  const auto lock = enter();
  if (n > 0) {
    DPBENCH_NCCL_CHECK(*this, ncclRecv(buf, n, ncclFloat, src, comm_, stream_));
    wait_stream("recv");
  }
  count(0, n);
}

// ncclSend and ncclRecv in one group, so that a ring of them does not deadlock.
void NcclCommunicatorImpl::sendrecv(const float* send, std::size_t send_n, int dst, float* recv, std::size_t recv_n,
                                    int src) {
  check_peer(dst, "sendrecv", "destination");
  check_peer(src, "sendrecv", "source");
  const auto lock = enter();
  DPBENCH_NCCL_CHECK(*this, ncclGroupStart());
  if (send_n > 0) DPBENCH_NCCL_CHECK(*this, ncclSend(send, send_n, ncclFloat, dst, comm_, stream_));
  if (recv_n > 0) DPBENCH_NCCL_CHECK(*this, ncclRecv(recv, recv_n, ncclFloat, src, comm_, stream_));
  DPBENCH_NCCL_CHECK(*this, ncclGroupEnd());
  wait_stream("sendrecv");
  count(send_n, recv_n);
}

// An all-reduce of one float: returns once every rank has entered it. Not counted as traffic,
// as the `local` barrier is not.
void NcclCommunicatorImpl::barrier() {
  const auto lock = enter();
  DPBENCH_NCCL_CHECK(*this, ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat, ncclSum, comm_, stream_));
  wait_stream("barrier");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public functions

bool nccl_available() { return true; }

std::string nccl_version() {
  int code = 0;
  return ncclGetVersion(&code) == ncclSuccess ? nccl_version_text(code) : "";
}

NcclUniqueIdBytes nccl_create_unique_id() {
  ncclUniqueId uid;
  const ncclResult_t result = ncclGetUniqueId(&uid);
  if (result != ncclSuccess) {
    throw Error(fmt::format("ncclGetUniqueId: {}", nccl_cause(result)));
  }
  NcclUniqueIdBytes bytes{};
  std::memcpy(bytes.data(), uid.internal, bytes.size());
  return bytes;
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclUniqueIdBytes& id, int world_size, int rank,
                                                         int device, std::chrono::milliseconds timeout) {
  check_world_rank(world_size, rank);
  if (device < 0) throw InputError(fmt::format("rank {}: device {} is not a CUDA device", rank, device));
  if (timeout.count() <= 0) {
    throw InputError(fmt::format("rank {}: NCCL timeout must be positive, got {} ms", rank, timeout.count()));
  }
  auto comm = std::make_unique<NcclCommunicatorImpl>(world_size, rank, device, timeout);
  comm->init(id);  // on failure the destructor releases what init created
  return comm;
}

}  // namespace dpbench

#undef CUDA_CHECK
#undef NCCL_CHECK

#else  // CUDA without NCCL: the backend reports that it is not there

#include "core/error.hpp"

namespace dpbench {

bool nccl_available() { return false; }

std::string nccl_version() { return ""; }

NcclUniqueIdBytes nccl_create_unique_id() { throw InputError("--comm nccl: this build has no NCCL"); }

std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclUniqueIdBytes&, int, int, int,
                                                         std::chrono::milliseconds) {
  throw InputError("--comm nccl: this build has no NCCL");
}

}  // namespace dpbench

#endif  // DPBENCH_HAVE_NCCL
