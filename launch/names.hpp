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

// The backend named `text`; InputError "--comm X: unknown backend (choose local, mpi, gloo or
// nccl)" otherwise.
Backend parse_backend(std::string_view text);
// The launcher named `text` ("threads", "mpirun", "env", "tcp", "file", "srun"); InputError
// naming `option` and the choices otherwise.
LauncherKind parse_launcher(std::string_view text, std::string_view option);
// The spellings parse_backend and parse_launcher accept.
std::string_view name(Backend backend);
std::string_view name(LauncherKind launcher);

// A backend in JSON is its name (never its number); reading one parses it (InputError when it
// names none).
void to_json(nlohmann::json& j, Backend backend);
void from_json(const nlohmann::json& j, Backend& backend);

}  // namespace dpbench
