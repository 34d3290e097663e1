#include "bench/app/profile_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "analysis/host_profile.hpp"
#include "bench/app/child_run.hpp"
#include "cluster/link.hpp"
#include "cluster/netns.hpp"
#include "core/error.hpp"
#include "harness/harness.hpp"
#include "record/result_file.hpp"

namespace dpbench {

namespace {

// Runs one cluster job (`args`, its last two the output) as a child and returns its result file's
// document, or nullopt after saying why it failed (`exit_code` set).
std::optional<nlohmann::json> run_job(const std::vector<std::string>& args, const std::string& run_out, bool quiet,
                                      int& exit_code) {
  const std::string run_err = run_out + ".err";
  if (!quiet) fmt::print(stderr, "profile: dpbench {}\n", fmt::join(args.begin(), args.end() - 2, " "));
  const ChildRun child = run_child(args, run_err);
  std::error_code ec;
  std::filesystem::remove(run_err, ec);
  if (child.exit_code != 0) {
    std::filesystem::remove(run_out, ec);
    fmt::print(stderr, "dpbench: profile: the cluster run failed (exit {}): {}\n", child.exit_code, child.last_error);
    exit_code = child.exit_code;
    return std::nullopt;
  }
  std::ifstream f(run_out);
  nlohmann::json run = nlohmann::json::parse(f);
  f.close();
  std::filesystem::remove(run_out, ec);
  return run;
}

// The nodes of the ranks-sharing-cores jobs, ascending (empty: none). Throws InputError on a
// count of 1 or over 64, 0 beside others, or no more nodes than the host's cores.
std::vector<int> shared_nodes(const ProfileOptions& o) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (o.shared_nodes.empty()) {
    if (4 * cores > kMaxSharedNodes) return {};
    return {3 * cores, 4 * cores};
  }
  if (o.shared_nodes == std::vector<int>{0}) return {};
  std::vector<int> nodes = o.shared_nodes;
  for (const int n : nodes) {
    if (n < 2 || n > 64) {
      throw InputError(fmt::format("--shared-nodes {}: give 0 (no such job) or 2 to 64 nodes", n));
    }
  }
  std::sort(nodes.begin(), nodes.end());
  if (std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end()) {
    throw InputError(fmt::format("--shared-nodes {}: a job's nodes given twice", fmt::join(o.shared_nodes, ",")));
  }
  if (nodes.front() <= cores) {
    throw InputError(
        fmt::format("--shared-nodes {}: the job's ranks must exceed the host's {} cores", nodes.front(), cores));
  }
  return nodes;
}

std::string this_host() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? std::string(name) : std::string();
}

// What the profile found, as `dpbench profile` prints it.
void print_profile(const nlohmann::json& doc) {
  const auto& m = doc["machine"];
  const auto& intra = doc["intra_node"];
  fmt::print("machine: {}, {} cores, host {}, dpbench {} ({})\n", m["cpu_model"].dump(), m["cpu_cores"].dump(),
             m["host"].dump(), m["dpbench_version"].dump(), m["git_commit"].dump());
  fmt::print("a node's local ranks: {:.1f} MB/s, one-float round trip {:.1f} us ({} runs, {} round trips)\n",
             1e-6 * intra["bytes_per_s"].get<double>(), 1e6 * intra["latency_s"].get<double>(),
             intra["runs"].get<int>(), intra["repetitions"].get<long>());
  for (const auto& r : doc["reduction"].is_object() ? doc["reduction"]["rates"] : nlohmann::json::array()) {
    fmt::print("the host's add of {:.0f} KiB received: {:.3g} GB/s\n", r["bytes"].get<double>() / 1024,
               1e-9 * r["bytes_per_s"].get<double>());
  }
  if (doc["ranks_sharing_cores"].is_object()) {
    const int cores = doc["ranks_sharing_cores"]["cores"].get<int>();
    for (const auto& point : doc["ranks_sharing_cores"]["points"]) {
      for (const auto& [kind, o_s] : point["overhead_s"].items()) {
        fmt::print("{} ranks on {} cores: {} costs {:.3f} ms per message between nodes\n", point["ranks"].get<int>(),
                   cores, kind, 1e3 * o_s.get<double>());
      }
    }
  }
}

}  // namespace

