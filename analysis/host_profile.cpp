#include "analysis/host_profile.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/schedule.hpp"
#include "core/stats.hpp"
#include "record/result_json.hpp"

namespace dpbench {

namespace {

// The machine fields a profile keeps of a result's env (as a projection's calibration.machine).
nlohmann::json machine_of(const nlohmann::json& env, const std::string& host) {
  nlohmann::json m = nlohmann::json::object();
  for (const char* key : {"cpu_model", "cpu_cores", "os", "blas_core", "dpbench_version", "git_commit"}) {
    m[key] = env.contains(key) ? env.at(key) : nlohmann::json();
  }
  m["host"] = host;
  return m;
}

double positive(const nlohmann::json& block, const char* key, const std::string& where) {
  const auto it = block.find(key);
  if (it == block.end() || !it->is_number() || it->get<double>() <= 0) {
    throw InputError(fmt::format("{}: intra_node.{} is missing or not a positive number", where, key));
  }
  return it->get<double>();
}

}  // namespace

nlohmann::json HostProfile::record() const {
  nlohmann::json out = {{"path", path},
                        {"created", created},
                        {"machine", machine},
                        {"intra_node", {{"bytes_per_s", intra_bytes_per_s}, {"round_trip_s", intra_round_trip_s}}},
                        {"source", source}};
  if (!reduction.empty()) out["reduction"] = reduction.to_json();
  if (!shared_points.empty()) out["ranks_sharing_cores"] = document.at("ranks_sharing_cores");
  return out;
}

namespace {

// The runs' reduction probes (network.simulation.reduction), each size's median; null when no run
// has one.
nlohmann::json pooled_reduction(const nlohmann::json& run_result) {
  std::vector<ReductionCost> costs;
  for (const auto& run : run_result.at("runs")) {
    const nlohmann::json::json_pointer where("/network/simulation/reduction/rates");
    if (run.contains(where)) costs.push_back(reduction_cost_from_json(run.at(where), "profile run"));
  }
  std::vector<const ReductionCost*> of;
  for (const ReductionCost& c : costs) of.push_back(&c);
  const ReductionCost pooled = median_reduction(of);
  if (pooled.empty()) return nullptr;
  return {{"rates", pooled.to_json()},
          {"runs", costs.size()},
          {"method", "rank 0 of each run timed the host's add (out = received + own over floats, core/reduction.hpp "
                     "sum_floats) at each size after its engine probe; each size's median over the runs"}};
}

}  // namespace

namespace {

// One ranks-sharing-cores job's point of shared_cores_block (its cores in `cores`).
nlohmann::json shared_cores_point(const nlohmann::json& shared_result, int& cores) {
  cores = shared_result.at("env").value("cpu_cores", 0);
  const nlohmann::json& net = shared_result.at("network");
  const int ranks = net.value("nodes", 0) * net.value("ranks_per_node", 1);
  if (cores < 1 || ranks <= cores) {
    throw Error(fmt::format("profile: the ranks-sharing-cores job ran {} ranks on {} cores: it needs more ranks than "
                            "cores",
                            ranks, cores));
  }
  std::map<std::string, std::vector<double>> by_kind;
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& run : shared_result.at("runs")) {
    // The probe's fits: beside an in-step calibration they are under probe_calibrated.
    const nlohmann::json::json_pointer beside("/network/simulation/probe_calibrated/calibration/collectives");
    const nlohmann::json::json_pointer own("/network/simulation/calibration/collectives");
    const nlohmann::json::json_pointer& where = run.contains(beside) ? beside : own;
    if (!run.contains(where) || !run.at(where).is_array()) continue;
    for (const auto& fit : run.at(where)) {
      if (!fit.contains("overhead_at_link_s")) continue;
      const std::string kind = fit.at("collective").get<std::string>();
      by_kind[kind].push_back(fit["overhead_at_link_s"].get<double>());
      probes.push_back({{"mode", run.value("mode", "")},
                        {"collective", kind},
                        {"floats", fit.value("floats", 0)},
                        {"efficiency", fit.value("efficiency", 1.0)},
                        {"overhead_at_link_s", by_kind[kind].back()}});
    }
  }
  if (by_kind.empty()) {
    throw Error(fmt::format("profile: the ranks-sharing-cores job of {} ranks fitted no dense collective in its engine "
                            "probes (network.simulation.calibration.collectives[].overhead_at_link_s)",
                            ranks));
  }
  nlohmann::json overhead = nlohmann::json::object();
  for (const auto& [kind, values] : by_kind) overhead[kind] = median(values);
  return {{"nodes", net.value("nodes", 0)},
          {"ranks", ranks},
          {"overhead_s", overhead},
          {"runs", shared_result.at("runs").size()},
          {"probes", probes}};
}

}  // namespace

