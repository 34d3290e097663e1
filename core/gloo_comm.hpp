// The `gloo` backend: one CPU rank per process over gloo's TCP transport (PyTorch's CPU
// collective library, Debian's libgloo-dev), for processes started by torchrun or by hand with
// its variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The ranks find each other through
// dpbench's rendezvous at MASTER_ADDR:MASTER_PORT (core/rendezvous.hpp), which serves as gloo's
// rendezvous Store. Collectives map onto gloo's own (gloo::allreduce with the ring algorithm,
// reduce, broadcast, allgather, allgatherv, barrier); segments of uneven size and point-to-point
// transfers use gloo's unbound buffers. Byte counts follow the per-algorithm formulas of
// core/comm.hpp for the algorithms gloo runs (ring all-reduce and all-gather as `local` and
// `mpi`; gloo_reduce_counts and binomial_broadcast_counts for its reduce and broadcast), so
// that they match the bytes on the wire. No gloo header here:
// every translation unit may include this, with or without gloo in the build.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "core/comm.hpp"

namespace dpbench {

class Rendezvous;

// Whether this build has gloo.
bool gloo_built();

// A gloo communicator for `rendezvous`'s rank, connected to every other rank (a full mesh of TCP
// pairs on GLOO_SOCKET_IFNAME when set, else on the address of the interface that reaches
// MASTER_ADDR, core/net_interface.hpp address_toward; loopback for 127.0.0.1). `tag` names this
// communicator's exchange on the rendezvous (one per run). timeout bounds every operation; a peer
// that died or stopped answering makes the waiting rank throw Error naming the operation. Throws
// InputError when the build has no gloo, Error when the mesh cannot be connected.
std::unique_ptr<Communicator> make_gloo_communicator(Rendezvous& rendezvous, const std::string& tag,
                                                     const std::string& master_addr, std::chrono::milliseconds timeout);

// gloo's all-reduce algorithms, for comparing them with dpbench's ring and Open MPI's
// (bench/micro/dpbench_collectives):
// - ring: gloo::allreduce with Algorithm::RING, what `--comm gloo` runs (gloo/allreduce.cc);
// - ring_chunked: gloo::AllreduceRingChunked, a ring over 2p chunks of at least 1 KiB that keeps
//   two chunks in flight (gloo/allreduce_ring_chunked.h);
// - halving_doubling: gloo::AllreduceHalvingDoubling, recursive vector halving with distance
//   doubling for the reduce-scatter and the reverse for the all-gather, with binary blocks for
//   world sizes that are not powers of two (Thakur, Rabenseifner and Gropp, "Optimization of
//   Collective Communication Operations in MPICH", 2005; gloo/allreduce_halving_doubling.h).
enum class GlooAllreduceAlgorithm { ring, ring_chunked, halving_doubling };

// "ring", "ring_chunked", "halving_doubling".
const char* gloo_allreduce_algorithm_name(GlooAllreduceAlgorithm algorithm);

// One in-place float sum all-reduce, bound to its buffer when made (the class algorithms register
// the buffer with each pair once) and run as often as wanted. Every rank must make its instances
// in the same order, as gloo matches them by slot.
class GlooAllreduce {
 public:
  virtual ~GlooAllreduce() = default;
  // Sums buf[n] over every rank, in place. Throws Error naming the rank and the algorithm when a
  // peer fails or the communicator's timeout passes.
  virtual void run() = 0;
};

// An all-reduce of buf[n] floats over the connections of `comm`, which make_gloo_communicator
// made. Throws InputError when the build has no gloo, `comm` is another backend's, or n is above
// INT_MAX (gloo's count type); Error when gloo cannot set it up.
std::unique_ptr<GlooAllreduce> make_gloo_allreduce(Communicator& comm, GlooAllreduceAlgorithm algorithm, float* buf,
                                                   std::size_t n);

}  // namespace dpbench
