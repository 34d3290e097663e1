#include "analysis/projection.hpp"

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>
#include <atomic>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/stats.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "train/buckets.hpp"
#include "train/models.hpp"
#include "workloads/replay_model.hpp"

namespace dpbench {

namespace {

bool ok_run(const nlohmann::json& run) { return run.value("status", std::string("ok")) == "ok"; }

// The registered strategy of a result file's run (its traits), by the run's mode.
const Strategy& run_strategy(const nlohmann::json& run) { return find_strategy(run.at("mode").get<Mode>()); }

// The projection curve a measured run belongs to: its strategy's curve for its transport.
const ProjectionCurve& run_projection(const nlohmann::json& run) {
  TrainConfig config;
  config.mode = run.at("mode").get<Mode>();
  config.transport = run.value("transport", config.transport);
  return projection_curve(run_strategy(run), config);
}

// The run's bus bandwidth in GB/s, if it reports one. Files written before the strategy traits
// called it allreduce_bandwidth_GBps (allreduce runs only).
std::optional<double> run_busbw(const nlohmann::json& run) {
  for (const char* key : {"bus_bandwidth_GBps", "allreduce_bandwidth_GBps"}) {
    if (run.contains(key) && run.at(key).is_object()) return run.at(key).at("busbw").get<double>();
  }
  return std::nullopt;
}

// What carried a run's communication, i.e. the link its step time was measured over:
//   "emulated": the emulated cluster's shaped links (the run has network.link);
//   "memory": rank threads of one process on the CPU (--comm local): memory copies;
//   "inter-process": processes on one machine (--comm gloo or mpi on the CPU);
//   "device": GPU ranks (NCCL, or device copies between GPU ranks).
std::string run_link_kind(const nlohmann::json& run) {
  if (run.contains("network") && run.at("network").contains("link")) return "emulated";
  if (run.value("device", DeviceKind::cpu) != DeviceKind::cpu) return "device";
  return run.value("comm", Backend::local) == Backend::local ? "memory" : "inter-process";
}

// The link a cluster run was measured over: its network.link (the slowest probed link, alpha
// from the round trip), with the collectives of its communicator.
LinkModel emulated_link(const nlohmann::json& run) {
  const auto& l = run.at("network").at("link");
  LinkModel link;
  link.name = "emulated " + run.value("cluster", nlohmann::json::object()).value("link", std::string("link"));
  link.alpha_s = l.value("alpha_s", 0.0);
  link.beta_s_per_byte = 1.0 / l.at("bytes_per_s").get<double>();
  link.collectives = l.value("collectives", CollectiveFamily::ring);
  link.source = fmt::format("emulated cluster: probed {:.1f} MB/s, alpha {:.1f} us (RTT / 2), {} collectives",
                            1e-6 / link.beta_s_per_byte, 1e6 * link.alpha_s, name(link.collectives));
  return link;
}

// Link from dpbench_collectives' Google Benchmark JSON: busbw of the first benchmark family in
// `families` that has results ("BM_AllReduceGlooRing", ...), at the message size closest to the
// gradient size (the fewest ranks measured), latency from its smallest size.
std::optional<LinkModel> link_from_collectives(const nlohmann::json& gb, double param_bytes,
                                               const std::vector<std::string>& families) {
  struct Point {
    int ranks;
    double bytes, busbw, seconds;
  };
  for (const auto& family : families) {
    std::vector<Point> points;
    for (const auto& b : gb.value("benchmarks", nlohmann::json::array())) {
      const std::string name = b.value("name", "");
      if (name.rfind(family + "/", 0) != 0 || b.value("run_type", "iteration") != "iteration") continue;
      Point p{0, 0, b.value("busbw", 0.0), b.value("real_time", 0.0)};
      for (std::size_t pos = 0; pos != std::string::npos;) {
        const std::size_t next = name.find('/', pos + 1);
        const std::string part = name.substr(pos + 1, next == std::string::npos ? std::string::npos : next - pos - 1);
        if (part.rfind("ranks:", 0) == 0) p.ranks = std::stoi(part.substr(6));
        if (part.rfind("bytes:", 0) == 0) p.bytes = std::stod(part.substr(6));
        pos = next;
      }
      const std::string unit = b.value("time_unit", "ns");
      p.seconds *= unit == "ns" ? 1e-9 : unit == "us" ? 1e-6 : unit == "ms" ? 1e-3 : 1.0;
      if (p.ranks >= 2 && p.bytes > 0 && p.busbw > 0) points.push_back(p);
    }
    if (points.empty()) continue;
    const int ranks = std::min_element(points.begin(), points.end(), [](const Point& a, const Point& b) {
                        return a.ranks < b.ranks;
                      })->ranks;
    const Point* nearest = nullptr;
    const Point* smallest = nullptr;
    for (const auto& p : points) {
      if (p.ranks != ranks) continue;
      if (nearest == nullptr ||
          std::abs(std::log(p.bytes / param_bytes)) < std::abs(std::log(nearest->bytes / param_bytes)))
        nearest = &p;
      if (smallest == nullptr || p.bytes < smallest->bytes) smallest = &p;
    }
    LinkModel link;
    link.name = "measured";
    link.beta_s_per_byte = 1.0 / (nearest->busbw * 1e9);
    link.alpha_s = smallest->seconds / (2.0 * (ranks - 1));
    link.collectives = family.find("Gloo") != std::string::npos ? CollectiveFamily::gloo : CollectiveFamily::ring;
    link.source = fmt::format("dpbench_collectives: {} busbw {:.2f} GB/s at {} ranks and {} bytes; latency "
                              "from {} bytes",
                              family, nearest->busbw, ranks, static_cast<long long>(nearest->bytes),
                              static_cast<long long>(smallest->bytes));
    return link;
  }
  return std::nullopt;
}

// The link the curves are drawn for, and what kind of link it is (as run_link_kind).
struct ProjectionLink {
  LinkModel model;
  std::string kind;
};

// The bus bandwidth of the fewest-rank run of link kind `kind` that reports one, as a link
// (alpha not measured: 0).
std::optional<ProjectionLink> link_from_runs(const std::vector<const nlohmann::json*>& runs, const std::string& kind) {
  const nlohmann::json* best = nullptr;
  for (const auto* run : runs) {
    if (run->at("world_size").get<int>() < 2 || run_link_kind(*run) != kind || !run_busbw(*run)) continue;
    if (best == nullptr || run->at("world_size").get<int>() < best->at("world_size").get<int>()) best = run;
  }
  if (best == nullptr) return std::nullopt;
  const double busbw = *run_busbw(*best);
  const std::string collective = best->contains("bus_bandwidth_GBps")
                                     ? best->at("bus_bandwidth_GBps").value("collective", std::string("collective"))
                                     : std::string("all-reduce");
  const Backend comm = best->value("comm", Backend::local);
  LinkModel link{kind == "memory" ? "memory" : "measured", 0.0, 1.0 / (busbw * 1e9),
                 fmt::format("the result's own {} busbw {:.2f} GB/s at {} ranks over --comm {} ({}; alpha not "
                             "measured: 0)",
                             collective, busbw, best->at("world_size").get<int>(), name(comm), kind)};
  link.collectives = collective_family(comm);
  return ProjectionLink{link, kind};
}

// The emulated link of the files' cluster runs; the slowest when they were run at several rates.
std::optional<ProjectionLink> link_from_cluster(const std::vector<const nlohmann::json*>& runs) {
  std::optional<LinkModel> slowest;
  for (const auto* run : runs) {
    if (run_link_kind(*run) != "emulated") continue;
    const LinkModel link = emulated_link(*run);
    if (!slowest || link.beta_s_per_byte > slowest->beta_s_per_byte) slowest = link;
  }
  if (!slowest) return std::nullopt;
  return ProjectionLink{*slowest, "emulated"};
}

// --link: a preset (a GPU interconnect's datasheet), `memory` (in-process copies between thread
// ranks, only when asked for) or `measured`: --collectives' inter-process all-reduce, else the
// files' emulated cluster link, else the busbw of their GPU runs, else of their inter-process
// runs. Throws InputError when nothing of the asked kind was measured.
ProjectionLink choose_link(const ProjectOptions& o, const std::vector<const nlohmann::json*>& runs,
                           const nlohmann::json* collectives, double param_bytes) {
  if (o.link_model != "measured" && o.link_model != "memory") return {link_preset(o.link_model), "device"};
  const bool memory = o.link_model == "memory";
  if (collectives != nullptr) {
    const std::vector<std::string> families = memory
                                                  ? std::vector<std::string>{"BM_AllReduce"}
                                                  : std::vector<std::string>{"BM_AllReduceGlooRing", "BM_AllReduceMpi"};
    if (auto link = link_from_collectives(*collectives, param_bytes, families)) {
      link->name = o.link_model;
      return {*link, memory ? "memory" : "inter-process"};
    }
    throw InputError(fmt::format(
        "{}: no {} results with busbw{}", o.collectives, memory ? "BM_AllReduce" : "inter-process all-reduce",
        memory ? ""
               : " (BM_AllReduce alone is in-process memory copies: run dpbench_collectives under mpirun, "
                 "or pass --link-model memory)"));
  }
  if (memory) {
    if (auto link = link_from_runs(runs, "memory")) return *link;
    throw InputError("--link-model memory: no run of thread ranks (--comm local on the CPU) at 2+ ranks reports a bus "
                     "bandwidth (an allreduce run does)");
  }
  for (auto found : {link_from_cluster(runs), link_from_runs(runs, "device"), link_from_runs(runs, "inter-process")}) {
    if (found) return *found;
  }
  throw InputError(
      "--link-model measured: the files measured no link between processes (run with --nodes N --link RATE "
      "or --comm gloo|mpi, pass --collectives from dpbench_collectives under mpirun, pass --link-model "
      "memory for the in-process copies of thread ranks, or a preset: pcie4|pcie5|nvlink4|ib-ndr)");
}

// Whether `run` was measured over the projection's link: the same kind, and for an emulated
// link the same rate (probed bandwidth within 5%).
bool on_link(const nlohmann::json& run, const ProjectionLink& link) {
  if (run_link_kind(run) != link.kind) return false;
  return link.kind != "emulated" ||
         std::abs(emulated_link(run).beta_s_per_byte / link.model.beta_s_per_byte - 1.0) <= 0.05;
}

// Strong scaling: the global batch stays at `global_batch` and p ranks split it; weak scaling:
// every rank keeps `per_rank_batch`. Measured runs are split the strong way (--batch-size is
// the global batch), so strong is the default.
struct Scaling {
  bool weak = false;
  double global_batch = 0;
  double per_rank_batch = 0;
  double rank_batch(int p) const { return weak ? per_rank_batch : global_batch / p; }
  std::string text() const {
    return weak ? fmt::format("weak: every rank keeps {:g} samples", per_rank_batch)
                : fmt::format("strong: a global batch of {:g} split over the ranks", global_batch);
  }
};

Scaling choose_scaling(const ProjectOptions& o, double calibration_batch) {
  if (!o.scaling.empty() && o.scaling != "strong" && o.scaling != "weak") {
    throw InputError(fmt::format("--scaling {}: unknown (strong or weak)", o.scaling));
  }
  if (o.per_rank_batch < 0) throw InputError(fmt::format("--per-rank-batch {}: must be positive", o.per_rank_batch));
  if (o.scaling == "strong" && o.per_rank_batch > 0) {
    throw InputError("--per-rank-batch: sets weak scaling; it does not go with --scaling strong");
  }
  Scaling s;
  s.weak = o.scaling == "weak" || o.per_rank_batch > 0;
  s.global_batch = calibration_batch;
  s.per_rank_batch = o.per_rank_batch > 0 ? o.per_rank_batch : calibration_batch;
  return s;
}

// The model's compute terms from a 1-rank run: per-sample time (data wait, h2d, forward,
// backward over the global batch) and the optimizer step.
StepModel compute_model(const nlohmann::json& run) {
  const auto& ph = run.at("phases_s");
  StepModel m;
  m.per_sample_compute_s = (ph.at("data_wait").get<double>() + ph.at("h2d").get<double>() +
                            ph.at("forward").get<double>() + ph.at("backward").get<double>()) /
                           run.at("global_batch").get<double>();
  m.optimizer_s = ph.at("optimizer").get<double>();
  m.param_bytes = run.at("num_params").get<double>() * 4.0;
  m.sample_bytes = run.value("input_features", 0.0) * 4.0;
  m.logit_bytes = run.value("num_classes", 0.0) * 4.0;
  if (run.contains("ddp_buckets")) {
    m.ddp_buckets = run["ddp_buckets"].get<std::vector<std::pair<std::size_t, std::size_t>>>();
    const auto n = run.at("num_params").get<std::size_t>();
    std::size_t total = 0;
    for (const auto& [offset, size] : m.ddp_buckets) {
      total += size;
      if (size == 0 || offset >= n || size > n - offset || total > n) total = n + 1;
    }
    if (total != n) {
      throw InputError(fmt::format("ddp_buckets: the {} buckets of the calibration run do not cut its {} parameters "
                                   "into ranges",
                                   m.ddp_buckets.size(), n));
    }
  }
  return m;
}

// Ranks sharing the emulated cluster's host (StepModel::host_slowdown_at_2): the median over the
// files' 2-rank emulated runs of their measured compute (data wait, h2d, forward, backward and
// optimizer: phases_s) over the 1-rank model's at their per-rank batch, at least 1; with the
// host's cores. Leaves `model` as it is without such a run. Returns the record ("" : none).
nlohmann::json fit_host_sharing(const std::vector<const nlohmann::json*>& runs, int cores, StepModel& model) {
  std::vector<double> slowdowns;
  for (const auto* run : runs) {
    if (run->at("world_size").get<int>() != 2 || run_link_kind(*run) != "emulated") continue;
    const auto& ph = run->at("phases_s");
    double measured = 0;
    for (const char* phase : {"data_wait", "h2d", "forward", "backward", "optimizer"})
      measured += ph.at(phase).get<double>();
    const double modelled = run->at("global_batch").get<double>() / 2 * model.per_sample_compute_s + model.optimizer_s;
    if (modelled > 0) slowdowns.push_back(std::max(1.0, measured / modelled));
  }
  if (slowdowns.empty() || cores < 1) return nlohmann::json();
  std::sort(slowdowns.begin(), slowdowns.end());
  const std::size_t n = slowdowns.size();
  model.host_cores = cores;
  model.host_slowdown_at_2 = n % 2 == 1 ? slowdowns[n / 2] : 0.5 * (slowdowns[n / 2 - 1] + slowdowns[n / 2]);
  return {{"cores", cores},
          {"slowdown_at_2_ranks", model.host_slowdown_at_2},
          {"runs", n},
          {"method", "the 2-rank emulated runs' measured compute over the 1-rank model's (median); p ranks compute "
                     "slowdown_at_2_ranks x max(1, p / cores) / max(1, 2 / cores) times slower"}};
}

// The host's reductions a --simulate projection on the files' emulated link plays
// (StepModel::reduction): each size's median over the files' runs' in-run simulations
// (network.simulation.reduction: their fits were made with those adds charged), else the host
// profile's, when it has them. Leaves `model` as it is without either. Returns the record (null:
// none).
nlohmann::json fit_reduction(const std::vector<const nlohmann::json*>& runs, const std::optional<HostProfile>& profile,
                             StepModel& model) {
  std::vector<ReductionCost> costs;
  for (const auto* run : runs) {
    const nlohmann::json::json_pointer where("/network/simulation/reduction/rates");
    if (run->contains(where)) costs.push_back(reduction_cost_from_json(run->at(where), "network.simulation.reduction"));
  }
  std::vector<const ReductionCost*> of;
  for (const ReductionCost& c : costs) of.push_back(&c);
  model.reduction = median_reduction(of);
  if (!model.reduction.empty()) {
    return {{"rates", model.reduction.to_json()},
            {"runs", costs.size()},
            {"source", "the calibration files' runs' probes (network.simulation.reduction), each size's median"}};
  }
  if (!profile || profile->reduction.empty()) return nullptr;
  model.reduction = profile->reduction;
  return {{"rates", model.reduction.to_json()},
          {"host_profile", profile->path},
          {"source", "the host profile's probe (the calibration files' runs probed none)"}};
}

// The files' runs: every ok run, the 1-rank ones, the most CPU cores any file's env saw, and the
// emulated clusters' links (a run file's network.links, a sweep run's cluster.links).
struct Inputs {
  std::vector<const nlohmann::json*> runs, singles, links;
  int cores = 0;
  std::map<const nlohmann::json*, const nlohmann::json*> env_of;  // each run's file's env

