// GPU ranks in the `local` backend: a LocalMemOps (core/local_comm.hpp) over device memory, so
// the local backend's ring all-reduce, chain reduce/broadcast, scatter/gather and mailboxes run
// between GPU ranks that are threads of one process. A copy from a peer's buffer is a
// cudaMemcpyPeerAsync from the peer's device (it works within one device too, where several
// virtual ranks share a GPU). An addition reads a peer's slice directly when it is on this
// rank's device (threads of one process share the CUDA context) and otherwise first copies it
// into a staging buffer; then cuda::add runs on the rank's stream. Peer access between GPUs is
// enabled where the hardware allows. fence() synchronises that stream, so a step's data is in
// place before the group's barrier. No CUDA header here.
#pragma once

#include <memory>

#include "cuda/device_memory.hpp"
#include "core/local_comm.hpp"

namespace dpbench {

// device: this rank's CUDA device (current on the calling thread whenever the ops are used);
// allocator: where the scratch and staging buffers come from (charged to comm_buffers); stream:
// the rank's communication stream (a cudaStream_t as void*), on which every copy and kernel
// runs; peer_devices: how many devices (0..peer_devices-1) host the group's ranks, the only ones
// peer access is enabled to (a GPU the run does not use gets no context from it). The allocator
// must outlive the ops. Throws Error in a build without CUDA.
std::unique_ptr<LocalMemOps> make_cuda_mem_ops(int device, DeviceAllocator& allocator, void* stream, int peer_devices);

}  // namespace dpbench
