#include "core/launch.hpp"

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/mpi_comm.hpp"

namespace dpbench {

namespace {
// An integer environment variable; InputError when set but not an integer.
std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0') throw InputError(fmt::format("{}={}: not an integer", name, v));
  return static_cast<int>(x);
}
}  // namespace

namespace {
// This process's rank in a torchrun-style launch, once resolve_launch has seen one (-1: none).
int env_output_rank = -1;

// One rank per process, started by mpirun/srun: world size and ranks from MPI.
LaunchInfo mpi_launch(int requested, const std::optional<int>& env_world, const std::optional<int>& env_rank) {
  MpiRuntime::init();  // InputError when the build has no MPI
  LaunchInfo info;
  info.multi_process = true;
  info.launcher = "mpirun";
  info.world_size = MpiRuntime::size();
  info.rank = MpiRuntime::rank();
  info.local_rank = MpiRuntime::local_rank();
  info.ranks_on_this_node = MpiRuntime::local_size();
  if (requested > 0 && requested != info.world_size) {
    throw InputError(fmt::format("world size mismatch: --ranks {} but the launcher started {} process{}",
                                 requested, info.world_size, info.world_size == 1 ? "" : "es"));
  }
  if (env_world && *env_world != info.world_size) {
    throw InputError(fmt::format("world size mismatch: WORLD_SIZE={} but the launcher started {} processes",
                                 *env_world, info.world_size));
  }
  if (env_rank && *env_rank != info.rank) {
    throw InputError(fmt::format("RANK={}: differs from this process's MPI rank {}", *env_rank, info.rank));
  }
  return info;
}
// One rank per process, started by the user's launcher with torchrun-style variables: ranks meet
// at MASTER_ADDR:MASTER_PORT.
LaunchInfo env_launch(int requested, int world, int rank, const std::optional<int>& env_local, int port) {
  if (requested > 0 && requested != world) {
    throw InputError(fmt::format("world size mismatch: --ranks {} but WORLD_SIZE={}", requested, world));
  }
  const auto local_world = env_int("LOCAL_WORLD_SIZE");
  if (local_world && (*local_world < 1 || *local_world > world)) {
    throw InputError(fmt::format("LOCAL_WORLD_SIZE={}: out of range for WORLD_SIZE={}", *local_world, world));
  }
  LaunchInfo info;
  info.multi_process = true;
  info.launcher = "env";
  info.world_size = world;
  info.rank = rank;
  info.local_rank = env_local.value_or(rank);
  info.ranks_on_this_node = local_world.value_or(world);
  if (info.local_rank >= info.ranks_on_this_node) {
    throw InputError(fmt::format("LOCAL_RANK={}: out of range for {} ranks on this node", info.local_rank,
                                 info.ranks_on_this_node));
  }
  info.master_addr = std::getenv("MASTER_ADDR");
  info.master_port = port;
  // Under torchrun (it sets TORCHELASTIC_RUN_ID) the agent's own store may already listen on
  // MASTER_PORT: dpbench's rendezvous takes the next port, or DPBENCH_MASTER_PORT when set.
  if (const auto own = env_int("DPBENCH_MASTER_PORT")) {
    if (*own < 1 || *own > 65535) throw InputError(fmt::format("DPBENCH_MASTER_PORT={}: not a TCP port (1..65535)", *own));
    info.master_port = *own;
  } else if (std::getenv("TORCHELASTIC_RUN_ID") != nullptr) {
    if (port == 65535) throw InputError("MASTER_PORT=65535: under torchrun dpbench meets on MASTER_PORT + 1");
    info.master_port = port + 1;
  }
  env_output_rank = rank;
  return info;
}

}  // namespace

namespace {

// The launch environment's torchrun variables (WORLD_SIZE, RANK, LOCAL_RANK), as resolve_launch
// has checked them.
struct LaunchEnv {
  std::optional<int> world, rank, local;
};

// --comm nccl: a torchrun-style launch (WORLD_SIZE > 1 without mpirun), mpirun's, or threads.
LaunchInfo nccl_launch(int requested, const std::string& device, const LaunchEnv& env) {
  const auto& env_world = env.world;
  const auto& env_rank = env.rank;
  const auto& env_local = env.local;
  const bool torchrun_style = env_world && *env_world > 1 && !mpi_launched();
  int port = 0;
  if (torchrun_style) {
    for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK"}) {
      const char* v = std::getenv(name);
      if (v == nullptr || *v == '\0') {
        throw InputError(fmt::format("{}: unset, but WORLD_SIZE={} without mpirun is a torchrun-style launch, "
                                     "which needs RANK, MASTER_ADDR and MASTER_PORT (or launch with mpirun)",
                                     name, *env_world));
      }
    }
    port = *env_int("MASTER_PORT");
    if (port < 1 || port > 65535) throw InputError(fmt::format("MASTER_PORT={}: not a TCP port (1..65535)", port));
  }
  if (device != "cuda") {
    throw InputError("--comm nccl: NCCL moves GPU buffers; train on GPUs with --device cuda "
                     "(or use --comm local or --comm mpi on CPU)");
  }
  if (torchrun_style) return env_launch(requested, *env_world, *env_rank, env_local, port);
  if (mpi_launched()) return mpi_launch(requested, env_world, env_rank);
  LaunchInfo info;
  info.launcher = "threads";
  info.world_size = requested > 0 ? requested : 4;
  info.ranks_on_this_node = info.world_size;
  return info;
}

