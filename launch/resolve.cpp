#include "launch/resolve.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
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
  info.launcher = Launcher::mpirun;
  info.world_size = MpiRuntime::size();
  info.rank = MpiRuntime::rank();
  info.local_rank = MpiRuntime::local_rank();
  info.ranks_on_this_node = MpiRuntime::local_size();
  if (requested > 0 && requested != info.world_size) {
    throw InputError(fmt::format("world size mismatch: --ranks {} but the launcher started {} process{}", requested,
                                 info.world_size, info.world_size == 1 ? "" : "es"));
  }
  if (env_world && *env_world != info.world_size) {
    throw InputError(fmt::format("world size mismatch: WORLD_SIZE={} but the launcher started {} processes", *env_world,
                                 info.world_size));
  }
  if (env_rank && *env_rank != info.rank) {
    throw InputError(fmt::format("RANK={}: differs from this process's MPI rank {}", *env_rank, info.rank));
  }
  return info;
}
// One rank per process, started by the user's launcher with torchrun-style variables: ranks meet
// at MASTER_ADDR:MASTER_PORT.
LaunchInfo env_launch(int requested, int world, int rank, const std::optional<int>& env_local, int port,
                      const std::string& master_addr) {
  if (requested > 0 && requested != world) {
    throw InputError(fmt::format("world size mismatch: --ranks {} but WORLD_SIZE={}", requested, world));
  }
  const auto local_world = env_int("LOCAL_WORLD_SIZE");
  if (local_world && (*local_world < 1 || *local_world > world)) {
    throw InputError(fmt::format("LOCAL_WORLD_SIZE={}: out of range for WORLD_SIZE={}", *local_world, world));
  }
  LaunchInfo info;
  info.multi_process = true;
  info.launcher = Launcher::env;
  info.world_size = world;
  info.rank = rank;
  info.local_rank = env_local.value_or(rank);
  info.ranks_on_this_node = local_world.value_or(world);
  if (info.local_rank >= info.ranks_on_this_node) {
    throw InputError(
        fmt::format("LOCAL_RANK={}: out of range for {} ranks on this node", info.local_rank, info.ranks_on_this_node));
  }
  info.master_addr = master_addr;
  info.master_port = port;
  // Under torchrun (it sets TORCHELASTIC_RUN_ID) the agent's own store may already listen on
  // MASTER_PORT: dpbench's rendezvous takes the next port, or DPBENCH_MASTER_PORT when set.
  if (const auto own = env_int("DPBENCH_MASTER_PORT")) {
    if (*own < 1 || *own > 65535)
      throw InputError(fmt::format("DPBENCH_MASTER_PORT={}: not a TCP port (1..65535)", *own));
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

// --comm nccl trains GPU ranks: InputError otherwise.
void check_nccl(DeviceKind device) {
  if (device != DeviceKind::cuda) {
    throw InputError("--comm nccl: NCCL moves GPU buffers; train on GPUs with --device cuda "
                     "(or use --comm local or --comm mpi on CPU)");
  }
}

// --comm nccl: a torchrun-style launch (WORLD_SIZE > 1 without mpirun), mpirun's, or threads.
LaunchInfo nccl_launch(int requested, DeviceKind device, const LaunchEnv& env) {
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
  check_nccl(device);
  if (torchrun_style) return env_launch(requested, *env_world, *env_rank, env_local, port, std::getenv("MASTER_ADDR"));
  if (mpi_launched()) return mpi_launch(requested, env_world, env_rank);
  LaunchInfo info;
  info.launcher = Launcher::threads;
  info.world_size = requested > 0 ? requested : 4;
  info.ranks_on_this_node = info.world_size;
  return info;
}

// --comm gloo trains CPU ranks, in a build with gloo: InputError otherwise.
void check_gloo(DeviceKind device) {
  if (device == DeviceKind::cuda)
    throw InputError("--comm gloo: moves host buffers; with --device cuda use --comm nccl");
  if (!gloo_built()) {
    throw InputError("--comm gloo: this build has no gloo (apt-get install libgloo-dev, then rebuild)");
  }
}

// --comm gloo: one CPU rank per process, started by torchrun (or by hand with its variables).
LaunchInfo gloo_launch(int requested, DeviceKind device, const LaunchEnv& env) {
  check_gloo(device);
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
  return env_launch(requested, *env.world, *env.rank, env.local, port, std::getenv("MASTER_ADDR"));
}

// --comm mpi: one rank per process, started by mpirun (or srun); --ranks 1 runs one rank here.
LaunchInfo mpi_comm_launch(int requested, DeviceKind device, const LaunchEnv& env) {
  const auto& env_world = env.world;
  const auto& env_rank = env.rank;
  if (device == DeviceKind::cuda) {
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

// A TCP port given as text: InputError naming `what` unless it is an integer in 1..65535.
int parse_port(const std::string& text, const std::string& what) {
  std::size_t used = 0;
  int port = 0;
  try {
    port = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || port < 1 || port > 65535) {
    throw InputError(fmt::format("{}: the port is not a TCP port (1..65535)", what));
  }
  return port;
}

// --init-method env://: PyTorch's default; --rank and --world-size, when given, win over RANK and
// WORLD_SIZE.
LaunchInfo env_init_launch(int requested, const ExplicitInit& init, const LaunchEnv& env) {
  const int world = requested > 0 ? requested : env.world.value_or(0);
  const int rank = init.rank >= 0 ? init.rank : env.rank.value_or(-1);
  if (world < 1) throw InputError("--init-method env://: WORLD_SIZE is unset; set it or give --world-size N");
  if (rank < 0) throw InputError("--init-method env://: RANK is unset; set it or give --rank R");
  if (rank >= world) throw InputError(fmt::format("rank {}: out of range for a world size of {}", rank, world));
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      throw InputError(fmt::format("--init-method env://: {} is unset (rank 0's address and port), or use "
                                   "--init-method tcp://ADDR:PORT",
                                   name));
    }
  }
  const int port = parse_port(std::getenv("MASTER_PORT"), fmt::format("MASTER_PORT={}", std::getenv("MASTER_PORT")));
  return env_launch(world, world, rank, env.local, port, std::getenv("MASTER_ADDR"));
}

// One rank per process of an explicit launch (--init-method tcp:// or file://, with --rank and
// --world-size): its place on its node from LOCAL_RANK and LOCAL_WORLD_SIZE (else the only rank of
// its node). InputError for a missing --rank or --world-size, or a local rank out of range.
LaunchInfo explicit_rank(int requested, const ExplicitInit& init, const LaunchEnv& env, Launcher kind) {
  const std::string& url = init.init_method;
  if (init.rank < 0 || requested < 1) {
    throw InputError(fmt::format("--init-method {}: give --rank R and --world-size N (every process its own "
                                 "rank, all the same world size)",
                                 url));
  }
  const auto local_world = env_int("LOCAL_WORLD_SIZE");
  LaunchInfo info;
  info.multi_process = true;
  info.launcher = kind;
  info.world_size = requested;
  info.rank = init.rank;
  info.local_rank = env.local.value_or(0);
  info.ranks_on_this_node = local_world.value_or(1);
  if (info.ranks_on_this_node < 1 || info.ranks_on_this_node > info.world_size) {
    throw InputError(
        fmt::format("LOCAL_WORLD_SIZE={}: out of range for --world-size {}", info.ranks_on_this_node, info.world_size));
  }
  if (info.local_rank >= info.ranks_on_this_node) {
    throw InputError(fmt::format("LOCAL_RANK={}: out of range for {} rank{} on this node", info.local_rank,
                                 info.ranks_on_this_node, info.ranks_on_this_node == 1 ? "" : "s"));
  }
  env_output_rank = info.rank;
  return info;
}

// --init-method tcp://ADDR:PORT with --rank and --world-size: rank 0 listens on ADDR:PORT.
LaunchInfo tcp_init_launch(int requested, const ExplicitInit& init, const LaunchEnv& env) {
  const std::string& url = init.init_method;
  const std::string hostport = url.substr(std::string("tcp://").size());
  const std::size_t colon = hostport.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw InputError(fmt::format("--init-method {}: expected tcp://ADDR:PORT (rank 0's address and port)", url));
  }
  const int port = parse_port(hostport.substr(colon + 1), "--init-method " + url);
  LaunchInfo info = explicit_rank(requested, init, env, Launcher::tcp);
  info.master_addr = hostport.substr(0, colon);
  info.master_port = port;
  return info;
}

// --init-method file://PATH with --rank and --world-size: the ranks meet through PATH
// (launch/file_init.hpp).
LaunchInfo file_init_launch(int requested, const ExplicitInit& init, const LaunchEnv& env) {
  const std::string path = init.init_method.substr(std::string("file://").size());
  if (path.empty() || path.back() == '/') {
    throw InputError(fmt::format("--init-method {}: expected file://PATH (a file on a filesystem every rank "
                                 "sees, e.g. file:///shared/job42.init)",
                                 init.init_method));
  }
  LaunchInfo info = explicit_rank(requested, init, env, Launcher::file);
  // Rank 0 writes the file and the others read it: its directory must be there before any work.
  const std::filesystem::path dir = std::filesystem::path(path).has_parent_path()
                                        ? std::filesystem::path(path).parent_path()
                                        : std::filesystem::path(".");
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw InputError(fmt::format("--init-method {}: the directory {} does not exist", init.init_method, dir.string()));
  }
  if (::access(dir.c_str(), (info.rank == 0 ? W_OK : R_OK) | X_OK) != 0) {
    throw InputError(fmt::format("--init-method {}: cannot {} in {}: {}", init.init_method,
                                 info.rank == 0 ? "write" : "read", dir.string(), std::strerror(errno)));
  }
  info.init_file = path;
  return info;
}

