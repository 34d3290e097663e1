// The `gloo` backend: one CPU rank per process over gloo's TCP transport (PyTorch's CPU
// collective library, Debian's libgloo-dev), for processes started by torchrun or by hand with
// its variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). The ranks find each other through
// dpbench's rendezvous at MASTER_ADDR:MASTER_PORT (core/rendezvous.hpp), which serves as gloo's
// rendezvous Store. Collectives map onto gloo's own (gloo::allreduce with the ring algorithm,
// reduce, broadcast, allgather, allgatherv, barrier); segments of uneven size and point-to-point
// transfers use gloo's unbound buffers. Byte counts follow the shared per-algorithm formulas of
// core/comm.hpp, as `local` and `mpi` do, so the three compare directly. No gloo header here:
// every translation unit may include this, with or without gloo in the build.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "core/comm.hpp"

namespace dpbench {

class Rendezvous;

// Whether this build has gloo.
bool gloo_built();

// A gloo communicator for `rendezvous`'s rank, connected to every other rank (a full mesh of TCP
// pairs on the interface that reaches MASTER_ADDR; loopback for 127.0.0.1). `tag` names this
// communicator's exchange on the rendezvous (one per run). timeout bounds every operation; a peer
// that died or stopped answering makes the waiting rank throw Error naming the operation. Throws
// InputError when the build has no gloo, Error when the mesh cannot be connected.
std::unique_ptr<Communicator> make_gloo_communicator(Rendezvous& rendezvous, const std::string& tag,
                                                     const std::string& master_addr,
                                                     std::chrono::milliseconds timeout);

}  // namespace dpbench
