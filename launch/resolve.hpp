// How this process's ranks come to be: threads of one process (`local`), or one process per rank
// started by mpirun/srun (`mpi`, and `nccl` across processes). Resolves world size and rank
// from the launcher and torchrun-style variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
// MASTER_PORT) and turns inconsistent launches into one-line InputErrors, before any training.
#pragma once

#include <string>

#include "core/names.hpp"
#include "launch/rank_launch.hpp"

namespace dpbench {

struct LaunchInfo {
  bool multi_process = false;  // one rank per process
  int world_size = 1;
  int rank = 0;                // this process's rank (0 for in-process ranks)
  int local_rank = 0;          // among the ranks of this node
  int ranks_on_this_node = 1;  // ranks sharing this machine's cores
  Launcher launcher = Launcher::threads;
  std::string init_file;    // file: the file the ranks meet through (launch/file_init.hpp)
  std::string master_addr;  // env, tcp: rank 0's address (MASTER_ADDR)
  int master_port = 0;      // env, tcp: rank 0's rendezvous port (MASTER_PORT)
};

// PyTorch's explicit initialisation, torch.distributed.init_process_group(init_method=URL,
// rank=R, world_size=N), as options: --init-method URL and --rank R (the world size is --world-size,
// resolve_launch's requested_world_size). One process per rank, over gloo or NCCL.
//   env://          MASTER_ADDR and MASTER_PORT from the environment; RANK and WORLD_SIZE too,
//                   unless --rank and --world-size give them (PyTorch's default init_method)
//   tcp://ADDR:PORT rank 0 listens on PORT of ADDR (a name or an IPv4 address), every other rank
//                   connects there; --rank and --world-size required
//   file://PATH     the ranks meet through PATH on a filesystem they all see (launch/file_init.hpp);
//                   --rank and --world-size required
// LOCAL_RANK and LOCAL_WORLD_SIZE, when set, place the rank on its node (its GPU); else it is the
// only rank of its node.
struct ExplicitInit {
  std::string init_method;  // "" (no --init-method), "env://", "tcp://ADDR:PORT" or "file://PATH"
  int rank = -1;            // --rank; -1: not given
};

// comm: the --comm value; requested_world_size: --ranks, or 0 when not given (take the
// launcher's); device: the chosen device ("cpu" or "cuda"). `nccl` runs its ranks as threads,
// or one per process when mpirun started this process. Initialises MPI when the backend needs
// it. Throws InputError for: an unknown backend, --comm mpi in a build without MPI or with
// --device cuda, a world size that differs from the launcher's or from WORLD_SIZE, a
// RANK/LOCAL_RANK out of range or differing from the launcher's, --comm nccl without CUDA
// training, --comm gloo without torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
// with --device cuda or in a build without gloo. A torchrun-style launch (WORLD_SIZE > 1 without mpirun) is `nccl` only, with one
// rank per process meeting at MASTER_ADDR:MASTER_PORT (core/rendezvous.hpp): RANK is required,
// LOCAL_RANK defaults to RANK and LOCAL_WORLD_SIZE to WORLD_SIZE; InputError when RANK,
// MASTER_ADDR or MASTER_PORT is unset, or MASTER_PORT is not a port.
// With --init-method or --rank (`init`), the launch is explicit (see ExplicitInit): InputError for
// --comm local or mpi, an unknown scheme, a tcp:// without a host or port, a missing --rank or
// --world-size for tcp://, a missing variable for env://, a rank out of range.
LaunchInfo resolve_launch(Backend comm, int requested_world_size, DeviceKind device, const ExplicitInit& init = {});

// A rank started by srun (Slurm) over gloo or NCCL reads Slurm's variables where torchrun's are
// unset, as PyTorch Lightning's SLURMEnvironment does (lightning/fabric/plugins/environments/
// slurm.py): RANK = SLURM_PROCID, WORLD_SIZE = SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
// LOCAL_RANK = SLURM_LOCALID, its node's rank count from SLURM_STEP_TASKS_PER_NODE at
// SLURM_NODEID, MASTER_ADDR = the first host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST),
// MASTER_PORT = MASTER_PORT when set, else 15000 + the last four digits of SLURM_JOB_ID (every
// task of a job computes the same port). resolve_launch takes this path when SLURM_PROCID is set
// and RANK and WORLD_SIZE are not; InputError names the variable that is missing or malformed.

// The first host of a Slurm host list: "node[01-04,07],gpu3" gives "node01", "rack[1-2]-n[5-6]"
// gives "rack1-n5" (each bracket's first number, its zero padding kept). InputError on an empty
// list or an unclosed bracket.
std::string slurm_first_host(const std::string& host_list);

// The task count of node `node` in Slurm's tasks-per-node form, "2(x3),1" (nodes 0-2 run 2 tasks,
// node 3 runs 1). InputError on a malformed list or a node beyond it.
int slurm_tasks_on_node(const std::string& tasks_per_node, int node);

// The identity a run's ranks are given from a resolved launch: rank, rank 0's address and port and
// the local rank where the ranks meet at a rendezvous (env, tcp, file, srun); the ranks sharing
// this node for every multi-process launch (LOCAL_WORLD_SIZE, Open MPI's local size, Slurm's tasks
// on the node: their GPUs, and the nodes of --hierarchy node); the defaults otherwise.
ProcessIdentity process_identity(const LaunchInfo& launch);

// Whether this process prints tables and writes result files (rank 0 of a multi-process job,
// once resolve_launch has seen the launch).
bool is_output_process();

// The backend an emulated cluster's ranks meet over: mpi under mpirun, gloo under the others.
Backend cluster_backend(Launcher launcher);
// Whether the cluster's ranks are given PyTorch's explicit form (--init-method and --rank): tcp, file.
bool explicit_init(Launcher launcher);

}  // namespace dpbench