// The first set one of Slurm's variables `names`, or nullptr.
const char* slurm_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

// One rank per process started by srun: Slurm's variables in place of torchrun's (launch.hpp).
LaunchInfo srun_launch(int requested) {
  const auto step_tasks = env_int("SLURM_STEP_NUM_TASKS");
  const auto world = step_tasks ? step_tasks : env_int("SLURM_NTASKS");
  const auto rank = env_int("SLURM_PROCID");
  if (!world || *world < 1) throw InputError("srun: SLURM_STEP_NUM_TASKS and SLURM_NTASKS are unset or below 1");
  if (!rank) throw InputError("srun: SLURM_PROCID is empty");
  if (*rank < 0 || *rank >= *world) {
    throw InputError(fmt::format("SLURM_PROCID={}: out of range for {} tasks", *rank, *world));
  }
  if (requested > 0 && requested != *world) {
    throw InputError(fmt::format("world size mismatch: --ranks {} but srun started {} tasks", requested, *world));
  }
  const char* nodes = slurm_env({"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"});
  if (nodes == nullptr) throw InputError("srun: SLURM_STEP_NODELIST and SLURM_JOB_NODELIST are unset (rank 0's node)");
  LaunchInfo info;
  info.multi_process = true;
  info.launcher = Launcher::srun;
  info.world_size = *world;
  info.rank = *rank;
  info.local_rank = env_int("SLURM_LOCALID").value_or(0);
  const char* per_node = slurm_env({"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"});
  info.ranks_on_this_node = per_node != nullptr ? slurm_tasks_on_node(per_node, env_int("SLURM_NODEID").value_or(0))
                                                : 1;
  if (info.local_rank < 0 || info.local_rank >= info.ranks_on_this_node) {
    throw InputError(fmt::format("SLURM_LOCALID={}: out of range for {} task{} on this node", info.local_rank,
                                 info.ranks_on_this_node, info.ranks_on_this_node == 1 ? "" : "s"));
  }
  info.master_addr = slurm_first_host(nodes);
  if (const char* port = std::getenv("MASTER_PORT"); port != nullptr && *port != '\0') {
    info.master_port = parse_port(port, fmt::format("MASTER_PORT={}", port));
  } else {
    const char* job = slurm_env({"SLURM_JOB_ID", "SLURM_JOBID"});
    if (job == nullptr) throw InputError("srun: SLURM_JOB_ID and MASTER_PORT are unset (the port rank 0 listens on)");
    const std::string id(job);
    if (id.find_first_not_of("0123456789") != std::string::npos) {
      throw InputError(fmt::format("SLURM_JOB_ID={}: not a job number; set MASTER_PORT", id));
    }
    info.master_port = 15000 + std::stoi(id.substr(id.size() > 4 ? id.size() - 4 : 0));
  }
  env_output_rank = info.rank;
  return info;
}

