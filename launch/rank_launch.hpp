// The launch room: how the ranks of one run start, meet and report, written once for every way a
// job starts (core/names.hpp's Launcher) and every device. A run hands the room a LaunchSpec
// (its backend, world size, timeout and this process's identity, which launch/resolve.hpp filled
// from the launcher) and a RecordCodec (how a rank's record crosses a process boundary); the room
// runs the ranks this process owns and leaves every rank's record on the output process. Training
// lives elsewhere (train/): a RankRunner only calls the rank body it is given.
#pragma once

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm.hpp"
#include "core/memory.hpp"
#include "core/names.hpp"

namespace dpbench {

class LocalGroup;
class Rendezvous;

// Who this process is in a multi-process job, as its launcher said (launch/resolve.hpp's
// LaunchInfo, or the caller of a test harness); the defaults mean "every rank is a thread here".
struct ProcessIdentity {
  // This process's rank when it runs one rank of a multi-process job that does not use mpirun
  // (gloo; nccl under torchrun, srun, --init-method, or a caller that shares the ncclUniqueId
  // itself); -1: not such a launch.
  int rank = -1;
  // nccl started by a caller that shares the id itself: the job's ncclUniqueId bytes
  // (NCCL_UNIQUE_ID_BYTES = 128), used when master_addr is empty.
  std::array<char, 128> nccl_id{};
  // Where the ranks meet (core/rendezvous.hpp): rank 0's address and port, or the file that says
  // where rank 0 listens (--init-method file://, launch/file_init.hpp); both empty: no rendezvous.
  std::string master_addr;
  int master_port = 0;
  std::string init_file;
  int local_rank = -1;         // among the ranks of this node (a GPU rank's device: local_rank % GPUs)
  int ranks_on_this_node = 0;  // ranks sharing this node; 0: not known (every rank of the run)

  // Whether the ranks meet at a rendezvous (gloo; nccl one rank per process without mpirun).
  bool meets_at_rendezvous() const { return !master_addr.empty() || !init_file.empty(); }
};

// What the launch room needs of a run.
struct LaunchSpec {
  Backend comm = Backend::local;
  int world_size = 1;
  std::chrono::milliseconds timeout = std::chrono::seconds(300);  // every wait of the launch
  ProcessIdentity process;
  // Called with a rank's error before it propagates (gloo ranks: what an elastic restart's next
  // attempt measures its recovery from); may be empty.
  std::function<void(int rank, const std::string& what)> on_rank_failure;
};

// How the records of the ranks cross a process boundary: encode(rank) is this process's record
// of `rank` as bytes; decode(rank, bytes) stores rank `rank`'s record from them.
struct RecordCodec {
  std::function<std::string(int rank)> encode;
  std::function<void(int rank, const std::string& bytes)> decode;
};

// The body of one rank on the host: its rank, its communicator, its memory tracker.
using RankMain = std::function<void(int rank, Communicator& comm, MemoryTracker& tracker)>;

// How this process runs its CPU ranks over their backend, whichever launcher started it
// (make_rank_runner picks it from LaunchSpec::comm):
//   local: world_size threads of one in-process group. If a rank throws, the group is aborted
//     (peers blocked in collectives throw Aborted) and the first rank's exception is rethrown with
//     "rank R: " prepended (InputError stays InputError). A rank stuck outside the communicator
//     makes its peers time out; the process then prints the reason and exits 1.
//   mpi: this process's rank only (mpirun); a failure prints one line and ends the job with
//     MPI_Abort (exit 1, or 2 for bad input); then every record is gathered to rank 0.
//   gloo: this process's rank (process.rank); the ranks meet at the rendezvous (meet_ranks),
//     where gloo's mesh connects too; a failing rank tells the others through the rendezvous.
class RankRunner {
 public:
  virtual ~RankRunner() = default;
  // Runs main for every rank this process owns; every rank's record reaches the output process.
  virtual void run(const RankMain& main) = 0;
};

// The rank runner of spec.comm: InputError for nccl ("--comm nccl: not available for CPU training").
std::unique_ptr<RankRunner> make_rank_runner(const LaunchSpec& spec, const RecordCodec& records);

// The machinery the rank runners share, for devices that build their own per-rank state (GPU ranks,
// launch/device_launch.hpp):
//   run_rank_threads: rank_main(rank) on group.world_size() threads, with the local rank runner's
//     failure handling.
//   run_mpi_process: rank_main(this process's rank) under mpirun, ending the job with MPI_Abort
//     on a failure, then gathering every rank's record to rank 0. InputError when MPI's world
//     size differs from spec.world_size.
//   meet_ranks: this process's rendezvous (core/rendezvous.hpp's process_rendezvous) and rank 0's
//     address: at process.master_addr:master_port; with process.init_file, rank 0 listens on a
//     free port and publishes its address there, the others read it (launch/file_init.hpp). The
//     first call decides; later calls return the same.
//   run_env_process: one rank of a rendezvous launch (spec.process.meets_at_rendezvous()). Rank 0's
//     rank0_payload() (an ncclUniqueId's bytes) reaches every rank through the process's
//     rendezvous (core/rendezvous.hpp; the n-th run of the process has tag "run n"),
//     rank_main(payload) runs the rank, and every record reaches rank 0 the same way. A failing
//     rank tells the others, then rethrows with "rank R: " prepended (InputError stays
//     InputError); rank 0 failing after another rank did names that one first.
//   run_rendezvous_rank: the same on a given rendezvous and tag (what run_env_process calls).
//   CommAbortRegistry: hooks into a LocalGroup so that aborting the group (a rank failed, a
//     timeout) aborts every communicator registered with set(rank, comm); one registered after
//     the group was aborted is aborted at once. set(rank, nullptr) before a communicator dies.
struct RankMeeting {
  Rendezvous& rendezvous;
  std::string master_addr;  // rank 0's address (gloo's mesh picks its own address toward it)
};
RankMeeting meet_ranks(const LaunchSpec& spec);
void run_rank_threads(LocalGroup& group, const std::function<void(int rank)>& rank_main);
void run_mpi_process(const LaunchSpec& spec, const RecordCodec& records,
                     const std::function<void(int rank)>& rank_main);
void run_env_process(const LaunchSpec& spec, const RecordCodec& records,
                     const std::function<std::string()>& rank0_payload,
                     const std::function<void(const std::string& payload)>& rank_main);
void run_rendezvous_rank(Rendezvous& rendezvous, const std::string& tag, const RecordCodec& records,
                         const std::function<std::string()>& rank0_payload,
                         const std::function<void(const std::string& payload)>& rank_main);
class CommAbortRegistry {
 public:
  // The group must outlive the registry, and the registry every rank's use of the group.
  explicit CommAbortRegistry(LocalGroup& group);
  void set(int rank, Communicator* comm);

 private:
  LocalGroup& group_;
  std::mutex mutex_;
  std::vector<Communicator*> live_;  // by rank; guarded by mutex_
};

}  // namespace dpbench
