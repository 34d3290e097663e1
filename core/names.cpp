#include "core/names.hpp"

#include <array>
#include <optional>
#include <ostream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace dpbench {

namespace {
constexpr std::array<std::pair<Mode, std::string_view>, 3> kModes{
    {{Mode::ps, "ps"}, {Mode::sharded_ps, "sharded_ps"}, {Mode::allreduce, "allreduce"}}};
constexpr std::array<std::pair<Transport, std::string_view>, 3> kTransports{
    {{Transport::collective, "collective"}, {Transport::p2p, "p2p"}, {Transport::ring, "ring"}}};
constexpr std::array<std::pair<DeviceKind, std::string_view>, 2> kDevices{
    {{DeviceKind::cpu, "cpu"}, {DeviceKind::cuda, "cuda"}}};
constexpr std::array<std::pair<Precision, std::string_view>, 2> kPrecisions{
    {{Precision::fp32, "fp32"}, {Precision::tf32, "tf32"}}};
constexpr std::array<std::pair<Hierarchy, std::string_view>, 2> kHierarchies{
    {{Hierarchy::none, "none"}, {Hierarchy::node, "node"}}};
constexpr std::array<std::pair<CollectiveFamily, std::string_view>, 2> kFamilies{
    {{CollectiveFamily::ring, "ring"}, {CollectiveFamily::gloo, "gloo"}}};
constexpr std::array<std::pair<Backend, std::string_view>, 4> kBackends{
    {{Backend::local, "local"}, {Backend::mpi, "mpi"}, {Backend::gloo, "gloo"}, {Backend::nccl, "nccl"}}};
// The launchers a process records, then torchrun, which only an emulated cluster starts.
constexpr std::array<std::pair<Launcher, std::string_view>, 7> kLaunchers{{{Launcher::threads, "threads"},
                                                                           {Launcher::mpirun, "mpirun"},
                                                                           {Launcher::env, "env"},
                                                                           {Launcher::tcp, "tcp"},
                                                                           {Launcher::file, "file"},
                                                                           {Launcher::srun, "srun"},
                                                                           {Launcher::torchrun, "torchrun"}}};

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

// "a, b or c": the spellings of `table`, for an error's list of choices.
template <typename Table>
std::string choices(const Table& table) {
  std::string out;
  for (std::size_t i = 0; i < table.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == table.size() ? " or " : ", ");
    out += table[i].second;
  }
  return out;
}

// The value spelled `text` in `table`; InputError "<option> <text>: unknown <what> (choose ...)".
template <typename Table>
auto parse_in(const Table& table, std::string_view text, std::string_view option, std::string_view what) {
  if (const auto v = find_spelling(table, text)) return *v;
  throw InputError(fmt::format("{} {}: unknown {} (choose {})", option, text, what, choices(table)));
}
}  // namespace

Mode parse_mode(std::string_view text, std::string_view option) { return parse_in(kModes, text, option, "mode"); }
Transport parse_transport(std::string_view text, std::string_view option) {
  return parse_in(kTransports, text, option, "transport");
}
DeviceKind parse_device(std::string_view text, std::string_view option) {
  return parse_in(kDevices, text, option, "device");
}
std::optional<DeviceKind> parse_device_request(std::string_view text) {
  if (text == "auto") return std::nullopt;
  if (const auto v = find_spelling(kDevices, text)) return *v;
  throw InputError(fmt::format("--device {}: unknown device (choose auto, cpu or cuda)", text));
}
Precision parse_precision(std::string_view text, std::string_view option) {
  return parse_in(kPrecisions, text, option, "precision");
}
std::string_view name(Mode mode) { return lookup(kModes, mode); }
std::string_view name(Transport transport) { return lookup(kTransports, transport); }
std::string_view name(DeviceKind device) { return lookup(kDevices, device); }
std::string_view name(Precision precision) { return lookup(kPrecisions, precision); }
Hierarchy parse_hierarchy(std::string_view text, std::string_view option) {
  return parse_in(kHierarchies, text, option, "hierarchy");
}
std::string_view name(Hierarchy hierarchy) { return lookup(kHierarchies, hierarchy); }
CollectiveFamily parse_collective_family(std::string_view text, std::string_view option) {
  return parse_in(kFamilies, text, option, "collectives");
}
std::string_view name(CollectiveFamily family) { return lookup(kFamilies, family); }

Backend parse_backend(std::string_view text, std::string_view option) {
  return parse_in(kBackends, text, option, "backend");
}

Launcher parse_launcher(std::string_view text, std::string_view option) {
  if (const auto v = find_spelling(kLaunchers, text); v && *v != Launcher::torchrun) return *v;
  throw InputError(
      fmt::format("{} {}: unknown launcher (choose threads, mpirun, env, tcp, file or srun)", option, text));
}

Launcher parse_cluster_launcher(std::string_view text, std::string_view option) {
  if (const auto v = find_spelling(kLaunchers, text); v && *v != Launcher::threads) return *v;
  throw InputError(fmt::format("{} {}: expected env, tcp, file, torchrun, mpirun or srun", option, text));
}

std::string_view name(Backend backend) { return lookup(kBackends, backend); }
std::string_view name(Launcher launcher) { return lookup(kLaunchers, launcher); }

std::ostream& operator<<(std::ostream& os, Mode mode) { return os << name(mode); }
std::ostream& operator<<(std::ostream& os, Transport transport) { return os << name(transport); }
std::ostream& operator<<(std::ostream& os, DeviceKind device) { return os << name(device); }
std::ostream& operator<<(std::ostream& os, Precision precision) { return os << name(precision); }
std::ostream& operator<<(std::ostream& os, Hierarchy hierarchy) { return os << name(hierarchy); }
std::ostream& operator<<(std::ostream& os, Backend backend) { return os << name(backend); }

void to_json(nlohmann::json& j, Mode mode) { j = std::string(name(mode)); }
void from_json(const nlohmann::json& j, Mode& mode) { mode = parse_mode(j.get<std::string>(), "mode"); }
void to_json(nlohmann::json& j, Transport transport) { j = std::string(name(transport)); }
void from_json(const nlohmann::json& j, Transport& transport) {
  transport = parse_transport(j.get<std::string>(), "transport");
}
void to_json(nlohmann::json& j, DeviceKind device) { j = std::string(name(device)); }
void from_json(const nlohmann::json& j, DeviceKind& device) { device = parse_device(j.get<std::string>(), "device"); }
void to_json(nlohmann::json& j, Precision precision) { j = std::string(name(precision)); }
void from_json(const nlohmann::json& j, Precision& precision) {
  precision = parse_precision(j.get<std::string>(), "precision");
}
void to_json(nlohmann::json& j, Hierarchy hierarchy) { j = std::string(name(hierarchy)); }
void from_json(const nlohmann::json& j, Hierarchy& hierarchy) {
  hierarchy = parse_hierarchy(j.get<std::string>(), "hierarchy");
}
void to_json(nlohmann::json& j, CollectiveFamily family) { j = std::string(name(family)); }
void from_json(const nlohmann::json& j, CollectiveFamily& family) {
  family = parse_collective_family(j.get<std::string>());
}
void to_json(nlohmann::json& j, Backend backend) { j = std::string(name(backend)); }
void from_json(const nlohmann::json& j, Backend& backend) { backend = parse_backend(j.get<std::string>()); }
void to_json(nlohmann::json& j, Launcher launcher) { j = std::string(name(launcher)); }

}  // namespace dpbench