// --init-method or --rank: PyTorch's explicit form (ExplicitInit), over gloo or NCCL.
LaunchInfo explicit_launch(Backend comm, int requested, DeviceKind device, const ExplicitInit& init,
                           const LaunchEnv& env) {
  const std::string url = init.init_method.empty() ? "env://" : init.init_method;
  if (comm != Backend::gloo && comm != Backend::nccl) {
    throw InputError(fmt::format("--init-method {}: one rank per process over gloo (--comm gloo) or NCCL "
                                 "(--comm nccl); --comm {} starts its ranks {}",
                                 url, name(comm),
                                 comm == Backend::local ? "as threads of one process" : "with mpirun"));
  }
  if (comm == Backend::gloo) check_gloo(device);
  if (comm == Backend::nccl) check_nccl(device);
  if (init.rank >= 0 && requested > 0 && init.rank >= requested) {
    throw InputError(
        fmt::format("--rank {}: out of range for --world-size {} (0..{})", init.rank, requested, requested - 1));
  }
  if (url == "env://") return env_init_launch(requested, init, env);
  if (url.rfind("tcp://", 0) == 0) return tcp_init_launch(requested, init, env);
  if (url.rfind("file://", 0) == 0) return file_init_launch(requested, init, env);
  throw InputError(fmt::format("--init-method {}: expected env://, tcp://ADDR:PORT or file://PATH", url));
}

}  // namespace