  explicit Inputs(const std::vector<nlohmann::json>& results) {
    const auto add_links = [this](const nlohmann::json& block) {
      if (!block.is_object() || !block.contains("links") || !block["links"].is_array()) return;
      for (const auto& l : block["links"]) links.push_back(&l);
    };
    for (const auto& doc : results) {
      cores = std::max(cores, doc.at("env").value("cpu_cores", 0));
      if (const auto net = doc.find("network"); net != doc.end()) add_links(*net);
      for (const auto& run : doc.at("runs")) {
        if (!ok_run(run)) continue;
        runs.push_back(&run);
        env_of[&run] = &doc.at("env");
        if (run.at("world_size") == 1) singles.push_back(&run);
        if (run.contains("cluster")) add_links(run["cluster"]);
      }
    }
  }

  // The 1-rank run closest to `batch`, preferring num_workers 0 (its decoding cost is on the
  // critical path, as it is when ranks share one CPU) and a strategy without a root (whose
  // 1-rank step is plain SGD, without staging the batch for a scatter).
  const nlohmann::json& calibration_run(double batch) const {
    auto score = [&](const nlohmann::json* r) {
      return std::abs(std::log(r->at("global_batch").get<double>() / batch)) * 100.0 +
             (r->at("config").value("num_workers", 0) == 0 ? 0.0 : 1.0) + (run_strategy(*r).has_root ? 0.5 : 0.0);
    };
    return **std::min_element(singles.begin(), singles.end(),
                              [&](const auto* a, const auto* b) { return score(a) < score(b); });
  }

