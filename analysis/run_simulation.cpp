#include "analysis/run_simulation.hpp"

#include <chrono>
#include <map>
#include <string>
#include <utility>

#include "train/buckets.hpp"
#include "train/engine_probe.hpp"
#include "train/strategy.hpp"

namespace dpbench {

namespace {

// `platform` with the run's probed intra-node rate (train/engine_probe.hpp probe_intra_node),
// where it has one, and the record of where that rate came from.
std::pair<SimPlatform, nlohmann::json> intra_node_platform(const SimPlatform& platform, const RunResult& r) {
  SimPlatform pf = platform;
  if (pf.ranks_per_node < 2) return {pf, nullptr};
  if (r.engine_probe && r.engine_probe->intra_node) {
    const IntraNodeProbe& probe = *r.engine_probe->intra_node;
    pf.intra_bytes_per_s = probe.bytes_per_s;
    pf.intra_latency_s = probe.latency_s / 2.0;  // a route inside a node crosses two ranks' links
    return {pf,
            {{"bytes_per_s", probe.bytes_per_s},
             {"latency_s", probe.latency_s},
             {"floats", probe.floats},
             {"seconds", probe.seconds},
             {"repetitions", probe.repetitions},
             {"runs", probe.runs},
             {"source",
              "probed: local ranks 0 and 1 of every node sent each other one float, then the floats, in turn with "
              "the run's communicator; rank 0's median round trips (of every repetition of the runs pooled)"}}};
  }
  return {pf, {{"bytes_per_s", pf.intra_bytes_per_s}, {"source", "assumed: the run has no intra-node probe"}}};
}

// What the simulation's schedules charged for the host's reductions (the run's probe's rates).
nlohmann::json reduction_record(const RunResult& r) {
  return {{"rates", r.engine_probe->reduction.to_json()},
          {"runs", r.engine_probe->runs},
          {"method", "rank 0 timed the host's add (out = received + own over floats, core/reduction.hpp sum_floats) "
                     "at each size after the engine probe, the median of its repetitions (of each size's medians "
                     "over the runs pooled); every collective that sums what it receives (a ring's reduce-scatter "
                     "steps, a reducing chain's slices, gloo's and libnbc's reduces, the roots and servers of p2p "
                     "pushes) pays a compute of its bytes at the rate interpolated between sizes"}};
}

// A per-message kind's first (smaller) probe: its floats, and the last constant overhead fitted at
// its size.
struct FirstProbe {
  std::size_t floats = 0;
  double overhead_s = 0;
};

// One probe's fit on the probed platform, the probe's sequence up to it in `prefix`, into
// `platform`: a dense collective's share of the link; a per-message one's (train/engine_probe.hpp
// probed_per_message) constant overhead, or, for a larger probe of a kind already fitted (a sparse
// run's second half, kLargeProbeFactor x the size), its cost per byte, the constant lowered so that
// the smaller probe's messages keep the cost fitted on them. A dense one's record also holds
// `overhead_at_link_s`: the cost per message between nodes that, at the link's rate, ends it when
// the probe did (0 where its share is 1). Returns the probe's record.
nlohmann::json fit_probe(const StepSchedule& prefix, SimPlatform& platform, const CollectiveProbe& probe, bool sparse,
                         std::map<CollectiveKind, FirstProbe>& first) {
  const auto k = static_cast<std::size_t>(probe.kind);
  const bool per_message = probed_per_message(probe.kind, sparse);
  const auto seen = first.find(probe.kind);
  const bool larger = per_message && seen != first.end() && probe.floats > seen->second.floats;
  if (per_message && seen == first.end()) first.emplace(probe.kind, FirstProbe{probe.floats, 0.0});
  EfficiencyFit fit;
  double overhead_at_link_s = 0;  // a dense kind's: beside its share of the link
  if (larger) {
    // The smaller probe's messages keep their fitted cost: each of its floats / world size.
    const double small_bytes = 4.0 * static_cast<double>(seen->second.floats) / prefix.world_size();
    const double kept = seen->second.overhead_s;
    fit = fit_engine_overhead_per_byte(prefix, platform, probe.kind, probe.end_s, kept, small_bytes);
    platform.engine_overhead_per_byte_s.resize(kCollectiveKinds, 0.0);
    platform.engine_overhead_per_byte_s[k] = fit.overhead_s;
    platform.engine_overhead_s[k] = std::max(0.0, kept - fit.overhead_s * small_bytes);
  } else if (per_message) {
    fit = fit_engine_overhead(prefix, platform, probe.kind, probe.end_s);
    platform.engine_overhead_s[k] = fit.overhead_s;
    first.at(probe.kind).overhead_s = fit.overhead_s;
  } else {
    fit = fit_engine_efficiency(prefix, platform, probe.kind, probe.end_s);
    // The same end as a cost per message between nodes at the link's rate (0 where the link alone
    // takes as long): recorded for the host profile's ranks sharing cores (analysis/host_profile.hpp).
    if (fit.efficiency < 1) {
      SimPlatform at_link = platform;
      at_link.engine_efficiency[k] = 0.0;
      overhead_at_link_s = fit_engine_overhead(prefix, at_link, probe.kind, probe.end_s).overhead_s;
    }
    platform.engine_efficiency[k] = fit.efficiency;
  }
  nlohmann::json out = {{"collective", collective_name(probe.kind)},
                        {"floats", probe.floats},
                        {"measured_s", probe.seconds},
                        {"measured_end_s", probe.end_s},
                        {"simulated_end_at_link_s", fit.at_link_s},
                        {"efficiency", per_message ? 1.0 : fit.efficiency},
                        {"simulated_end_s", fit.fitted_s},
                        {"simulations", fit.simulations}};
  if (larger) {
    out["overhead_per_byte_s"] = fit.overhead_s;
  } else if (per_message) {
    out["overhead_s"] = fit.overhead_s;
  } else {
    out["overhead_at_link_s"] = overhead_at_link_s;
  }
  if (!probe.counts.empty()) out["counts"] = probe.counts;
  return out;
}

// A calibrated platform, the record of its fit and the seconds the fit took.
struct Calibration {
  SimPlatform platform;
  nlohmann::json record;
  double wall_s = 0;
};

// The collectives' sequence of run `r` over `engine`'s algorithms, as its steps run them (the node
// hierarchy, the wire format of its all-reduce and the host's reductions as the probe timed them),
// appended to `s`.
Collectives run_collectives(StepSchedule& s, const RunResult& r, Backend engine) {
  const BucketAllreduce how = bucket_allreduce(r.config);
  if (r.engine_probe) s.set_reduction(r.engine_probe->reduction);
  Collectives collectives(s, engine);
  collectives.set_node_hierarchy(how.ranks_per_node);
  collectives.set_wire_format(how.format);
  return collectives;
}

// `platform` with no engine fitted yet: every collective at the link's rate, no overhead.
Calibration blank_calibration(const SimPlatform& platform) {
  Calibration c{platform, {}, 0};
  c.platform.engine_efficiency.assign(kCollectiveKinds, 0.0);
  c.platform.engine_overhead_s.assign(kCollectiveKinds, 0.0);
  c.platform.engine_overhead_per_byte_s.assign(kCollectiveKinds, 0.0);
  return c;
}

// The platform with the engine's calibration from the run's probe (train/engine_probe.hpp): for
// each probed collective in turn, the share of the link at which its messages must move between
// nodes for SimGrid, playing the probe's sequence up to it on the same platform, to end it when
// the probe saw it end (sim/simulate.hpp fit_engine_efficiency). nullopt without a probe. Throws
// what simulate() throws.
std::optional<Calibration> calibrate(const SimPlatform& platform, const RunResult& r, Backend engine) {
  if (!r.engine_probe || r.engine_probe->collectives.empty()) return std::nullopt;
  const auto t0 = std::chrono::steady_clock::now();
  Calibration c = blank_calibration(platform);
  nlohmann::json per = nlohmann::json::array();
  StepSchedule prefix(r.config.world_size);
  Collectives collectives = run_collectives(prefix, r, engine);
  std::map<CollectiveKind, FirstProbe> first;  // each per-message kind's first (smaller) probe
  for (const CollectiveProbe& probe : r.engine_probe->collectives) {
    collectives.run(probe.kind, probe.floats, probe.counts);
    per.push_back(fit_probe(prefix, c.platform, probe, r.config.model.dlrm.sparse_grad, first));
  }
  c.record = {{"collectives", per},
              {"repetitions", r.engine_probe->repetitions},
              {"runs", r.engine_probe->runs},
              {"method", "before the first step every rank ran the collectives of the mode's schedule back to back "
                         "in the step's order, each on the floats the step moves in it (the gradient's; ps's scatter "
                         "and gather the batch's and its logits'; at most 25 MiB of them) with the run's own "
                         "communicator, after a barrier; from when the last rank left the barrier, each ends when its "
                         "last rank left it; after unmeasured repetitions for 0.3 s, each collective's mean end over "
                         "the repetitions, of every repetition of the runs pooled (`runs`: a `run`'s repetitions of "
                         "the mode). "
                         "Efficiency: the share of the link at which SimGrid, playing the sequence up to that "
                         "collective on the probed platform, ends it when the probe did (1: the link alone takes as "
                         "long)"}};
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

// A per-message kind's cost per message at each of its in-step sizes (each collective fitted alone
// on `platform`, SimGrid playing it from a common start to end after its seconds), then the
// least-squares line through them over the message's bytes (overhead_line), set on `pf`.
nlohmann::json fit_message_line(SimPlatform& pf, const SimPlatform& platform, const RunResult& r, Backend engine,
                                const std::vector<const CollectiveProbe*>& probes) {
  std::vector<std::pair<double, double>> points;
  nlohmann::json per = nlohmann::json::array();
  const auto k = static_cast<std::size_t>(probes.front()->kind);
  SimPlatform unfitted = platform;
  unfitted.engine_overhead_s[k] = unfitted.engine_overhead_per_byte_s[k] = 0.0;
  for (const CollectiveProbe* probe : probes) {
    StepSchedule alone(r.config.world_size);
    run_collectives(alone, r, engine).run(probe->kind, probe->floats, probe->counts);
    const EfficiencyFit fit = fit_engine_overhead(alone, unfitted, probe->kind, probe->seconds);
    points.emplace_back(4.0 * static_cast<double>(probe->floats) / r.config.world_size, fit.overhead_s);
    per.push_back({{"floats", probe->floats}, {"overhead_s", fit.overhead_s}, {"simulated_at_link_s", fit.at_link_s}});
  }
  const auto [fixed, per_byte] = overhead_line(points);
  pf.engine_overhead_s[k] = fixed;
  pf.engine_overhead_per_byte_s[k] = per_byte;
  return {{"overhead_s", fixed}, {"overhead_per_byte_s", per_byte}, {"points", per}};
}

// A dense kind's share of the link: its in-step collectives back to back on `platform`, from a
// common start, end after the sum of their seconds (fit_engine_efficiency), set on `pf`.
nlohmann::json fit_dense_share(SimPlatform& pf, const SimPlatform& platform, const RunResult& r, Backend engine,
                               const std::vector<const CollectiveProbe*>& probes) {
  StepSchedule together(r.config.world_size);
  Collectives collectives = run_collectives(together, r, engine);
  double seconds = 0;
  for (const CollectiveProbe* probe : probes) {
    collectives.run(probe->kind, probe->floats, probe->counts);
    seconds += probe->seconds;
  }
  const EfficiencyFit fit = fit_engine_efficiency(together, platform, probes.front()->kind, seconds);
  pf.engine_efficiency[static_cast<std::size_t>(probes.front()->kind)] = fit.efficiency;
  return {{"efficiency", fit.efficiency},
          {"measured_s", seconds},
          {"simulated_at_link_s", fit.at_link_s},
          {"simulated_s", fit.fitted_s},
          {"collectives", probes.size()}};
}

// The engine's calibration from the step's own collectives (in_step_collectives), kind by kind: a
// dense one's share of the link over all of its collectives (fit_dense_share; `efficiency`); a
// per-message one's (probed_per_message) constant and cost per byte (fit_message_line;
// `per_message`: SMPI's os/or, fitted from measurements at several sizes). `probed`: the probe's
// calibration, whose fits the kinds the steps did not time keep (nullopt: the link's rate).
Calibration calibrate_in_step(const SimPlatform& platform, const std::optional<Calibration>& probed, const RunResult& r,
                              Backend engine, const std::vector<CollectiveProbe>& in_step) {
  const auto t0 = std::chrono::steady_clock::now();
  Calibration c = probed ? *probed : blank_calibration(platform);
  c.platform.engine_overhead_per_byte_s.resize(kCollectiveKinds, 0.0);
  const SimPlatform unfitted = c.platform;
  nlohmann::json per = nlohmann::json::array();
  std::map<CollectiveKind, std::vector<const CollectiveProbe*>> by_kind;
  for (const CollectiveProbe& probe : in_step) {
    by_kind[probe.kind].push_back(&probe);
    per.push_back({{"collective", collective_name(probe.kind)},
                   {"floats", probe.floats},
                   {"measured_s", probe.seconds},
                   {"measured_end_s", probe.end_s}});
    if (!probe.counts.empty()) per.back()["counts"] = probe.counts;
  }
  nlohmann::json dense = nlohmann::json::object(), per_message = nlohmann::json::object();
  for (const auto& [kind, probes] : by_kind) {
    if (probed_per_message(kind, r.config.model.dlrm.sparse_grad)) {
      per_message[collective_name(kind)] = fit_message_line(c.platform, unfitted, r, engine, probes);
    } else {
      dense[collective_name(kind)] = fit_dense_share(c.platform, unfitted, r, engine, probes);
    }
  }
  for (auto& entry : per) {  // each collective with its kind's fit, as a probe's record has it
    const std::string kind = entry.at("collective");
    entry["efficiency"] = dense.contains(kind) ? dense[kind]["efficiency"] : nlohmann::json(1.0);
    if (!per_message.contains(kind)) continue;
    entry["overhead_s"] = per_message[kind]["overhead_s"];
    entry["overhead_per_byte_s"] = per_message[kind]["overhead_per_byte_s"];
  }
  c.record = {{"collectives", per},
              {"efficiency", dense},
              {"per_message", per_message},
              {"steps", simulated_steps(r, 0).size()},
              {"method", "the step's own collectives, as every rank timed them inside its timed steps by the host's "
                         "monotonic clock: each from when its last rank entered it to when its last rank left it, "
                         "the mean over the steps. A dense kind's share of the link at which SimGrid, playing its "
                         "collectives back to back from a common start, ends them after the sum of those times "
                         "(efficiency); a per-message kind's cost per message fitted on each of its collectives "
                         "alone, then the least-squares line through those costs over the message's bytes "
                         "(per_message). The kinds the steps did not time keep the probe's fit"}};
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

// The per-step figures of a simulation of `steps` steps played back to back, once.
SimulationResult per_step(SimulationResult r, int steps) {
  const auto n = static_cast<double>(steps);
  r.step_s /= n;
  for (double& t : r.rank_step_s) t /= n;
  r.messages /= steps;
  r.config["replayed_steps"] = steps;
  return r;
}

// The step `schedules` makes on `platform`: the replay's (its steps played once, its end per
// step) where there is one, else the mean step's steady state.
SimulationResult play(const MeasuredSchedules& schedules, const SimPlatform& platform) {
  if (schedules.replay) return per_step(simulate(*schedules.replay, platform, 1), schedules.replayed_steps);
  return simulate(*schedules.mean, platform);
}

// The schedule played by SimGrid on the probed platform with the engine's calibration (each
// collective's messages between nodes at its probed share of the link) when the run has a probe:
// the simulation's answer, with its error against `measured`; beside it ("uncalibrated"), the
// same with every engine taken to move bytes at the link's rate.
nlohmann::json simulate_run(const SimPlatform& platform, const RunResult& r, const MeasuredSchedules& schedules,
                            Backend engine, double measured) {
  const std::optional<StepSchedule>& schedule = schedules.mean;
  if (!schedule) return {{"unavailable", "the strategy has no schedule"}};
  const Strategy& s = *r.traits.strategy;
  if (s.unsimulated != nullptr) {
    if (std::string why = s.unsimulated(r.config); !why.empty()) return {{"unavailable", std::move(why)}};
  }
  if (!simulation_available()) {
    return {{"unavailable", "this dpbench was built without SimGrid (libsimgrid-dev): simulation is unavailable"}};
  }
  SimulationResult plain, sim, mean, probed;
  std::optional<Calibration> calibration;
  const std::optional<std::vector<CollectiveProbe>> in_step = in_step_collectives(r);
  std::optional<Calibration> from_probe;  // the probe's: beside an in-step calibration
  try {
    from_probe = calibrate(platform, r, engine);
    calibration = in_step ? calibrate_in_step(platform, from_probe, r, engine, *in_step) : from_probe;
    if (!in_step) from_probe.reset();
    plain = play(schedules, platform);
    sim = calibration ? play(schedules, calibration->platform) : plain;
    if (from_probe) probed = play(schedules, from_probe->platform);
    if (schedules.replay) mean = simulate(*schedule, calibration ? calibration->platform : platform);
  } catch (const Error& e) {  // the measured run stands; the record says why it has no simulation
    return {{"unavailable", e.what()}};
  }
  nlohmann::json out = {
      {"simulated_step_s", sim.step_s},
      {"error", (sim.step_s - measured) / measured},
      {"rank_step_s", sim.rank_step_s},
      {"engine", engine},
      {"calibrated", calibration.has_value()},
      {"messages_per_step", plain.messages / plain.config.at("steps").get<long>()},
      {"wall_s", plain.wall_s + mean.wall_s + (calibration ? calibration->wall_s + sim.wall_s : 0.0) +
                     (from_probe ? from_probe->wall_s + probed.wall_s : 0.0)},
      {"simulator", plain.config},
      {"platform", calibration ? calibration->platform.to_json() : platform.to_json()},
      {"method", "the run's steps back to back (replayed_steps of them, as they ran), each with every rank's "
                 "forward, backward, optimizer and data phases of that step as measured, so that a rank that "
                 "computed longer keeps the others waiting as it did (with one step measured: its mean phases, "
                 "three steps played); every message of the strategy's schedule over the engine's collective "
                 "algorithms, played by SimGrid on the probed links and the probed intra-node link (intra_node); "
                 "each collective's messages between nodes at the engine's calibrated share of the link "
                 "(calibration), or at the link's rate without a probe"}};
  if (schedules.replay) {
    out["replayed_steps"] = schedules.replayed_steps;
    out["mean_phases"] = {{"simulated_step_s", mean.step_s}, {"error", (mean.step_s - measured) / measured}};
  }
  if (calibration) {
    out["calibration"] = calibration->record;
    out["uncalibrated"] = {{"simulated_step_s", plain.step_s}, {"error", (plain.step_s - measured) / measured}};
  }
  if (from_probe) {
    out["probe_calibrated"] = {{"simulated_step_s", probed.step_s},
                               {"error", (probed.step_s - measured) / measured},
                               {"calibration", from_probe->record}};
  }
  return out;
}

}  // namespace

const std::vector<StepRecord>& simulated_steps(const RunResult& r, std::size_t i) {
  return r.pooled_steps.size() == r.ranks.size() ? r.pooled_steps[i] : r.ranks.at(i).steps;
}

std::optional<std::vector<CollectiveProbe>> in_step_collectives(const RunResult& r) {
  const std::size_t p = r.ranks.size();
  if (p < 2) return std::nullopt;
  const std::vector<StepRecord>& first = simulated_steps(r, 0);
  if (first.empty() || first.front().collectives.empty()) return std::nullopt;
  const std::vector<CollectiveTiming>& shape = first.front().collectives;
  std::vector<CollectiveProbe> out(shape.size());
  std::vector<std::vector<double>> own(shape.size(), std::vector<double>(p, 0.0));
  for (std::size_t s = 0; s < first.size(); ++s) {
    double start = 0;
    for (std::size_t c = 0; c < shape.size(); ++c) {
      double enter = 0, exit = 0;
      for (std::size_t i = 0; i < p; ++i) {
        const std::vector<StepRecord>& steps = simulated_steps(r, i);
        if (steps.size() != first.size() || steps[s].collectives.size() != shape.size()) return std::nullopt;
        const CollectiveTiming& t = steps[s].collectives[c];
        if (t.kind != shape[c].kind) return std::nullopt;
        enter = i == 0 ? t.enter_s : std::max(enter, t.enter_s);
        exit = i == 0 ? t.exit_s : std::max(exit, t.exit_s);
        own[c][i] += static_cast<double>(t.floats);
      }
      out[c].seconds += std::max(0.0, exit - enter);
      if (c == 0) start = enter;
      out[c].end_s += exit - start;
    }
  }
  const auto steps = static_cast<double>(first.size());
  for (std::size_t c = 0; c < shape.size(); ++c) {
    CollectiveProbe& probe = out[c];
    probe.kind = shape[c].kind;
    probe.seconds /= steps;
    probe.end_s /= steps;
    if (probe.kind != CollectiveKind::allgather && probe.kind != CollectiveKind::reduce_scatter) {
      probe.floats = std::max<std::size_t>(1, static_cast<std::size_t>(std::llround(own[c][0] / steps)));
      continue;
    }
    for (const double f : own[c]) probe.counts.push_back(static_cast<std::size_t>(std::llround(f / steps)));
    for (const std::size_t n : probe.counts) probe.floats += n;
    if (equal_counts(probe.counts)) probe.counts.clear();
  }
  return out;
}

std::pair<double, double> overhead_line(const std::vector<std::pair<double, double>>& points) {
  if (points.empty()) return {0.0, 0.0};
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) sx += x, sy += y, sxx += x * x, sxy += x * y;
  const auto n = static_cast<double>(points.size());
  const double var = sxx - sx * sx / n;
  const double slope = var > 0 ? (sxy - sx * sy / n) / var : 0.0;
  if (slope <= 0) return {sy / n, 0.0};
  const double fixed = (sy - slope * sx) / n;
  if (fixed < 0) return {0.0, sxx > 0 ? sxy / sxx : 0.0};
  return {fixed, slope};
}

nlohmann::json simulate_measured_run(const SimPlatform& platform, const RunResult& r,
                                     const MeasuredSchedules& schedules, Backend engine, double measured) {
  const auto [run_platform, intra] = intra_node_platform(platform, r);
  nlohmann::json simulation = simulate_run(run_platform, r, schedules, engine, measured);
  if (!intra.is_null()) simulation["intra_node"] = intra;
  if (r.engine_probe && !r.engine_probe->reduction.empty()) simulation["reduction"] = reduction_record(r);
  return simulation;
}

}  // namespace dpbench