std::string slurm_first_host(const std::string& host_list) {
  std::string host;
  std::size_t i = 0;
  while (i < host_list.size() && host_list[i] != ',') {
    if (host_list[i] != '[') {
      host += host_list[i++];
      continue;
    }
    const std::size_t close = host_list.find(']', i);
    if (close == std::string::npos) throw InputError(fmt::format("host list {}: unclosed '['", host_list));
    const std::string range = host_list.substr(i + 1, close - i - 1);
    const std::string first = range.substr(0, range.find_first_of(",-"));
    if (first.empty()) throw InputError(fmt::format("host list {}: empty range", host_list));
    host += first;
    i = close + 1;
  }
  if (host.empty()) throw InputError(fmt::format("host list '{}': no host", host_list));
  return host;
}

int slurm_tasks_on_node(const std::string& tasks_per_node, int node) {
  static const std::regex item(R"(^([0-9]+)(\(x([0-9]+)\))?$)");
  int first = 0;  // the first node of the current item
  std::size_t pos = 0;
  while (pos <= tasks_per_node.size()) {
    const std::size_t end = std::min(tasks_per_node.find(',', pos), tasks_per_node.size());
    std::smatch m;
    const std::string part = tasks_per_node.substr(pos, end - pos);
    if (!std::regex_match(part, m, item)) {
      throw InputError(fmt::format("tasks per node {}: expected N or N(xK) items separated by commas", tasks_per_node));
    }
    const int count = m[3].matched ? std::stoi(m[3].str()) : 1;
    if (node < first + count) return std::stoi(m[1].str());
    first += count;
    pos = end + 1;
  }
  throw InputError(fmt::format("SLURM_NODEID={}: beyond the {} node{} of tasks per node {}", node, first,
                               first == 1 ? "" : "s", tasks_per_node));
}

