// `dpbench sweep --nodes ... --links ...`: the sweep over an emulated cluster. Each point is one
// child `dpbench run --nodes N --link L` (cluster/cluster_job.hpp builds the cluster, probes it
// and runs every mode in turn on it); the sweep gathers the children's runs into one file.
// Not for: the in-process grid (sweep_command.cpp).
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/host_profile.hpp"
#include "record/result_file.hpp"
#include "record/result_json.hpp"
#include "bench/app/child_run.hpp"
#include "bench/app/sweep_command.hpp"
#include "cluster/link.hpp"
#include "cluster/netns.hpp"
#include "core/error.hpp"
#include "launch/resolve.hpp"

namespace dpbench {

namespace {

// One cluster job of the sweep.
struct Point {
  std::string workload;
  Transport transport;
  std::string link;
  int nodes, per_node, workers, rep;
  std::size_t batch;
  std::optional<CommHook> hook;        // --comm-hooks: this job's hook; none without the axis
  std::optional<Hierarchy> hierarchy;  // --hierarchies: this job's; none without the axis
  int staleness = -1;                  // --stalenesses: this job's; -1 without the axis
  double zipf_alpha = -1;              // --zipf-alphas: this job's (0: uniform); -1 without the axis
};

// The modes a point's job runs: every --modes value, or, under a --comm-hooks hook other than
// allreduce's own or a --stalenesses bound above 0, the one mode that has it (option_owner).
std::vector<Mode> point_modes(const SweepOptions& o, const Point& p) {
  TrainConfig probe;  // the point's own options alone
  if (p.hook) probe.allreduce.comm_hook = *p.hook;
  if (p.staleness >= 0) probe.sharded_ps.staleness = p.staleness;
  if (const auto owner = option_owner(probe)) return {owner->strategy->mode};
  return o.modes;
}

// The grid, repetitions innermost, so that each (nodes, ranks per node, link) point's
// repetitions run in a row; with --comm-hooks and --hierarchies, one job per hook and hierarchy at
// every point.
std::vector<Point> grid(const SweepOptions& o) {
  const auto or_unset = []<typename T>(const std::vector<T>& axis) {
    std::vector<std::optional<T>> values(axis.begin(), axis.end());
    if (values.empty()) values.emplace_back();
    return values;
  };
  const auto hooks = or_unset(o.comm_hooks);
  const auto hierarchies = or_unset(o.hierarchies);
  const std::vector<int> stalenesses = o.stalenesses.empty() ? std::vector<int>{-1} : o.stalenesses;
  const std::vector<double> alphas = o.zipf_alphas.empty() ? std::vector<double>{-1} : o.zipf_alphas;
  std::vector<Point> points;
  for (const auto& w : o.workloads)
    for (const auto& t : o.transports)
      for (const int x : o.num_workers)
        for (const std::size_t b : o.batch_sizes)
          for (const int n : o.nodes)
            for (const int k : o.ranks_per_node)
              for (const auto& l : o.links)
                for (const auto& hier : hierarchies)
                  for (const auto& h : hooks)
                    for (const int st : stalenesses)
                      for (const double a : alphas)
                        for (int rep = 0; rep < o.repetitions; ++rep) {
                          // A hook is allreduce's alone; a staleness bound runs with the flat push and pull.
                          if (st > 0 && ((h && *h != CommHook{}) || hier == Hierarchy::node)) continue;
                          points.push_back({w, t, l, n, k, x, rep, b, h, hier, st, a});
                        }
  return points;
}

// The arguments of the point's `dpbench run`.
std::vector<std::string> run_args(const SweepOptions& o, const Point& p, const std::string& out) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), o.shared_args.begin(), o.shared_args.end());
  // --transport only where a mode takes one (`run` refuses it otherwise: allreduce alone).
  const std::vector<Mode> modes = point_modes(o, p);
  if (std::any_of(modes.begin(), modes.end(), [](Mode m) { return !find_strategy(m).transports.empty(); })) {
    args.insert(args.end(), {"--transport", std::string(name(p.transport))});
  }
  if (p.hook) args.insert(args.end(), {"--comm-hook", hook_name(*p.hook)});
  if (p.hierarchy) args.insert(args.end(), {"--hierarchy", std::string(name(*p.hierarchy))});
  if (p.staleness >= 0) args.insert(args.end(), {"--staleness", std::to_string(p.staleness)});
  for (const auto& l : o.link_of) args.insert(args.end(), {"--link-of", l});
  if (p.zipf_alpha > 0) args.insert(args.end(), {"--zipf-alpha", fmt::format("{}", p.zipf_alpha)});
  for (const auto& a : std::vector<std::string>{"--workload",
                                                p.workload,
                                                "--mode",
                                                fmt::format("{}", fmt::join(modes, ",")),
                                                "--batch-size",
                                                std::to_string(p.batch),
                                                "--num-workers",
                                                std::to_string(p.workers),
                                                "--nodes",
                                                std::to_string(p.nodes),
                                                "--link",
                                                p.link,
                                                "--ranks-per-node",
                                                std::to_string(p.per_node),
                                                "--launcher",
                                                std::string(name(o.cluster_launcher)),
                                                "--repetitions",
                                                "1",
                                                "-q",
                                                "--out",
                                                out}) {
    args.push_back(a);
  }
  return args;
}