  double largest_single_batch() const {
    double b = 0;
    for (const auto* r : singles) b = std::max(b, r->at("global_batch").get<double>());
    return b;
  }

  // The median exposed share of communication over the multi-rank runs measured over `link`
  // all of whose communication may overlap backward (DDP's buckets); 1 when there are none.
  // (How much backward hides depends on the link, so runs over other links do not count.)
  double exposed_fraction(const ProjectionLink& link) const {
    std::vector<double> exposed;
    for (const auto* run : runs) {
      const double comm = run->at("phases_s").at("comm").get<double>();
      if (run->at("world_size").get<int>() >= 2 && on_link(*run, link) &&
          run_projection(*run).overlapped_share == 1.0 && comm > 0) {
        exposed.push_back(std::min(1.0, run->at("phases_s").at("comm_exposed").get<double>() / comm));
      }
    }
    return exposed.empty() ? 1.0 : median(exposed);
  }
};

// The topology's platform of p ranks, its NICs at the projection's link where --node-link is not
// given (half the link's alpha on each side of the switch), a requested rate's NIC at
// `requested_share` of it.
SimPlatform link_platform(const TopologyOptions& o, const LinkModel& link, int p, double requested_share) {
  return topology_platform(o, 1.0 / link.beta_s_per_byte, link.alpha_s / 2.0, p, requested_share);
}

// The share of an emulated link's requested rate a TCP transfer got: the median over the
// calibration files' emulated links of each link's slower probed direction over its requested
// rate. The links' tbf counts each frame from its Ethernet header, so a full TCP segment carries
// 1448 payload bytes of 1514 (0.956); the probes measured 0.956 at 200 Mbit/s and 1 Gbit/s on the
// 2-core Intel Xeon machine (2026-11-29). Null without such a link.
nlohmann::json requested_rate_share(const std::vector<const nlohmann::json*>& links) {
  std::vector<double> shares;
  for (const auto* l : links) {
    const double requested = l->value("requested_bits_per_s", 0.0) / 8.0;
    const double probed = std::min(l->value("probed_up_bytes_per_s", 0.0), l->value("probed_down_bytes_per_s", 0.0));
    if (requested > 0 && probed > 0) shares.push_back(std::min(1.0, probed / requested));
  }
  if (shares.empty()) return nullptr;
  return {{"share", median(shares)},
          {"links", shares.size()},
          {"method", "the median over the calibration files' emulated links of the slower probed direction over the "
                     "requested rate; a --node-link or --node-link-of rate is played at this share of it"}};
}

// The engine's calibration the calibration files' emulated runs measured (each run's
// network.simulation.calibration, fitted to its engine probe: a share of the link per collective,
// or a per-message overhead for the small ones), for the platform of a projection on their
// measured link: per collective the fit of the fewest-rank run that probed it (its last fit of
// that collective, which matches the probe's whole sequence). Empty vectors where no run was
// calibrated. A run whose calibrated simulation was further from its measured step than its
// uncalibrated one (network.simulation's error against uncalibrated.error) gives no fit: its steps
// contradict its probe, which ran in other conditions (the all-reduce at 2 nodes and 1 Gbit/s,
// +10.9 % calibrated and 0.0 % uncalibrated in one CI grid, put every held-out all-reduce 13 to
// 16 % high); it is listed in `not_used`.
// An all-gather's share fitted on a 2-rank run holds at 2 ranks only: gloo's all-gather between
// two nodes ran at 0.61 of a 1 Gbit/s link on both development machines (AMD EPYC, Intel Xeon),
// and at 0.99 to 1.0 of it between three (2026-11-29), so the 2-rank share would charge every
// larger ring's pull too much; beyond 2 ranks it moves at the link's rate.
struct EngineCalibration {
  // The share of a requested --node-link / --node-link-of rate a transfer gets (requested_rate_share).
  double requested_share = 1.0;
  std::vector<double> efficiency, overhead_s;
  // A node's local ranks' link as the files probed it (intra_node_calibration); 0: the topology's.
  double intra_bytes_per_s = 0, intra_latency_s = 0;
  nlohmann::json rate_share_record, intra_record;     // requested_rate_share's, intra_node_calibration's
  std::vector<std::string> from_host_profile;         // what --host-profile gave: "intra_node", "requested_rate_share"
  std::vector<int> from;                              // per collective: the world size its fit came from
  nlohmann::json record = nlohmann::json::array();    // per collective: its fit and the run it came from
  nlohmann::json not_used = nlohmann::json::array();  // the runs whose fits were left out, and why
  // The projection plays the files' emulated links: TCP's send buffer on them, as the in-run
  // simulation plays it (emulated_tcp_send_buffer_bytes).
  bool tcp_send_buffer = false;
  // Ranks sharing the host's cores (the host profile's ranks_sharing_cores): its points (ranks on
  // shared_cores cores, by CollectiveKind the cost per message between nodes); empty: none.
  std::vector<SharedCoresPoint> shared_points;
  int shared_cores = 0;
  nlohmann::json shared_record;  // shared_cores_calibration's