nlohmann::json shared_cores_block(const std::vector<nlohmann::json>& shared_results) {
  if (shared_results.empty()) throw Error("profile: no ranks-sharing-cores job to make a block of");
  nlohmann::json points = nlohmann::json::array();
  int cores = 0;
  for (const nlohmann::json& result : shared_results) {
    int these = 0;
    points.push_back(shared_cores_point(result, these));
    if (cores != 0 && these != cores) {
      throw Error(fmt::format("profile: the ranks-sharing-cores jobs ran on {} and {} cores", cores, these));
    }
    cores = these;
  }
  std::sort(points.begin(), points.end(),
            [](const nlohmann::json& a, const nlohmann::json& b) { return a["ranks"] < b["ranks"]; });
  for (std::size_t i = 1; i < points.size(); ++i) {
    if (points[i]["ranks"] == points[i - 1]["ranks"]) {
      throw Error(fmt::format("profile: two ranks-sharing-cores jobs of {} ranks", points[i]["ranks"].get<int>()));
    }
  }
  const nlohmann::json& largest = points.back();
  return {{"nodes", largest["nodes"]},
          {"ranks", largest["ranks"]},
          {"cores", cores},
          {"overhead_s", largest["overhead_s"]},
          {"points", points},
          {"method", "cluster jobs of more ranks than the host's cores on the profile's link, one point each: each "
                     "dense collective its engine probe ran, as the cost per message between nodes that, at the "
                     "link's rate, ends it when the probe saw it end (network.simulation.calibration.collectives[]."
                     "overhead_at_link_s); each kind's median over the job's runs' probes. nodes, ranks and "
                     "overhead_s beside the points: the largest job's"}};
}

nlohmann::json shared_cores_points(const nlohmann::json& block) {
  return block.contains("points") ? block["points"] : nlohmann::json::array({block});
}

nlohmann::json host_profile_document(const nlohmann::json& run_result, const std::string& machine_host,
                                     const std::string& command, const std::vector<nlohmann::json>& shared_results) {
  std::vector<double> rates, round_trips;
  long repetitions = 0, runs = 0;
  nlohmann::json probes = nlohmann::json::array();
  for (const auto& run : run_result.at("runs")) {
    const nlohmann::json::json_pointer where("/network/simulation/intra_node");
    if (!run.contains(where)) continue;
    const nlohmann::json& intra = run.at(where);
    if (!intra.is_object() || intra.value("source", std::string()).rfind("probed", 0) != 0) continue;
    rates.push_back(intra.at("bytes_per_s").get<double>());
    round_trips.push_back(intra.at("latency_s").get<double>());
    repetitions += intra.value("repetitions", 0L);
    runs += intra.value("runs", 1L);
    probes.push_back(
        {{"mode", run.value("mode", "")}, {"bytes_per_s", rates.back()}, {"latency_s", round_trips.back()}});
  }
  if (rates.empty())
    throw Error("profile: the cluster run probed no node's local ranks (network.simulation.intra_node)");
  const nlohmann::json& net = run_result.at("network");
  return {{"schema", {{"name", kHostProfileSchema}, {"version", kHostProfileVersion}}},
          {"created", utc_timestamp()},
          {"command", command},
          {"machine", machine_of(run_result.at("env"), machine_host)},
          {"cluster",
           {{"nodes", net.value("nodes", 0)},
            {"ranks_per_node", net.value("ranks_per_node", 0)},
            {"qdisc", net.value("qdisc", "")}}},
          {"intra_node",
           {{"bytes_per_s", median(rates)},
            {"latency_s",
             std::accumulate(round_trips.begin(), round_trips.end(), 0.0) / static_cast<double>(round_trips.size())},
            {"runs", runs},
            {"repetitions", repetitions},
            {"probes", probes},
            {"method", "every node's local ranks 0 and 1 sent each other one float, then 16 MiB, all pairs at once, "
                       "over the run's communicator (train/engine_probe.hpp probe_intra_node); the median over the "
                       "runs (probes) of rank 0's median rate, and the mean of their median one-float round trips "
                       "(latency_s): on ranks sharing cores a round trip is either quick or waits for a time slice, "
                       "and the mean weighs both as a step meets them"}}},
          {"links", net.value("links", nlohmann::json::array())},
          {"reduction", pooled_reduction(run_result)},
          {"ranks_sharing_cores", shared_results.empty() ? nlohmann::json() : shared_cores_block(shared_results)}};
}