// --comm gloo: one CPU rank per process, started by torchrun (or by hand with its variables).
LaunchInfo gloo_launch(int requested, const std::string& device, const LaunchEnv& env) {
  if (device == "cuda") throw InputError("--comm gloo: moves host buffers; with --device cuda use --comm nccl");
  if (!gloo_built()) {
    throw InputError("--comm gloo: this build has no gloo (apt-get install libgloo-dev, then rebuild)");
  }
  for (const char* name : {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      throw InputError(fmt::format("--comm gloo: {} is unset; start the ranks with torchrun --no_python (or set "
                                   "RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT)",
                                   name));
    }
  }
  const int port = *env_int("MASTER_PORT");
  if (port < 1 || port > 65535) throw InputError(fmt::format("MASTER_PORT={}: not a TCP port (1..65535)", port));
  return env_launch(requested, *env.world, *env.rank, env.local, port);
}

// --comm mpi: one rank per process, started by mpirun (or srun); --ranks 1 runs one rank here.
LaunchInfo mpi_comm_launch(int requested, const std::string& device, const LaunchEnv& env) {
  const auto& env_world = env.world;
  const auto& env_rank = env.rank;
  if (device == "cuda") {
    throw InputError("--comm mpi: moves host buffers; with --device cuda use --comm nccl or --comm local");
  }
  if (!mpi_launched() && env_world && *env_world > 1) {
    throw InputError(fmt::format("WORLD_SIZE={}: --comm mpi starts its ranks with mpirun -np {} "
                                 "(or srun); this process was not started by either",
                                 *env_world, *env_world));
  }
  if (mpi_built() && !mpi_launched() && requested != 1) {  // without MPI, mpi_launch says so
    throw InputError("--comm mpi: start the ranks with mpirun -np N dpbench run --comm mpi (this process was "
                     "not started by mpirun; --ranks 1 runs one rank here)");
  }
  return mpi_launch(requested, env_world, env_rank);
}

}  // namespace

LaunchInfo resolve_launch(const std::string& comm, int requested, const std::string& device) {
  if (comm != "local" && comm != "mpi" && comm != "nccl" && comm != "gloo") {
    throw InputError(fmt::format("--comm {}: unknown backend (choose local, mpi, gloo or nccl)", comm));
  }
  const auto env_world = env_int("WORLD_SIZE");
  const auto env_rank = env_int("RANK");
  const auto env_local = env_int("LOCAL_RANK");
  if (env_world && *env_world < 1) throw InputError(fmt::format("WORLD_SIZE={}: must be at least 1", *env_world));
  if (env_rank && (*env_rank < 0 || *env_rank >= env_world.value_or(requested > 0 ? requested : 1))) {
    throw InputError(fmt::format("RANK={}: out of range for a world size of {}", *env_rank,
                                 env_world.value_or(requested > 0 ? requested : 1)));
  }
  if (env_local && *env_local < 0) throw InputError(fmt::format("LOCAL_RANK={}: must be >= 0", *env_local));

  LaunchInfo info;
  if (comm == "local") {
    if (env_world && *env_world > 1) {
      throw InputError(fmt::format("WORLD_SIZE={}: --comm local runs every rank as a thread of one "
                                   "process; start several processes with mpirun and --comm mpi",
                                   *env_world));
    }
    info.launcher = "threads";
    info.world_size = requested > 0 ? requested : 4;
    info.ranks_on_this_node = info.world_size;
    return info;
  }

  const LaunchEnv env{env_world, env_rank, env_local};
  if (comm == "nccl") return nccl_launch(requested, device, env);
  if (comm == "gloo") return gloo_launch(requested, device, env);
  return mpi_comm_launch(requested, device, env);
}

bool is_output_process() {
  if (env_output_rank > 0) return false;
  return !MpiRuntime::active() || MpiRuntime::rank() == 0;
}

}  // namespace dpbench
