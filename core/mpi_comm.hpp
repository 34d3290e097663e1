// The `mpi` backend: one rank per process, launched with mpirun or srun, over OpenMPI on CPU
// buffers. Collectives map onto MPI's own (MPI_Allreduce, MPI_Reduce, MPI_Bcast, ...); the
// allreduce mode's buckets use MPI_Iallreduce so that communication overlaps backward. Byte
// counts follow the shared per-algorithm formulas of core/comm.hpp, so `mpi` and `local` runs
// compare directly. A watchdog thread ends the whole job with MPI_Abort when this rank has
// waited in one MPI call longer than the timeout (a peer stopped answering). No MPI header here:
// every translation unit may include this, with or without MPI in the build.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/memory.hpp"

namespace dpbench {

// Whether this build has MPI.
bool mpi_built();
// Whether an MPI launcher (mpirun, srun) started this process: OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK is set.
bool mpi_launched();

// Process-wide MPI lifetime. init() is idempotent and throws InputError when the build has no
// MPI. The queries are valid once init() returned.
class MpiRuntime {
 public:
  static void init();
  static bool active();
  static int rank();
  static int size();
  static int local_rank();  // rank among the processes of this node (MPI_COMM_TYPE_SHARED split)
  static int local_size();
  static std::string version();  // MPI_Get_library_version, first line
  // MPI_Finalize if init() ran; safe to call more than once.
  static void finalize();
  // Prints `message` (one line) on stderr and ends every process of the job with `code`.
  [[noreturn]] static void abort(int code, const std::string& message);
};

// A communicator over MPI_COMM_WORLD for this process's rank. timeout: how long one call may wait
// before the watchdog aborts the job.
std::unique_ptr<Communicator> make_mpi_communicator(std::chrono::milliseconds timeout);

// Rank `root` receives every rank's string, in rank order; the others get an empty vector.
std::vector<std::string> mpi_gather_strings(const std::string& mine, int root);

// MPI_Bcast of `bytes` bytes at data from `root` to every rank (e.g. the ncclUniqueId). Without
// MPI (one process) it does nothing. Throws Error when MPI fails.
void mpi_broadcast_bytes(void* data, std::size_t bytes, int root);

// Every process of the job waits here until all have arrived, without spinning: an
// MPI_Ibarrier tested every 10 ms, so that waiting ranks leave the cores to work rank 0 does
// alone (the PyTorch reference it starts). Does nothing when MPI is not active. Throws Error
// when MPI fails.
void mpi_idle_barrier();

}  // namespace dpbench