namespace {

// A ranks_sharing_cores point's overhead_s, by CollectiveKind. Throws InputError naming `where`.
std::vector<double> shared_overheads(const nlohmann::json& overheads, const std::string& where) {
  if (!overheads.is_object()) {
    throw InputError(fmt::format("{}: the host profile's ranks_sharing_cores has no overhead_s", where));
  }
  std::vector<double> out(kCollectiveKinds, 0.0);
  for (const auto& [name, value] : overheads.items()) {
    int k = 0;
    while (k < kCollectiveKinds && name != collective_name(static_cast<CollectiveKind>(k))) ++k;
    if (k == kCollectiveKinds) {
      throw InputError(fmt::format("{}: ranks_sharing_cores.overhead_s: {} is not a collective", where, name));
    }
    if (!value.is_number() || value.get<double>() < 0) {
      throw InputError(fmt::format("{}: ranks_sharing_cores.overhead_s.{} is not a non-negative number", where, name));
    }
    out[static_cast<std::size_t>(k)] = value.get<double>();
  }
  return out;
}

// The ranks_sharing_cores block into `p`: its points, or (a profile made before them) the block
// itself as one. Throws InputError naming `where`.
void read_shared_cores(const nlohmann::json& block, const std::string& where, HostProfile& p) {
  if (!block.is_object() || !block.contains("overhead_s")) {
    throw InputError(fmt::format("{}: the host profile's ranks_sharing_cores has no overhead_s", where));
  }
  p.shared_cores = block.value("cores", 0);
  const nlohmann::json points = shared_cores_points(block);
  if (!points.is_array() || points.empty()) {
    throw InputError(fmt::format("{}: the host profile's ranks_sharing_cores.points is not a list of points", where));
  }
  for (const auto& point : points) {
    SharedCoresPoint sp;
    sp.ranks = point.is_object() ? point.value("ranks", 0) : 0;
    if (p.shared_cores < 1 || sp.ranks <= p.shared_cores) {
      throw InputError(fmt::format("{}: the host profile's ranks_sharing_cores has {} ranks on {} cores (it needs "
                                   "more ranks than cores)",
                                   where, sp.ranks, p.shared_cores));
    }
    if (!p.shared_points.empty() && sp.ranks <= p.shared_points.back().ranks) {
      throw InputError(fmt::format("{}: the host profile's ranks_sharing_cores points are not in ascending ranks ({} "
                                   "after {})",
                                   where, sp.ranks, p.shared_points.back().ranks));
    }
    sp.overhead_s = shared_overheads(point.value("overhead_s", nlohmann::json()), where);
    p.shared_points.push_back(std::move(sp));
  }
}

// host_profile_from's checks and reads; a value of the wrong JSON type throws nlohmann's
// type_error, which host_profile_from names as malformed.
HostProfile checked_profile(const nlohmann::json& doc, const std::string& path, const std::string& where) {
  if (!doc.is_object() || !doc.contains("schema") || !doc["schema"].is_object() ||
      doc["schema"].value("name", "") != kHostProfileSchema) {
    throw InputError(fmt::format("{}: not a dpbench host profile (schema.name is not \"{}\"; make one with "
                                 "`dpbench profile`)",
                                 where, kHostProfileSchema));
  }
  if (doc["schema"].value("version", 0) != kHostProfileVersion) {
    throw InputError(fmt::format("{}: host profile version {} (this dpbench reads version {})", where,
                                 doc["schema"].value("version", 0), kHostProfileVersion));
  }
  if (!doc.contains("intra_node") || !doc["intra_node"].is_object()) {
    throw InputError(fmt::format("{}: the host profile has no intra_node block", where));
  }
  HostProfile p;
  p.document = doc;
  p.path = path;
  p.created = doc.value("created", "");
  p.machine = doc.value("machine", nlohmann::json::object());
  p.intra_bytes_per_s = positive(doc["intra_node"], "bytes_per_s", where);
  p.intra_round_trip_s = positive(doc["intra_node"], "latency_s", where);
  if (doc.contains("reduction") && !doc["reduction"].is_null()) {
    if (!doc["reduction"].is_object() || !doc["reduction"].contains("rates")) {
      throw InputError(fmt::format("{}: the host profile's reduction has no rates", where));
    }
    p.reduction = reduction_cost_from_json(doc["reduction"]["rates"], where.c_str());
  }
  if (doc.contains("ranks_sharing_cores") && !doc["ranks_sharing_cores"].is_null()) {
    read_shared_cores(doc["ranks_sharing_cores"], where, p);
  }
  if (doc.contains("links")) {
    if (!doc["links"].is_array()) throw InputError(fmt::format("{}: the host profile's links is not a list", where));
    for (const auto& l : doc["links"]) {
      if (!l.is_object()) throw InputError(fmt::format("{}: a link of the host profile is not an object", where));
      for (const char* key : {"requested_bits_per_s", "probed_up_bytes_per_s", "probed_down_bytes_per_s"}) {
        if (l.contains(key) && !l[key].is_number()) {
          throw InputError(fmt::format("{}: a link's {} is not a number", where, key));
        }
      }
      p.links.push_back(l);
    }
  }
  return p;
}

}  // namespace