  // The ranks up to which the host costs a message nothing: 2 per core (4 emulated nodes on 2 cores
  // were held out within 4 % without it); 1 per core where the profile's first point has fewer.
  int shared_from() const {
    return shared_points.empty() || shared_points.front().ranks >= 2 * shared_cores ? 2 * shared_cores : shared_cores;
  }
  // What the host adds to each message of kind k between nodes at p ranks: piecewise linear in p
  // from nothing at shared_from() ranks through the profile's points beyond it, past the last along
  // its last piece; nothing up to shared_from(), never negative. (SMPI's os/or are piecewise
  // linear in the message size the same way.) On the 2-core AMD EPYC (2026-12-02, one profile of
  // jobs at 4, 6 and 8 ranks, held out at 6 and 8 nodes): one line from 4 ranks to the 8-rank point
  // was off by up to -13.8 % (sharded_ps at 6 nodes), the line through the 6- and 8-rank points by
  // up to -9.7 %, and subtracting the 4-rank point's cost (whose all-gather the projection does not
  // play: a 2-node fit's share holds at 2 ranks only) by up to -18.6 %.
  double shared_overhead(int p, std::size_t k) const {
    const int from = shared_from();
    if (p <= from) return 0.0;
    double x0 = from, y0 = 0.0, slope = 0.0;  // the last piece's start and slope
    for (const SharedCoresPoint& point : shared_points) {
      if (point.ranks <= from) continue;
      const double x1 = point.ranks, y1 = point.overhead_s[k];
      slope = (y1 - y0) / (x1 - x0);
      if (p <= x1) break;
      x0 = x1;
      y0 = y1;
    }
    return std::max(0.0, y0 + slope * (p - x0));
  }
  // The engine's per-message costs at world size p: the files' fits, plus the host's.
  std::vector<double> overhead_at(int p) const {
    std::vector<double> o = overhead_s;
    if (shared_points.empty() || p <= shared_from()) return o;
    o.resize(kCollectiveKinds, 0.0);
    for (std::size_t k = 0; k < kCollectiveKinds; ++k) o[k] += shared_overhead(p, k);
    return o;
  }

