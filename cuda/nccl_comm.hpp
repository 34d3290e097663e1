// The `nccl` backend: the Communicator interface on NVIDIA's NCCL, one communicator per rank,
// every float* a DEVICE pointer. Ranks are threads of one process (each calls
// make_nccl_communicator from its own thread) or processes (rank 0 creates the id, the launcher
// broadcasts it over MPI), as in nccl-tests. Collectives run on the communicator's own
// non-blocking CUDA stream; the blocking calls return when that stream has finished, and every
// wait is a polling loop that checks ncclCommGetAsyncError and a timeout, so a dead or silent
// peer makes this rank throw instead of hanging (NCCL's documented fault-tolerance pattern).
// Byte counts are those of the algorithms core/comm.hpp names (NCCL picks its own algorithm), so
// they compare with the `local` and `mpi` backends.
// No CUDA or NCCL header is included here: CPU-only translation units may include this file.
// Not for: CPU buffers (use `local` or `mpi`).
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>

#include "core/comm.hpp"

namespace dpbench {

// True when this build links NCCL (DPBENCH_HAVE_NCCL). A usable GPU is a separate question:
// see probe_cuda() in core/device.hpp.
bool nccl_available();

// Version of the NCCL library linked at run time, e.g. "2.28.9"; "" when built without NCCL.
std::string nccl_version();

// The bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES = 128).
using NcclUniqueIdBytes = std::array<char, 128>;

// ncclGetUniqueId: rank 0 calls it once per communicator, and every rank gets the same bytes
// (threads share them; processes receive them by MPI_Bcast). Rank 0's process must stay alive
// while the others initialise (the id names a bootstrap socket it listens on).
// Throws Error on failure, InputError when built without NCCL.
NcclUniqueIdBytes nccl_create_unique_id();

// What an NCCL communicator offers beyond the Communicator interface.
//
// Stream contract (all float* are device pointers on this rank's device):
//   - Inputs must be ready when a call is made: work that wrote them on another stream must
//     have completed, or be ordered before the communication stream (record a cudaEvent_t on
//     the compute stream after the write, then cudaStreamWaitEvent(comm_stream, event)), as
//     llm.c does for its NCCL stream. The communication stream does not synchronise with the
//     legacy default stream (it is created with cudaStreamNonBlocking).
//   - Blocking calls (everything but allreduce_sum_start) return after the communication stream
//     has finished: outputs may then be read from any stream or copied to the host.
//   - allreduce_sum_start only enqueues; wait_all() waits for everything started. A compute
//     stream that needs the result before wait_all() can wait on an event recorded on the
//     communication stream instead.
// Failures: every wait polls ncclCommGetAsyncError and the timeout given at creation. On an
// asynchronous NCCL error, a CUDA error, or no completion within the timeout, the communicator
// is aborted (ncclCommAbort) and the call throws Error("rank R: <op>: <cause>"); every later call
// throws Aborted with that message.
// abort(reason) may be called from any thread: with no call in progress it aborts the NCCL
// communicator at once; otherwise the call in progress notices within a poll interval, aborts it
// and throws Aborted(reason). Aborting is local: NCCL does not tell the peers, which fail through
// their own timeouts (or their own abort()). ncclCommAbort makes this rank's kernels exit.
// A host thread blocked inside an NCCL call itself cannot be interrupted: with NCCL's default
// blocking communicators, the first collective of a kind connects to its peers inside the call
// (NCCL_RUNTIME_CONNECT=1). NCCL_RUNTIME_CONNECT=0 connects everything during creation instead;
// NCCL_COMM_BLOCKING=0 makes every NCCL call return ncclInProgress at once, and this backend
// then polls those under the timeout too (creation included).
// Destruction never throws: it waits (at most the timeout) for work still on the stream, then
// calls ncclCommDestroy, which every rank on a node should call too (NCCL); after a failure or
// abort() it only releases this rank's resources.
class NcclCommunicator : public Communicator {
 public:
  // The communication stream, a cudaStream_t passed as void* so that this header needs no CUDA
  // header: `auto s = static_cast<cudaStream_t>(comm.comm_stream_handle());`. Owned by the
  // communicator; valid until it is destroyed.
  virtual void* comm_stream_handle() const = 0;
  // The CUDA device this rank runs on.
  virtual int device() const = 0;
};

// Creates this rank's NCCL communicator: cudaSetDevice(device) on the calling thread, then
// ncclCommInitRank(world_size, id, rank). id: the same bytes on every rank; 0 <= rank <
// world_size; device: a CUDA device index. timeout: how long any later wait for the peers may
// last before the communicator is aborted and the call throws (see NcclCommunicator).
// Blocks until every rank of the communicator has called it: NCCL requires in-process ranks
// (one thread per rank) to call it concurrently from their own threads, each with the same id,
// and the calling thread is then the rank's thread (its current device stays `device`). NCCL
// before 2.30 refuses two ranks of one communicator on one GPU ("Duplicate GPU detected").
// The creation itself is not covered by the timeout (ncclCommInitRank waits for every rank)
// unless NCCL_COMM_BLOCKING=0.
// Throws InputError for bad arguments, or "--comm nccl: this build has no NCCL" when built
// without NCCL; Error with a one-line message naming the rank and the cause on any CUDA or NCCL
// failure, e.g. "rank 1: ncclCommInitRank: unhandled system error (NCCL_DEBUG=INFO for details)".
std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclUniqueIdBytes& id, int world_size, int rank,
                                                         int device, std::chrono::milliseconds timeout);

}  // namespace dpbench
