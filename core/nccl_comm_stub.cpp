// The `nccl` backend in a build without NCCL (no CUDA at all, or CUDA without NCCL): the same
// functions as core/nccl_comm.cu, saying that NCCL is not there. With NCCL this file is empty
// and core/nccl_comm.cu defines them.
#include "core/nccl_comm.hpp"

#include "core/error.hpp"

namespace dpbench {

#ifndef DPBENCH_HAVE_NCCL

bool nccl_available() { return false; }

std::string nccl_version() { return ""; }

NcclUniqueIdBytes nccl_create_unique_id() {
  throw InputError("--comm nccl: this build has no NCCL");
}

std::unique_ptr<NcclCommunicator> make_nccl_communicator(const NcclUniqueIdBytes&, int, int, int,
                                                         std::chrono::milliseconds) {
  throw InputError("--comm nccl: this build has no NCCL");
}

#endif  // DPBENCH_HAVE_NCCL

}  // namespace dpbench