  // The shares of the link to play at world size p.
  std::vector<double> efficiency_at(int p) const {
    std::vector<double> e = efficiency;
    const auto k = static_cast<std::size_t>(CollectiveKind::allgather);
    if (p > 2 && k < e.size() && from[k] == 2) e[k] = 0.0;
    return e;
  }
};
// A run's in-run simulation record (network.simulation) when it holds the engine's fits; null.
const nlohmann::json* calibrated_simulation(const nlohmann::json& run) {
  const auto net = run.find("network");
  if (net == run.end() || !net->contains("simulation")) return nullptr;
  const auto& sim = (*net)["simulation"];
  return sim.contains("calibration") && sim["calibration"].contains("collectives") ? &sim : nullptr;
}

// Why a run's fits are left out (engine_calibration's not_used entry): its calibrated simulation
// was further from its measured step than its uncalibrated one; null when it was not.
nlohmann::json contradicted_by_steps(const nlohmann::json& run, const nlohmann::json& sim) {
  if (!sim.contains("error") || !sim.contains("uncalibrated") || !sim["uncalibrated"].contains("error")) return nullptr;
  if (std::abs(sim["error"].get<double>()) <= std::abs(sim["uncalibrated"]["error"].get<double>())) return nullptr;
  return {{"mode", run.at("mode")},
          {"world_size", run.at("world_size")},
          {"error", sim["error"]},
          {"uncalibrated_error", sim["uncalibrated"]["error"]},
          {"why", "its calibrated simulation was further from its measured step than the uncalibrated one"}};
}

EngineCalibration engine_calibration(const std::vector<const nlohmann::json*>& runs) {
  EngineCalibration c;
  std::vector<int>& from = c.from;  // world size of the run each fit came from
  from.assign(kCollectiveKinds, 0);
  for (const auto* run : runs) {
    const nlohmann::json* sim = calibrated_simulation(*run);
    if (sim == nullptr) continue;
    if (nlohmann::json why = contradicted_by_steps(*run, *sim); !why.is_null()) {
      c.not_used.push_back(std::move(why));
      continue;
    }
    const int p = run->at("world_size").get<int>();
    for (const auto& fit : (*sim)["calibration"]["collectives"]) {
      for (std::size_t k = 0; k < kCollectiveKinds; ++k) {
        if (fit.value("collective", std::string()) != collective_name(static_cast<CollectiveKind>(k))) continue;
        if (from[k] != 0 && from[k] < p) break;
        if (c.efficiency.empty()) {
          c.efficiency.assign(kCollectiveKinds, 0.0);
          c.overhead_s.assign(kCollectiveKinds, 0.0);
        }
        const bool per_message = fit.contains("overhead_s");
        c.efficiency[k] = per_message ? 0.0 : fit.value("efficiency", 0.0);
        c.overhead_s[k] = fit.value("overhead_s", 0.0);
        from[k] = p;
      }
    }
  }
  for (std::size_t k = 0; k < kCollectiveKinds && !c.efficiency.empty(); ++k) {
    if (from[k] == 0) continue;
    c.record.push_back({{"collective", collective_name(static_cast<CollectiveKind>(k))},
                        {"efficiency", c.efficiency[k] > 0 ? nlohmann::json(c.efficiency[k]) : nlohmann::json()},
                        {"overhead_s", c.overhead_s[k]},
                        {"from_world_size", from[k]}});
    if (c.efficiency[k] > 0 && c.efficiency_at(3)[k] == 0) c.record.back()["share_at_2_ranks_only"] = true;
  }
  return c;
}

// The intra-node link the calibration files' emulated runs probed (network.simulation.intra_node:
// a node's local ranks sent each other one float, then 4 Mi floats, over the run's communicator,
// under the host's load; train/engine_probe.hpp probe_intra_node), for a projection on their link:
// the median rate, and half the median latency (half a one-float round trip) on each rank's link,
// since a message inside a node crosses two ranks' links, as the in-run simulation plays the probe
// (analysis/run_simulation.cpp). An emulated node's ranks meet over the host's loopback, where 4
// ranks on 2 cores measured latencies of 0.05 to 2.2 ms (2026-11-30), not NVLink's 1 us. Null
// without a probed run.
nlohmann::json intra_node_calibration(const std::vector<const nlohmann::json*>& runs) {
  std::vector<double> rates, latencies;
  for (const auto* run : runs) {
    const auto net = run->find("network");
    if (net == run->end() || !net->contains("simulation") || !(*net)["simulation"].contains("intra_node")) continue;
    const auto& probe = (*net)["simulation"]["intra_node"];
    if (probe.value("source", std::string()).rfind("probed", 0) != 0) continue;
    const double rate = probe.value("bytes_per_s", 0.0), latency = probe.value("latency_s", 0.0);
    if (rate > 0 && latency > 0) {
      rates.push_back(rate);
      latencies.push_back(latency);
    }
  }
  if (rates.empty()) return nullptr;
  return {{"bytes_per_s", median(rates)},
          {"latency_s", median(latencies) / 2.0},
          {"runs", rates.size()},
          {"method", "the calibration files' runs' probes of a node's local ranks (network.simulation.intra_node): "
                     "the median rate, and half the median latency on each rank's link (a message inside a node "
                     "crosses two); instead of --intra-link, which the command line did not give"}};
}

// The host profile's probe of a node's local ranks (analysis/host_profile.hpp), as
// intra_node_calibration gives the files' probes: its rate, and half its one-float round trip on
// each rank's link.
nlohmann::json profile_intra_node(const HostProfile& profile) {
  return {{"bytes_per_s", profile.intra_bytes_per_s},
          {"latency_s", profile.intra_round_trip_s / 2.0},
          {"host_profile", profile.path},
          {"method", "the host profile's probe of a node's local ranks (dpbench profile): its rate, and half its "
                     "one-float round trip on each rank's link; the calibration files' runs probed none, and the "
                     "command line gave no --intra-link"}};
}

// The host profile's ranks sharing cores (analysis/host_profile.hpp ranks_sharing_cores) set on
// `engine` for a projection on the files' emulated link, whose ranks share this host's cores;
// returns its record.
nlohmann::json shared_cores_calibration(const HostProfile& profile, EngineCalibration& engine) {
  engine.shared_points = profile.shared_points;
  engine.shared_cores = profile.shared_cores;
  engine.from_host_profile.push_back("ranks_sharing_cores");
  const int from = engine.shared_from();
  const nlohmann::json& block = profile.document.at("ranks_sharing_cores");
  nlohmann::json points = nlohmann::json::array();
  for (const auto& point : shared_cores_points(block)) {
    points.push_back({{"ranks", point["ranks"]}, {"overhead_s", point["overhead_s"]}});
  }
  std::vector<int> ranks;
  for (const SharedCoresPoint& p : profile.shared_points) ranks.push_back(p.ranks);
  return {{"overhead_s", block.at("overhead_s")},
          {"ranks", profile.shared_points.back().ranks},
          {"cores", profile.shared_cores},
          {"points", points},
          {"from_ranks", from},
          {"host_profile", profile.path},
          {"method",
           fmt::format("the host profile's cost per message between nodes of each collective at {} ranks on "
                       "{} cores (ranks_sharing_cores' points), added to the engine's at p ranks when p > {}: "
                       "piecewise linear in p from nothing at {} ranks through the points, beyond the last "
                       "along its last piece; the emulated ranks share this host's cores",
                       fmt::join(ranks, ", "), profile.shared_cores, from, from)}};
}

// What a projection on the files' emulated link takes from their runs: the engine's fits, the
// requested rate's share and (unless --intra-link was given) the probed intra-node link; the
// latter two from --host-profile where no file has them.
EngineCalibration files_calibration(const ProjectOptions& o, const Inputs& in) {
  EngineCalibration engine = engine_calibration(in.runs);
  engine.tcp_send_buffer = true;
  engine.rate_share_record = requested_rate_share(in.links);
  if (engine.rate_share_record.is_null() && o.host_profile) {
    std::vector<const nlohmann::json*> links;
    for (const auto& l : o.host_profile->links) links.push_back(&l);
    engine.rate_share_record = requested_rate_share(links);
    if (!engine.rate_share_record.is_null()) {
      engine.rate_share_record["host_profile"] = o.host_profile->path;
      engine.from_host_profile.push_back("requested_rate_share");
    }
  }
  if (!engine.rate_share_record.is_null()) engine.requested_share = engine.rate_share_record["share"].get<double>();
  if (!o.topology.intra_link_given) engine.intra_record = intra_node_calibration(in.runs);
  if (engine.intra_record.is_null() && !o.topology.intra_link_given && o.host_profile) {
    engine.intra_record = profile_intra_node(*o.host_profile);
    engine.from_host_profile.push_back("intra_node");
  }
  if (o.host_profile && !o.host_profile->shared_points.empty()) {
    engine.shared_record = shared_cores_calibration(*o.host_profile, engine);
  }
  if (!engine.intra_record.is_null()) {
    engine.intra_bytes_per_s = engine.intra_record["bytes_per_s"].get<double>();
    engine.intra_latency_s = engine.intra_record["latency_s"].get<double>();
  }
  return engine;
}

// The platform --simulate plays p ranks on: the topology's, with the engine's calibration at p
// (and the probed intra-node link) unless a --platform file gives its own.
SimPlatform size_platform(const ProjectOptions& o, const LinkModel& link, const EngineCalibration& engine, int p) {
  SimPlatform platform = link_platform(o.topology, link, p, engine.requested_share);
  if (platform.platform_file.empty()) {
    platform.engine_efficiency = engine.efficiency_at(p);
    platform.engine_overhead_s = engine.overhead_at(p);
    if (engine.tcp_send_buffer) platform.send_buffer_bytes = emulated_tcp_send_buffer_bytes(platform);
    if (engine.intra_bytes_per_s > 0) {
      platform.intra_bytes_per_s = engine.intra_bytes_per_s;
      platform.intra_latency_s = engine.intra_latency_s;
    }
  }
  return platform;
}

// A world size whose points --simulate plays: its ranks' batch, its platform, and the index in
// "points" of its first curve's point (the curves' follow in order).
struct SimulatedSize {
  int p = 0;
  double b = 0;
  SimPlatform platform;
  std::size_t first = 0;
};

// --simulate: every curve's points at `sizes` get their "simulation". A curve plays its sizes in
// order (an extrapolated point reads the smaller ones from `memo`); one worker per core takes the
// next curve when it is done with one, so no curve waits for another's size and no more
// simulations run at once (each in a child process, sim/simulate.hpp) than there are cores.
void simulate_curves(const std::vector<ProjectedCurve>& curves, const StepModel& model, const LinkModel& link,
                     const std::vector<SimulatedSize>& sizes, bool what_if, nlohmann::json& points) {
  SimulationMemo memo;
  std::vector<std::vector<nlohmann::json>> out(curves.size());
  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    for (std::size_t i = next++; i < curves.size(); i = next++) {
      TrainConfig config;
      config.mode = curves[i].strategy->mode;
      config.transport = curves[i].curve.transport;
      for (const SimulatedSize& at : sizes) {
        out[i].push_back(
            simulate_point(*curves[i].strategy, config, model, link, at.platform, at.p, at.b, what_if, &memo));
      }
    }
  };
  const std::size_t workers = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, curves.size());
  std::vector<std::future<void>> running;
  for (std::size_t w = 0; w < workers; ++w) running.push_back(std::async(std::launch::async, worker));
  for (auto& r : running) r.get();
  for (std::size_t i = 0; i < curves.size(); ++i) {
    for (std::size_t k = 0; k < sizes.size(); ++k) points[sizes[k].first + i]["simulation"] = std::move(out[i][k]);
  }
}