LaunchInfo resolve_launch(Backend comm, int requested, DeviceKind device, const ExplicitInit& init) {
  const auto env_world = env_int("WORLD_SIZE");
  const auto env_rank = env_int("RANK");
  const auto env_local = env_int("LOCAL_RANK");
  if (init.rank < -1) throw InputError(fmt::format("--rank {}: must be >= 0", init.rank));
  if (!init.init_method.empty() || init.rank >= 0) {
    if (env_local && *env_local < 0) throw InputError(fmt::format("LOCAL_RANK={}: must be >= 0", *env_local));
    return explicit_launch(comm, requested, device, init, LaunchEnv{env_world, env_rank, env_local});
  }
  if (env_world && *env_world < 1) throw InputError(fmt::format("WORLD_SIZE={}: must be at least 1", *env_world));
  if (env_rank && (*env_rank < 0 || *env_rank >= env_world.value_or(requested > 0 ? requested : 1))) {
    throw InputError(fmt::format("RANK={}: out of range for a world size of {}", *env_rank,
                                 env_world.value_or(requested > 0 ? requested : 1)));
  }
  if (env_local && *env_local < 0) throw InputError(fmt::format("LOCAL_RANK={}: must be >= 0", *env_local));

  // srun started this process (and not mpirun, whose MPI is --comm mpi's): Slurm's variables.
  const bool srun_started = !env_world && !env_rank && std::getenv("SLURM_PROCID") != nullptr && !mpi_launched();
  const std::optional<int> srun_tasks = srun_started ? env_int("SLURM_STEP_NUM_TASKS") : std::nullopt;
  if (comm == Backend::local && srun_tasks && *srun_tasks > 1) {
    throw InputError(fmt::format("SLURM_STEP_NUM_TASKS={}: --comm local runs every rank as a thread of one process; "
                                 "with srun use --comm gloo (CPU) or --comm nccl (GPU), one task per rank",
                                 *srun_tasks));
  }
  if (srun_started && (comm == Backend::gloo || (comm == Backend::nccl && srun_tasks.value_or(1) > 1))) {
    if (comm == Backend::gloo) check_gloo(device);
    if (comm == Backend::nccl) check_nccl(device);
    return srun_launch(requested);
  }

  LaunchInfo info;
  if (comm == Backend::local) {
    if (env_world && *env_world > 1) {
      throw InputError(fmt::format("WORLD_SIZE={}: --comm local runs every rank as a thread of one "
                                   "process; start several processes with mpirun and --comm mpi",
                                   *env_world));
    }
    info.launcher = Launcher::threads;
    info.world_size = requested > 0 ? requested : 4;
    info.ranks_on_this_node = info.world_size;
    return info;
  }

  const LaunchEnv env{env_world, env_rank, env_local};
  if (comm == Backend::nccl) return nccl_launch(requested, device, env);
  if (comm == Backend::gloo) return gloo_launch(requested, device, env);
  return mpi_comm_launch(requested, device, env);
}

ProcessIdentity process_identity(const LaunchInfo& launch) {
  ProcessIdentity id;
  if (!launch.master_addr.empty() || !launch.init_file.empty()) {
    id.rank = launch.rank;
    id.init_file = launch.init_file;
    id.master_addr = launch.master_addr;
    id.master_port = launch.master_port;
    id.local_rank = launch.local_rank;
  }
  if (launch.multi_process) id.ranks_on_this_node = launch.ranks_on_this_node;
  return id;
}

bool is_output_process() {
  if (env_output_rank > 0) return false;
  return !MpiRuntime::active() || MpiRuntime::rank() == 0;
}

Backend cluster_backend(Launcher launcher) { return launcher == Launcher::mpirun ? Backend::mpi : Backend::gloo; }
bool explicit_init(Launcher launcher) { return launcher == Launcher::tcp || launcher == Launcher::file; }

}  // namespace dpbench