std::vector<std::string> profile_run_args(const ProfileOptions& o, int nodes, int ranks_per_node, int repetitions,
                                          const std::string& out) {
  std::vector<std::string> args = {"run",
                                   "--nodes",
                                   std::to_string(nodes),
                                   "--ranks-per-node",
                                   std::to_string(ranks_per_node),
                                   "--link",
                                   o.link,
                                   "--max-steps",
                                   "6",
                                   "--warmup-steps",
                                   "2",
                                   "--repetitions",
                                   std::to_string(repetitions),
                                   "--no-eval",
                                   "-q"};
  if (ranks_per_node == 1) {
    args.insert(args.end(), {"--batch-size", std::to_string(kSharedBatchPerRank * nodes)});
  }
  args.insert(args.end(), {"--out", out});
  return args;
}

CLI::App* add_profile_command(CLI::App& parent, ProfileOptions& o) {
  CLI::App& app = *parent.add_subcommand(
      "profile", "The host profile: what this machine's host costs an emulated cluster's ranks (a node's local "
                 "ranks' link), measured once by a short cluster run, for project --simulate --host-profile");
  app.add_option("--link", o.link, "The emulated link between the profile's two nodes, in tc's units")
      ->capture_default_str();
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "Ranks on each of the two nodes (at least 2: a node's local ranks are what is probed)")
      ->capture_default_str();
  app.add_option("--repetitions", o.repetitions, "Runs of the probes, pooled")->capture_default_str();
  app.add_option("--shared-nodes", o.shared_nodes,
                 fmt::format("Nodes of one rank each of the jobs whose ranks exceed the host's cores (ranks sharing "
                             "cores), one job per count, comma-separated; default 3 and 4 x the cores where 4 x is at "
                             "most {}; 0: no such job",
                             kMaxSharedNodes))
      ->delimiter(',');
  app.add_option("--out,-o", o.out, "Host profile JSON path (default results/dpbench-host-profile-<time>.json)");
  app.add_flag("--quiet,-q", o.quiet, "Only print where the profile was written");
  return &app;
}

int profile_command(const ProfileOptions& o) {
  if (o.ranks_per_node < 2) {
    throw InputError(
        fmt::format("--ranks-per-node {}: the profile probes a node's local ranks: give 2 or more", o.ranks_per_node));
  }
  if (o.repetitions < 1) throw InputError(fmt::format("--repetitions {}: must be at least 1", o.repetitions));
  cluster::ClusterSpec spec;
  spec.nodes = 2;
  spec.ranks_per_node = o.ranks_per_node;
  spec.link = cluster::parse_rate(o.link, "--link");
  cluster::validate(spec);
  const std::vector<int> nodes = shared_nodes(o);
  const cluster::Capability cap = cluster::probe_capability();
  if (cap.how.empty()) throw InputError("profile: this machine cannot host an emulated cluster: " + cap.missing);
  const std::string out = o.out.empty() ? default_out_path("host-profile") : o.out;
  check_result_path(out);

  int exit_code = 0;
  const std::string run_out = out + ".run.json";
  const std::optional<nlohmann::json> run = run_job(profile_run_args(o, 2, o.ranks_per_node, o.repetitions, run_out),
                                                    run_out, o.quiet, exit_code);
  if (!run) return exit_code;
  std::vector<nlohmann::json> shared;
  for (const int n : nodes) {
    std::optional<nlohmann::json> job = run_job(profile_run_args(o, n, 1, kSharedRepetitions, run_out), run_out,
                                                o.quiet, exit_code);
    if (!job) return exit_code;
    shared.push_back(std::move(*job));
  }
  const nlohmann::json doc = host_profile_document(
      *run, this_host(),
      fmt::format("dpbench profile --link {} --ranks-per-node {} --repetitions {} --shared-nodes {}", o.link,
                  o.ranks_per_node, o.repetitions,
                  nodes.empty() ? std::string("0") : fmt::format("{}", fmt::join(nodes, ","))),
      shared);
  write_json_atomic(out, doc);
  if (!o.quiet) print_profile(doc);
  fmt::print("host profile written to {}\n", out);
  return 0;
}

}  // namespace dpbench