// A failed point's entries, one per mode, with the config compare matches them by.
void add_failed(const SweepOptions& o, const Point& p, const nlohmann::json& cluster_block, const std::string& error,
                nlohmann::json& runs) {
  for (const auto& mode : point_modes(o, p)) {
    TrainConfig config = o.base;
    config.model.workload = p.workload;
    config.mode = mode;
    if (p.hook) config.allreduce.comm_hook = *p.hook;
    if (p.hierarchy) config.hierarchy = *p.hierarchy;
    if (p.staleness >= 0) config.sharded_ps.staleness = p.staleness;  // above 0: sharded_ps's point alone
    if (p.zipf_alpha >= 0) config.model.dlrm.zipf_alpha = p.zipf_alpha;
    config.transport = p.transport;
    config.comm = cluster_backend(o.cluster_launcher);
    config.world_size = p.nodes * p.per_node;
    config.global_batch = p.batch;
    config.loader.num_workers = p.workers;
    runs.push_back({{"status", "failed"},
                    {"mode", mode},
                    {"strategy", strategy_to_json(config)},
                    {"world_size", config.world_size},
                    {"global_batch", p.batch},
                    {"config", config_to_json(config)},
                    {"repetition", p.rep},
                    {"cluster", cluster_block},
                    {"error", error}});
  }
}

}  // namespace

namespace {

// The sweep's axes checked before any job runs: every (nodes, ranks per node) makes a cluster,
// every link rate parses, every mode exists, and this machine can host a cluster. Throws
// InputError.
void check_network_sweep(const SweepOptions& o) {
  if (o.repetitions < 1) throw InputError(fmt::format("--repetitions {}: must be at least 1", o.repetitions));
  if (o.links.empty()) throw InputError("--nodes: give the link rates to sweep with --links (e.g. 100mbit,1gbit)");
  for (const auto& l : o.links) cluster::parse_rate(l, "--links");
  for (const int n : o.nodes) {
    for (const int k : o.ranks_per_node) {
      cluster::ClusterSpec spec;
      spec.nodes = n;
      spec.ranks_per_node = k;
      spec.link = cluster::parse_rate(o.links.front(), "--links");
      spec.launcher = o.cluster_launcher;
      cluster::parse_link_of(o.link_of, spec);
      cluster::validate(spec);
    }
  }
  for (const auto& m : o.modes) find_strategy(m);
  if (!o.zipf_alphas.empty() && o.workloads != std::vector<std::string>{"dlrm"}) {
    throw InputError("--zipf-alphas: the click logs' index law is dlrm's: give --workloads dlrm");
  }
  const cluster::Capability cap = cluster::probe_capability();
  if (cap.how.empty()) throw InputError("--nodes: this machine cannot host an emulated cluster: " + cap.missing);
}

// The sweep's own config block: the first job's config less the varied keys, and the axes.
nlohmann::json sweep_config(const SweepOptions& o, nlohmann::json config) {
  if (config.is_null()) config = nlohmann::json::object();
  for (const char* varied : {"modes", "world_size", "global_batch", "num_workers", "workload", "transport"}) {
    config.erase(varied);
  }
  config["launcher"] = "emulated cluster";
  std::vector<int> world_sizes;
  for (const int n : o.nodes) {
    for (const int k : o.ranks_per_node) world_sizes.push_back(n * k);
  }
  config["sweep"] = {{"workloads", o.workloads},
                     {"modes", o.modes},
                     {"transports", o.transports},
                     {"batch_sizes", o.batch_sizes},
                     {"num_workers", o.num_workers},
                     {"repetitions", o.repetitions},
                     {"nodes", o.nodes},
                     {"links", o.links},
                     {"ranks", world_sizes},
                     {"comms", {cluster_backend(o.cluster_launcher)}},
                     {"ranks_per_node", o.ranks_per_node}};
  if (!o.comm_hooks.empty()) {
    config.erase("comm_hook");
    config["sweep"]["comm_hooks"] = hook_names(o.comm_hooks);
  }
  if (!o.hierarchies.empty()) {
    config.erase("hierarchy");
    config["sweep"]["hierarchies"] = o.hierarchies;
  }
  if (!o.stalenesses.empty()) {
    config.erase("staleness");
    config["sweep"]["stalenesses"] = o.stalenesses;
  }
  if (!o.link_of.empty()) config["sweep"]["link_of"] = o.link_of;
  if (!o.zipf_alphas.empty()) config["sweep"]["zipf_alphas"] = o.zipf_alphas;
  return config;
}

}  // namespace