HostProfile host_profile_from(const nlohmann::json& doc, const std::string& path, const std::string& option) {
  const std::string where = option + path;
  try {
    return checked_profile(doc, path, where);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: a malformed host profile ({})", where, e.what()));
  }
}

HostProfile read_host_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("--host-profile {}: cannot open the file", path));
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("--host-profile {}: not valid JSON ({})", path, e.what()));
  }
  return host_profile_from(doc, path, "--host-profile ");
}

nlohmann::json host_profile_env_record(const HostProfile& profile) {
  return {{"path", profile.path},
          {"created", profile.created},
          {"machine", profile.machine},
          {"document", profile.document}};
}

std::optional<HostProfile> recorded_host_profile(const nlohmann::json& result, const std::string& file) {
  const nlohmann::json* env = result.contains("env") && result["env"].is_object() ? &result["env"] : nullptr;
  if (env == nullptr || !env->contains("host_profile")) return std::nullopt;
  const nlohmann::json& h = (*env)["host_profile"];
  const std::string where = fmt::format("{}: env.host_profile", file);
  if (!h.is_object() || !h.contains("document") || !h.contains("path") || !h["path"].is_string()) {
    throw InputError(fmt::format("{}: not a recorded host profile (no path or document)", where));
  }
  HostProfile p = host_profile_from(h["document"], h["path"].get<std::string>(), where + " ");
  p.source = fmt::format("recorded in {}", file);
  return p;
}

}  // namespace dpbench