// A --platform file SimGrid cannot load is bad input, found before any point is simulated: one
// rank with nothing to do is played on it. (Fewer hosts than a point's ranks leaves that point
// unsimulated, with the reason.)
void check_platform_file(const SimPlatform& platform) {
  if (platform.platform_file.empty() || !simulation_available()) return;
  try {
    simulate(StepSchedule(1), platform, 1);
  } catch (const Error& e) {
    throw InputError(fmt::format("--platform {}: {}", platform.platform_file, e.what()));
  }
}

// The projection's "curves": each curve's key, strategy, label, transport and whether it is the
// baseline's.
nlohmann::json curves_json(const std::vector<ProjectedCurve>& curves) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& c : curves) {
    out.push_back({{"curve", c.curve.key},
                   {"strategy", c.strategy->mode},
                   {"label", c.label},
                   {"transport", c.curve.transport},
                   {"baseline", c.strategy->baseline}});
  }
  return out;
}

// The world sizes a projection evaluates: 1, 2, 4, ... below max_ranks, then max_ranks itself (a
// power of two or not: a held-out run of 3 nodes, a user's 12).
std::vector<int> projected_world_sizes(int max_ranks) {
  std::vector<int> sizes;
  for (int p = 1; p < max_ranks; p *= 2) sizes.push_back(p);
  sizes.push_back(max_ranks);
  return sizes;
}

// Every strategy's curve at world sizes 1, 2, 4, ... up to --max-ranks (under strong scaling,
// while every rank has a sample), and the world size from which each other curve is more than 5%
// faster than the baseline strategy's default curve (its first). Fills doc's "curves",
// "points", "crossovers" and "crossover_world_size".
void project_curves(const ProjectOptions& o, const StepModel& model, const LinkModel& files_link,
                    const Scaling& scaling, const EngineCalibration& engine, nlohmann::json& doc) {
  LinkModel link = files_link;
  link.tree_allreduce = o.topology.nccl_algo == "tree";
  const auto& curves = projected_curves();
  const ProjectedCurve* baseline = nullptr;
  for (const auto& c : curves) {
    if (baseline == nullptr && c.strategy->baseline) baseline = &c;
  }
  const nlohmann::json curves_doc = curves_json(curves);
  std::vector<std::optional<int>> crossing(curves.size());
  nlohmann::json points = nlohmann::json::array();
  std::vector<SimulatedSize> simulated;
  for (const int p : projected_world_sizes(o.max_ranks)) {
    if (scaling.rank_batch(p) < 1.0) break;
    const double b = scaling.rank_batch(p);
    std::vector<double> step(curves.size());
    for (std::size_t i = 0; i < curves.size(); ++i) {
      const std::string& key = curves[i].curve.key;
      const StepPrediction pred = predict_step(model, link, key, p, b);
      const StepPrediction one = predict_step(model, link, key, 1, scaling.rank_batch(1));
      const double speedup = (p * b / pred.step_s) / (scaling.rank_batch(1) / one.step_s);
      points.push_back({{"world_size", p},
                        {"curve", key},
                        {"step_time_s", pred.step_s},
                        {"compute_s", pred.compute_s},
                        {"comm_s", pred.comm_s},
                        {"per_rank_batch", b},
                        {"global_batch", p * b},
                        {"throughput_samples_per_s", p * b / pred.step_s},
                        {"speedup", speedup},
                        {"efficiency", speedup / p}});
      step[i] = pred.step_s;
    }
    if (o.topology.simulate)
      simulated.push_back({p, b, size_platform(o, link, engine, p), points.size() - curves.size()});
    for (std::size_t i = 0; baseline != nullptr && p >= 2 && i < curves.size(); ++i) {
      const double t_base = step[static_cast<std::size_t>(baseline - curves.data())];
      if (!curves[i].strategy->baseline && !crossing[i] && t_base > 1.05 * step[i]) crossing[i] = p;
    }
  }
  if (o.topology.simulate) simulate_curves(curves, model, link, simulated, o.topology.what_if, points);
  nlohmann::json crossovers = nlohmann::json::array();
  for (std::size_t i = 0; i < curves.size(); ++i) {
    if (baseline == nullptr || curves[i].strategy->baseline) continue;
    crossovers.push_back({{"curve", curves[i].curve.key},
                          {"baseline", baseline->curve.key},
                          {"world_size", crossing[i] ? nlohmann::json(*crossing[i]) : nlohmann::json()}});
  }
  doc["curves"] = curves_doc;
  doc["points"] = points;
  doc["crossovers"] = crossovers;
  if (o.topology.simulate) doc["findings"] = simulation_findings(points, curves_doc, o.topology);
  // The first non-baseline curve's crossover, for readers of version 1 files (which had only
  // allreduce's); `crossovers` has every curve's.
  doc["crossover_world_size"] = crossovers.empty() ? nlohmann::json() : crossovers.front()["world_size"];
}

// Why the model does not describe a measured run ("" when it does): its link is not the
// projection's kind, its ranks time-sliced a CPU, or GPU ranks shared a device.
std::string not_applicable_note(const nlohmann::json& run, const ProjectionLink& link, int cores) {
  const int p = run.at("world_size").get<int>();
  const std::string kind = run_link_kind(run);
  if (kind != "emulated" && kind != link.kind) {
    return fmt::format("measured over {} (--comm {}); the projection has no figure for that link, its link is {} ({})",
                       kind, run.value("comm", std::string("local")), link.kind, link.model.name);
  }
  if (run.at("device").get<DeviceKind>() == DeviceKind::cpu && cores > 0 && p > cores) {
    return fmt::format("{} ranks on {} cores: time-sliced, the model does not apply", p, cores);
  }
  if (run.at("device").get<DeviceKind>() != DeviceKind::cpu && run.value("virtual_ranks", false)) {
    return fmt::format("{} virtual ranks shared the GPUs: the model does not apply", p);
  }
  return "";
}

