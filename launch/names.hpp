// The launch room's vocabulary, parsed in one place: the communication backend a run's ranks talk
// over (--comm) and the way its processes were started (the result's config.launcher). Every
// other file compares these enums; only launch/names.cpp knows their spellings.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace dpbench {

// --comm: torch.distributed's backend names, plus `local` (the ranks as threads of one process).
enum class Backend {
  local,  // threads of this process, one in-process group (host or device copies)
  mpi,    // one rank per process, started by mpirun (or srun with PMI)
  gloo,   // one CPU rank per process, meeting at rank 0's rendezvous
  nccl,   // GPU ranks: threads, or one per process (mpirun, torchrun, srun, --init-method)
};

// How this process's ranks came to be (LaunchInfo::launcher, the result's config.launcher).
enum class LauncherKind {
  threads,  // every rank a thread of this process
  mpirun,   // one rank per process, world and rank from MPI
  env,      // torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): env://
  tcp,      // --init-method tcp://ADDR:PORT with --rank and --world-size
  file,     // --init-method file://PATH with --rank and --world-size
  srun,     // Slurm's variables (SLURM_PROCID, SLURM_NTASKS, SLURM_STEP_NODELIST, ...)
};

// How an emulated cluster (run/sweep --nodes) starts its ranks: --launcher.
enum class ClusterLauncher {
  env,       // each rank a process given torchrun's variables
  tcp,       // each rank a process given --init-method tcp://NODE0:PORT --rank R (PyTorch's explicit form)
  file,      // the same with --init-method file://PATH, a file in the cluster's private /run
  torchrun,  // one torchrun agent per node, meeting at a rendezvous on node 0
  mpirun,    // Open MPI's mpirun on the switch, its daemons started in the nodes
  srun,      // Slurm: slurmctld on the switch, a slurmd in every node, the job started with srun
};

// The backend named `text`; InputError "--comm X: unknown backend (choose local, mpi, gloo or
// nccl)" otherwise.
Backend parse_backend(std::string_view text);
// The launcher named `text` ("threads", "mpirun", "env", "tcp", "file", "srun"); InputError
// naming `option` and the choices otherwise.
LauncherKind parse_launcher(std::string_view text, std::string_view option);
// The cluster launcher named `text` ("env", "tcp", "file", "torchrun", "mpirun", "srun");
// InputError naming `option` and the choices otherwise.
ClusterLauncher parse_cluster_launcher(std::string_view text, std::string_view option);
// The spellings parse_backend, parse_launcher and parse_cluster_launcher accept.
std::string_view name(Backend backend);
std::string_view name(LauncherKind launcher);
std::string_view name(ClusterLauncher launcher);

// The backend an emulated cluster's ranks meet over: mpi under mpirun, gloo under the others.
Backend cluster_backend(ClusterLauncher launcher);
// Whether the cluster's ranks are given PyTorch's explicit form (--init-method and --rank): tcp, file.
bool explicit_init(ClusterLauncher launcher);

// A backend in JSON is its name (never its number); reading one parses it (InputError when it
// names none).
void to_json(nlohmann::json& j, Backend backend);
void from_json(const nlohmann::json& j, Backend& backend);
void to_json(nlohmann::json& j, ClusterLauncher launcher);

}  // namespace dpbench
