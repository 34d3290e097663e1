// dpbench's vocabulary, parsed in one place: the mode a run trains under (--mode), its transport
// (--transport), the communication backend its ranks talk over (--comm), its device (--device)
// and cuBLAS precision (--precision), the node hierarchy of its collectives (--hierarchy), and the way its processes were started (the result's
// config.launcher, run/sweep --launcher). Every other file compares these enums; only
// core/names.cpp knows their spellings. In JSON each is written as its name, never its number.
#pragma once

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>

#include <concepts>
#include <type_traits>

#include <fmt/core.h>
#include <fmt/ostream.h>
#include <nlohmann/json_fwd.hpp>

namespace dpbench {

// --mode: the synchronisation strategies (train/strategy.hpp; each folder's *_strategy.cpp).
enum class Mode {
  ps,          // DataParallel's flow: rank 0, the root, holds the master state (ps/)
  sharded_ps,  // BytePS-style sharded parameter server (sharded_ps/)
  allreduce,   // DistributedDataParallel: ring all-reduce of gradient buckets (allreduce/)
};

// How a run's gradients and parameters travel (--transport; Strategy::transports).
enum class Transport {
  collective,  // ps, sharded_ps: the backend's collectives (reduce/broadcast, reduce-scatter/all-gather)
  p2p,         // ps, sharded_ps: point-to-point sends between workers and the root or servers
  ring,        // allreduce: the ring all-reduce (its only transport)
};

// --device: where ranks compute.
enum class DeviceKind {
  cpu,
  cuda,
};

// --precision: cuBLAS math on CUDA ranks (CUBLAS_DEFAULT_MATH or CUBLAS_TF32_TENSOR_OP_MATH).
enum class Precision {
  fp32,
  tf32,
};

// --hierarchy: how the collectives meet the nodes (core/hierarchical.hpp).
enum class Hierarchy {
  none,  // the flat collectives over every rank
  node,  // reduce inside each node first, one ring per local rank across the nodes
};

// Whose collective algorithms run over a link (LinkModel::collectives): `ring` (dpbench's own
// and the model of MPI and NCCL) or `gloo` (train/alpha_beta_model.hpp).
enum class CollectiveFamily {
  ring,
  gloo,
};

// --comm: torch.distributed's backend names, plus `local` (the ranks as threads of one process).
enum class Backend {
  local,  // threads of this process, one in-process group (host or device copies)
  mpi,    // one rank per process, started by mpirun (or srun with PMI)
  gloo,   // one CPU rank per process, meeting at rank 0's rendezvous
  nccl,   // GPU ranks: threads, or one per process (mpirun, torchrun, srun, --init-method)
};

// The launcher: how a job's ranks start. A process finds out which started it
// (LaunchInfo::launcher, the result's config.launcher); an emulated cluster (run/sweep --nodes)
// starts its ranks with the one --launcher names (every one but threads).
enum class Launcher {
  threads,   // every rank a thread of this process
  mpirun,    // one rank per process, world and rank from MPI (on a cluster: Open MPI's mpirun on the
             // switch, its daemons started in the nodes)
  env,       // torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): env://
  tcp,       // --init-method tcp://ADDR:PORT with --rank and --world-size (PyTorch's explicit form)
  file,      // --init-method file://PATH with --rank and --world-size
  srun,      // Slurm's variables (SLURM_PROCID, SLURM_NTASKS, ...; on a cluster: slurmctld on the
             // switch, a slurmd in every node, the job started with srun)
  torchrun,  // on a cluster: one torchrun agent per node, meeting at a rendezvous on node 0 (its
             // workers then see torchrun's variables: env)
};

// The mode, transport, device, precision named `text`; InputError naming `option`, `text` and
// the choices otherwise ("--mode bogus: unknown mode (choose ps, sharded_ps or allreduce)").
Mode parse_mode(std::string_view text, std::string_view option = "--mode");
Transport parse_transport(std::string_view text, std::string_view option = "--transport");
DeviceKind parse_device(std::string_view text, std::string_view option = "--device");
// --device as a request: "auto" (nullopt: choose_device picks), "cpu" or "cuda".
std::optional<DeviceKind> parse_device_request(std::string_view text);
Precision parse_precision(std::string_view text, std::string_view option = "--precision");
Hierarchy parse_hierarchy(std::string_view text, std::string_view option = "--hierarchy");
std::string_view name(Mode mode);
std::string_view name(Transport transport);
std::string_view name(DeviceKind device);
std::string_view name(Precision precision);
std::string_view name(Hierarchy hierarchy);
// The family named `text` ("ring", "gloo"); InputError naming `option` otherwise.
CollectiveFamily parse_collective_family(std::string_view text, std::string_view option = "collectives");
std::string_view name(CollectiveFamily family);

// The backend named `text`; InputError "--comm X: unknown backend (choose local, mpi, gloo or
// nccl)" otherwise.
Backend parse_backend(std::string_view text, std::string_view option = "--comm");
// The launcher a process records, named `text` ("threads", "mpirun", "env", "tcp", "file",
// "srun"); InputError naming `option` and the choices otherwise.
Launcher parse_launcher(std::string_view text, std::string_view option);
// The launcher an emulated cluster starts its ranks with, named `text` ("env", "tcp", "file",
// "torchrun", "mpirun", "srun"); InputError naming `option` and the choices otherwise.
Launcher parse_cluster_launcher(std::string_view text, std::string_view option);
// The spellings parse_backend, parse_launcher and parse_cluster_launcher accept.
std::string_view name(Backend backend);
std::string_view name(Launcher launcher);

// Each as its name on a stream (test messages, logs).
std::ostream& operator<<(std::ostream& os, Mode mode);
std::ostream& operator<<(std::ostream& os, Transport transport);
std::ostream& operator<<(std::ostream& os, DeviceKind device);
std::ostream& operator<<(std::ostream& os, Precision precision);
std::ostream& operator<<(std::ostream& os, Hierarchy hierarchy);
std::ostream& operator<<(std::ostream& os, Backend backend);

// In JSON each is its name (never its number); reading one parses it (InputError when it names
// none).
void to_json(nlohmann::json& j, Mode mode);
void from_json(const nlohmann::json& j, Mode& mode);
void to_json(nlohmann::json& j, Transport transport);
void from_json(const nlohmann::json& j, Transport& transport);
void to_json(nlohmann::json& j, DeviceKind device);
void from_json(const nlohmann::json& j, DeviceKind& device);
void to_json(nlohmann::json& j, Precision precision);
void from_json(const nlohmann::json& j, Precision& precision);
void to_json(nlohmann::json& j, Hierarchy hierarchy);
void from_json(const nlohmann::json& j, Hierarchy& hierarchy);
void to_json(nlohmann::json& j, CollectiveFamily family);
void from_json(const nlohmann::json& j, CollectiveFamily& family);
void to_json(nlohmann::json& j, Backend backend);
void from_json(const nlohmann::json& j, Backend& backend);
void to_json(nlohmann::json& j, Launcher launcher);

}  // namespace dpbench

// fmt, iostreams and GoogleTest print each as its name: fmt::format("{}", Mode::ps) is "ps", and a
// failed EXPECT_EQ on two modes names them. (Not in nvcc's front end, which does not take the
// constrained templates; .cu files print name(value).)
#ifndef __CUDACC__
namespace dpbench {
template <typename E>
requires std::is_enum_v<E> && requires(E e) {
  { name(e) } -> std::same_as<std::string_view>;
}
std::ostream& operator<<(std::ostream& os, E value) { return os << name(value); }
}  // namespace dpbench

template <typename E>
requires std::is_enum_v<E> && requires(E e) {
  { dpbench::name(e) } -> std::same_as<std::string_view>;
}
struct fmt::formatter<E, char> : fmt::ostream_formatter {};
#endif