// The model against one measured multi-rank run, at the run's own batch and link (a cluster
// run's emulated link; the projection's otherwise). Ranks of one CPU share it: each gets 1/p.
// A run over another kind of link than the projection's gets no model value (null): the model
// has no figure for its link. "on_curve": the run has the curves' setting (batch under their
// scaling, num_workers, link), so it may be drawn beside them.
nlohmann::json measured_point(const nlohmann::json& run, const Inputs& in, const StepModel& model,
                              const ProjectionLink& link, const Scaling& scaling, int calibration_workers) {
  const int p = run.at("world_size").get<int>();
  const double B = run.at("global_batch").get<double>();
  const int workers = run.at("config").value("num_workers", 0);
  const std::string kind = run_link_kind(run);
  const LinkModel own = kind == "emulated" ? emulated_link(run) : link.model;
  const double actual = run.at("step_time_s").at("p50").get<double>();
  const std::string note = not_applicable_note(run, link, in.cores);
  const bool same_batch = scaling.weak ? std::abs(B / p - scaling.per_rank_batch) < 1e-9
                                       : std::abs(B - scaling.global_batch) < 1e-9;
  nlohmann::json point = {{"world_size", p},
                          {"curve", run_projection(run).key},
                          {"global_batch", B},
                          {"num_workers", workers},
                          {"link", kind == link.kind || kind == "emulated" ? own.name : kind},
                          {"link_kind", kind},
                          {"step_time_s", actual},
                          {"predicted_step_time_s", nullptr},
                          {"relative_error", nullptr},
                          {"model_applies", note.empty()},
                          {"note", note},
                          {"on_curve", on_link(run, link) && same_batch && workers == calibration_workers}};
  if (kind == "emulated" || kind == link.kind) {
    StepModel local = compute_model(in.calibration_run(B));
    local.exposed_fraction = model.exposed_fraction;
    const bool cpu = run.at("device").get<DeviceKind>() == DeviceKind::cpu;
    const double predicted = predict_step(local, own, run_projection(run).key, p, B / p, cpu ? 1.0 / p : 1.0).step_s;
    point["predicted_step_time_s"] = predicted;
    point["relative_error"] = predicted / actual - 1.0;
  }
  return point;
}

}  // namespace

namespace {

// The machine a calibration run was measured on, from its file's env: CPU model and cores, host,
// OS, BLAS kernels, GPUs, dpbench's version and commit (each null where the file has none).
nlohmann::json calibration_machine(const nlohmann::json& env) {
  nlohmann::json m = nlohmann::json::object();
  for (const char* key :
       {"cpu_model", "cpu_cores", "host", "os", "blas_core", "gpus", "dpbench_version", "git_commit"}) {
    m[key] = env.contains(key) ? env.at(key) : nlohmann::json();
  }
  return m;
}

// The projection file's "link", "calibration" and "scaling" blocks.
void describe_inputs(const ProjectOptions& o, const ProjectionLink& link, const nlohmann::json& base,
                     const StepModel& model, const Scaling& scaling, nlohmann::json& doc) {
  doc["link"] = {{"name", link.model.name},
                 {"kind", link.kind},
                 {"alpha_s", link.model.alpha_s},
                 {"beta_s_per_byte", link.model.beta_s_per_byte},
                 {"collectives", link.model.collectives},
                 {"bandwidth_GBps", 1e-9 / link.model.beta_s_per_byte},
                 {"source", link.model.source}};
  doc["calibration"] = {{"result_files", o.results},
                        {"calibration_run",
                         {{"mode", base.at("mode")},
                          {"global_batch", base.at("global_batch")},
                          {"num_workers", base.at("config").value("num_workers", 0)}}},
                        {"per_sample_compute_s", model.per_sample_compute_s},
                        {"optimizer_s", model.optimizer_s},
                        {"param_bytes", model.param_bytes},
                        {"sample_bytes", model.sample_bytes},
                        {"logit_bytes", model.logit_bytes},
                        {"exposed_fraction", model.exposed_fraction},
                        {"per_rank_batch", scaling.weak ? nlohmann::json(scaling.per_rank_batch) : nlohmann::json()},
                        {"scaling", scaling.text()}};
  doc["scaling"] = {{"kind", scaling.weak ? "weak" : "strong"},
                    {"global_batch", scaling.weak ? nlohmann::json() : nlohmann::json(scaling.global_batch)},
                    {"per_rank_batch", scaling.weak ? nlohmann::json(scaling.per_rank_batch) : nlohmann::json()},
                    {"text", scaling.text()}};
}

// What a host profile's machine must share with the calibration run's to be the same host.
constexpr const char* kProfileMachineKeys[] = {"cpu_model", "cpu_cores"};

// With --simulate, the projection file's "topology" block, its platform at --max-ranks as played
// (with `engine`'s calibration), the intra-node link it plays and the host profile with what it
// was used for; checks a --platform file first.
void describe_topology(const ProjectOptions& o, const ProjectionLink& link, const EngineCalibration& engine,
                       nlohmann::json& doc) {
  const SimPlatform largest = size_platform(o, link.model, engine, o.max_ranks);
  check_platform_file(largest);
  doc["topology"] = {{"platform_at_max_ranks", largest.to_json()},
                     {"ranks_per_node", o.topology.ranks_per_node},
                     {"nodes_per_leaf", o.topology.nodes_per_leaf},
                     {"oversubscription", o.topology.oversubscription},
                     {"preset", o.topology.preset.empty() ? nlohmann::json() : nlohmann::json(o.topology.preset)},
                     {"preset_source", topology_preset_source(o.topology.preset)},
                     {"what_if", o.topology.what_if},
                     {"nccl_algo", o.topology.nccl_algo},
                     {"platform_file",
                      o.topology.platform_file.empty() ? nlohmann::json() : nlohmann::json(o.topology.platform_file)},
                     {"simulator", simulation_available() ? "SimGrid (sim/simulate.hpp)" : "unavailable in this build"},
                     {"compute", "per rank: per-sample time x batch, one third forward and two thirds backward; the "
                                 "optimizer (sharded_ps: 1/p of it on each server)"}};
  if (!engine.intra_record.is_null()) doc["topology"]["intra_node_calibration"] = engine.intra_record;
  if (!engine.shared_record.is_null()) doc["topology"]["ranks_sharing_cores"] = engine.shared_record;
  if (o.host_profile) {
    nlohmann::json& h = doc["topology"]["host_profile"] = o.host_profile->record();
    h["used_for"] = engine.from_host_profile;
    // A profile of another CPU or core count describes another host than the calibration run's.
    const nlohmann::json calibrated = doc["calibration"].value("machine", nlohmann::json::object());
    h["same_machine_as_calibration"] = std::all_of(std::begin(kProfileMachineKeys), std::end(kProfileMachineKeys),
                                                   [&](const char* key) {
      return calibrated.value(key, nlohmann::json()) == h["machine"].value(key, nlohmann::json());
    });
  }
}

}  // namespace

StepModel described_step_model(const ModelDescription& d, const DeviceProfile& profile) {
  const double scale = profile_time_scale(d, profile);
  StepModel m;
  m.per_sample_compute_s = (d.forward_us() + d.backward_us()) * 1e-6 * scale;
  m.forward_share = d.forward_us() + d.backward_us() > 0 ? d.forward_us() / (d.forward_us() + d.backward_us()) : 0.5;
  // SGD with momentum reads parameters, gradients and momentum and writes parameters and momentum
  m.optimizer_s = static_cast<double>(d.num_params()) * 5 * sizeof(float) / profile.memory_bytes_per_s;
  m.param_bytes = static_cast<double>(d.num_params()) * sizeof(float);
  m.sample_bytes = static_cast<double>(d.input_bytes);
  m.logit_bytes = static_cast<double>(d.output_features() * sizeof(float));
  m.described_model = d.origin.rfind("built-in model ", 0) == 0 ? d.name : d.origin;
  return m;
}

