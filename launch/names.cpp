#include "launch/names.hpp"

#include <array>
#include <optional>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dpbench {

namespace {
constexpr std::array<std::pair<Backend, std::string_view>, 4> kBackends{{
    {Backend::local, "local"}, {Backend::mpi, "mpi"}, {Backend::gloo, "gloo"}, {Backend::nccl, "nccl"}}};
constexpr std::array<std::pair<LauncherKind, std::string_view>, 6> kLaunchers{{{LauncherKind::threads, "threads"},
                                                                          {LauncherKind::mpirun, "mpirun"},
                                                                          {LauncherKind::env, "env"},
                                                                          {LauncherKind::tcp, "tcp"},
                                                                          {LauncherKind::file, "file"},
                                                                          {LauncherKind::srun, "srun"}}};
constexpr std::array<std::pair<ClusterLauncher, std::string_view>, 6> kClusterLaunchers{{
    {ClusterLauncher::env, "env"},
    {ClusterLauncher::tcp, "tcp"},
    {ClusterLauncher::file, "file"},
    {ClusterLauncher::torchrun, "torchrun"},
    {ClusterLauncher::mpirun, "mpirun"},
    {ClusterLauncher::srun, "srun"}}};

template <typename Table, typename E>
std::string_view lookup(const Table& table, E value) {
  for (const auto& [v, text] : table) {
    if (v == value) return text;
  }
  return "?";
}

// The value spelled `text` in `table`, or nullopt.
template <typename Table>
auto find_spelling(const Table& table, std::string_view text) -> std::optional<typename Table::value_type::first_type> {
  for (const auto& [v, spelling] : table) {
    if (spelling == text) return v;
  }
  return std::nullopt;
}
}  // namespace

Backend parse_backend(std::string_view text) {
  if (const auto v = find_spelling(kBackends, text)) return *v;
  throw InputError(fmt::format("--comm {}: unknown backend (choose local, mpi, gloo or nccl)", text));
}

LauncherKind parse_launcher(std::string_view text, std::string_view option) {
  if (const auto v = find_spelling(kLaunchers, text)) return *v;
  throw InputError(
      fmt::format("{} {}: unknown launcher (choose threads, mpirun, env, tcp, file or srun)", option, text));
}

ClusterLauncher parse_cluster_launcher(std::string_view text, std::string_view option) {
  if (const auto v = find_spelling(kClusterLaunchers, text)) return *v;
  throw InputError(fmt::format("{} {}: expected env, tcp, file, torchrun, mpirun or srun", option, text));
}

std::string_view name(Backend backend) { return lookup(kBackends, backend); }
std::string_view name(LauncherKind launcher) { return lookup(kLaunchers, launcher); }
std::string_view name(ClusterLauncher launcher) { return lookup(kClusterLaunchers, launcher); }

Backend cluster_backend(ClusterLauncher launcher) {
  return launcher == ClusterLauncher::mpirun ? Backend::mpi : Backend::gloo;
}
bool explicit_init(ClusterLauncher launcher) {
  return launcher == ClusterLauncher::tcp || launcher == ClusterLauncher::file;
}

void to_json(nlohmann::json& j, Backend backend) { j = std::string(name(backend)); }
void from_json(const nlohmann::json& j, Backend& backend) { backend = parse_backend(j.get<std::string>()); }
void to_json(nlohmann::json& j, ClusterLauncher launcher) { j = std::string(name(launcher)); }

}  // namespace dpbench