int network_sweep_command(const SweepOptions& o) {
  check_network_sweep(o);
  const std::string out = o.out.empty() ? default_out_path("sweep") : o.out;
  check_result_path(out);
  const std::optional<HostProfile> profile = o.host_profile.empty()
                                                 ? std::nullopt
                                                 : std::optional<HostProfile>(read_host_profile(o.host_profile));
  const std::string point_out = out + ".point.json", point_err = out + ".point.err";
  const std::vector<Point> points = grid(o);
  nlohmann::json runs = nlohmann::json::array(), config;
  std::size_t index = 0, failed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const Point& p : points) {
    if (!o.quiet) {
      fmt::print(stderr, "sweep [{}/{}] {} nodes={}x{} link={} batch={} workers={}{}{} rep={} | elapsed {:.0f} s\n",
                 ++index, points.size(), p.workload, p.nodes, p.per_node, p.link, p.batch, p.workers,
                 p.hierarchy ? fmt::format(" hierarchy={}", *p.hierarchy) : "",
                 (p.hook ? " hook=" + hook_name(*p.hook) : "") +
                     (p.staleness < 0 ? "" : " staleness=" + std::to_string(p.staleness)) +
                     (p.zipf_alpha < 0 ? "" : fmt::format(" zipf_alpha={}", p.zipf_alpha)),
                 p.rep, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    const ChildRun child = run_child(run_args(o, p, point_out), point_err);
    const nlohmann::json cluster_block = {
        {"nodes", p.nodes}, {"ranks_per_node", p.per_node}, {"link", p.link}, {"launcher", o.cluster_launcher}};
    if (child.exit_code != 0) {
      ++failed;
      add_failed(o, p, cluster_block, child.last_error, runs);
      if (!o.quiet) fmt::print(stderr, "sweep [{}/{}] failed: {}\n", index, points.size(), child.last_error);
      continue;
    }
    std::ifstream f(point_out);
    const nlohmann::json doc = nlohmann::json::parse(f);
    if (config.is_null()) config = doc.at("config");
    for (auto run : doc.at("runs")) {
      run["status"] = "ok";
      run["repetition"] = p.rep;
      run["cluster"] = cluster_block;
      run["cluster"]["links"] = doc.at("network").at("links");
      runs.push_back(std::move(run));
    }
  }
  std::error_code ec;
  std::filesystem::remove(point_out, ec);
  std::filesystem::remove(point_err, ec);
  nlohmann::json document = make_document(sweep_config(o, std::move(config)), std::move(runs));
  if (profile) document["env"]["host_profile"] = host_profile_env_record(*profile);
  write_json_atomic(out, document);
  fmt::print("sweep: {} points ({} failed) in {:.0f} s; results written to {}\n", points.size(), failed,
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), out);
  return 0;
}

}  // namespace dpbench