namespace {

// DDP's buckets of a described model at the default caps (first_bucket_mb, bucket_cap_mb), in
// the order they are launched: each the parameter indices it holds, in ready order.
nlohmann::json described_buckets(const ModelDescription& d) {
  const TrainConfig defaults;
  const ReplayModel model(std::make_shared<const ModelDescription>(d), 1.0);
  nlohmann::json out = nlohmann::json::array();
  for (const Bucket& b : assign_buckets(model.params(), sizeof(float), defaults.allreduce.first_bucket_mb,
                                        defaults.allreduce.bucket_cap_mb, model.grad_ready_order())) {
    out.push_back(b.params);
  }
  return out;
}

// --model without result files: the curves (and with --simulate, the simulation) of a described
// model on a device profile, at --per-rank-batch samples per rank (weak scaling).
nlohmann::json project_described(const ProjectOptions& given) {
  ProjectOptions o = given;
  if (!o.scaling.empty() && o.scaling != "weak") {
    throw InputError(
        fmt::format("--scaling {}: --model projects weak scaling (each rank keeps --per-rank-batch)", o.scaling));
  }
  const bool h100 = o.topology.preset.find("h100") != std::string::npos;
  if (o.link_model == "measured" || o.link_model == "memory") {
    if (!h100) {
      throw InputError(
          fmt::format("--link-model {}: --model measures no link; give --link-model pcie4|pcie5|nvlink4|ib-ndr, or "
                      "an H100 --topology (which implies nvlink4)",
                      o.link_model));
    }
    o.link_model = "nvlink4";
  }
  const std::shared_ptr<const ModelDescription> d = described_model(o.model);
  const DeviceProfile& profile = device_profile(o.device_profile.empty() ? (h100 ? "h100" : "described")
                                                                         : o.device_profile);
  StepModel model = described_step_model(*d, profile);
  if (o.per_rank_batch < 0) throw InputError(fmt::format("--per-rank-batch {}: must be positive", o.per_rank_batch));
  Scaling scaling;
  scaling.weak = true;
  scaling.per_rank_batch = o.per_rank_batch > 0 ? o.per_rank_batch : 8;
  scaling.global_batch = scaling.per_rank_batch;
  const ProjectionLink link{link_preset(o.link_model), "device"};
  nlohmann::json doc;
  doc["schema"] = {{"name", "dpbench-projection"}, {"version", 2}};
  doc["created"] = utc_timestamp();
  describe_inputs(o, link,
                  {{"mode", nullptr}, {"global_batch", scaling.per_rank_batch}, {"config", nlohmann::json::object()}},
                  model, scaling, doc);
  doc["calibration"]["described_model"] = {{"name", d->name},
                                           {"origin", d->origin},
                                           {"num_params", d->num_params()},
                                           {"timed_on", d->device_name},
                                           {"device_profile", profile.name},
                                           {"device_profile_source", profile.source},
                                           {"time_scale", profile_time_scale(*d, profile)},
                                           {"ddp_buckets", described_buckets(*d)}};
  if (o.topology.simulate) describe_topology(o, link, EngineCalibration{}, doc);
  project_curves(o, model, link.model, scaling, EngineCalibration{}, doc);
  doc["measured"] = nlohmann::json::array();
  return doc;
}

}  // namespace

namespace {
// The options' checks that need no input file: --max-ranks, --node-link-of, --host-profile.
void check_project_options(const ProjectOptions& o) {
  if (o.max_ranks < 1) throw InputError(fmt::format("--max-ranks {}: must be at least 1", o.max_ranks));
  if ((o.max_ranks & (o.max_ranks - 1)) != 0 && o.max_ranks % std::max(1, o.topology.ranks_per_node) != 0) {
    throw InputError(fmt::format("--max-ranks {}: not a power of two nor whole nodes of {} ranks", o.max_ranks,
                                 o.topology.ranks_per_node));
  }
  check_node_link_of(o.topology, o.max_ranks);
  if (o.host_profile && (!o.topology.simulate || !o.model.empty())) {
    throw InputError(fmt::format("--host-profile {}: the profile is played by --simulate on result files' emulated "
                                 "link, not with --model or without --simulate",
                                 o.host_profile->path));
  }
}
}  // namespace

nlohmann::json project(const ProjectOptions& o, const std::vector<nlohmann::json>& results,
                       const nlohmann::json* collectives) {
  check_project_options(o);
  if (!o.model.empty()) {
    if (!results.empty()) throw InputError(fmt::format("--model {} and result files: give one", o.model));
    return project_described(o);
  }
  if (!o.device_profile.empty()) throw InputError("--device-profile: applies to --model");
  if (results.empty()) throw InputError("project: give result files or --model");
  const Inputs in(results);
  if (in.singles.empty()) {
    throw InputError(fmt::format("{}: no 1-rank run to calibrate compute from (add 1 to --ranks)",
                                 o.results.empty() ? std::string("results") : o.results.front()));
  }
  const Scaling scaling = choose_scaling(o, in.largest_single_batch());
  const nlohmann::json& base = in.calibration_run(scaling.weak ? scaling.per_rank_batch : scaling.global_batch);
  StepModel model = compute_model(base);
  const ProjectionLink link = choose_link(o, in.runs, collectives, model.param_bytes);
  model.exposed_fraction = in.exposed_fraction(link);
  // The engine's fits and the host's sharing describe the emulated cluster's hosts and links: they
  // ride on its measured link only, not on a preset's or a datasheet node's.
  const bool emulated = link.kind == "emulated" && o.topology.preset.empty();
  const nlohmann::json host_sharing = emulated ? fit_host_sharing(in.runs, in.cores, model) : nlohmann::json();
  const nlohmann::json reduction = emulated && o.topology.simulate ? fit_reduction(in.runs, o.host_profile, model)
                                                                   : nlohmann::json();

  nlohmann::json doc;
  doc["schema"] = {{"name", "dpbench-projection"}, {"version", 2}};
  doc["created"] = utc_timestamp();
  describe_inputs(o, link, base, model, scaling, doc);
  doc["calibration"]["machine"] = calibration_machine(*in.env_of.at(&base));
  if (!host_sharing.is_null()) doc["calibration"]["host_sharing"] = host_sharing;
  if (!reduction.is_null()) doc["calibration"]["reduction"] = reduction;
  const int calibration_workers = base.at("config").value("num_workers", 0);
  EngineCalibration engine = o.topology.simulate && emulated ? files_calibration(o, in) : EngineCalibration{};
  if (reduction.contains("host_profile")) engine.from_host_profile.push_back("reduction");
  if (o.topology.simulate) {
    describe_topology(o, link, engine, doc);
    doc["topology"]["engine_calibration"] = engine.record;
    if (!engine.not_used.empty()) doc["topology"]["engine_calibration_not_used"] = engine.not_used;
    doc["topology"]["requested_rate_share"] = engine.rate_share_record;
  }
  project_curves(o, model, link.model, scaling, engine, doc);
  doc["measured"] = nlohmann::json::array();
  for (const auto* run : in.runs) {
    if (run->at("world_size").get<int>() >= 2) {
      doc["measured"].push_back(measured_point(*run, in, model, link, scaling, calibration_workers));
    }
  }
  return doc;
}

}  // namespace dpbench
