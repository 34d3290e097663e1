#include "analysis/network_results.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "train/strategy.hpp"
#include "core/error.hpp"
#include "core/stats.hpp"
#include "analysis/run_simulation.hpp"
#include "sim/simulate.hpp"

namespace dpbench {

namespace {

// The link the model reads: the slowest probed direction of any link, alpha from the largest RTT.
LinkModel probed_link(const nlohmann::json& network) {
  double rate = 0, rtt = 0;
  for (const auto& l : network.at("links")) {
    const double slow = std::min(l.at("probed_up_bytes_per_s").get<double>(),
                                 l.at("probed_down_bytes_per_s").get<double>());
    rate = rate == 0 ? slow : std::min(rate, slow);
    rtt = std::max(rtt, l.at("rtt_s").get<double>());
  }
  return {"probed", rtt / 2.0, 1.0 / rate, "emulated cluster: slowest probed link, alpha = RTT / 2"};
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

// The node rank `rank` ran on: as it recorded it, else (records without one) rank / per_node, the
// env launcher's placement. Under torchrun the rendezvous decides which node holds which ranks.
int node_of(const RankResult& rank, int per_node) { return rank.node >= 0 ? rank.node : rank.rank / per_node; }

// Per node: the bytes its link's interface counted, the bytes its ranks' communicators counted,
// and the bytes the run's schedule says cross the node's link (crossing: {out, in} per node, or
// empty when the strategy has no schedule), and the messages that carry them. The wire check
// compares the wire with the crossing bytes (within kWireOverCountedMin, and kWireOverCountedMax
// plus kWirePerMessageBytes per message), so it holds for several ranks per node too (their
// traffic to each other stays inside).
nlohmann::json node_bytes(const RunResult& r, int nodes, int per_node,
                          const std::vector<std::pair<double, double>>& crossing,
                          const std::vector<std::pair<double, double>>& messages) {
  nlohmann::json out = nlohmann::json::array();
  auto ratio = [](double wire, double counted) {
    return counted > 0 ? nlohmann::json(wire / counted) : nlohmann::json();
  };
  for (int n = 0; n < nodes; ++n) {
    const RankResult* first = nullptr;
    double sent = 0, received = 0;
    for (const auto& rank : r.ranks) {
      if (node_of(rank, per_node) != n) continue;
      if (first == nullptr) first = &rank;
      sent += static_cast<double>(rank.comm_per_step.bytes_sent);
      received += static_cast<double>(rank.comm_per_step.bytes_received);
    }
    if (first == nullptr) throw Error(fmt::format("emulated cluster: no rank recorded node {}", n));
    const double wire_sent = static_cast<double>(first->wire_per_step.bytes_sent);
    const double wire_received = static_cast<double>(first->wire_per_step.bytes_received);
    nlohmann::json e = {{"node", n},
                        {"wire_sent_bytes_per_step", wire_sent},
                        {"wire_received_bytes_per_step", wire_received},
                        {"counted_sent_bytes_per_step", sent},
                        {"counted_received_bytes_per_step", received}};
    e["wire_over_counted_sent"] = ratio(wire_sent, sent);
    e["wire_over_counted_received"] = ratio(wire_received, received);
    if (crossing.empty()) {
      e["agrees"] = nullptr;
      e["note"] = "the strategy has no schedule to say which bytes cross the node's link";
      out.push_back(std::move(e));
      continue;
    }
    const auto [cross_out, cross_in] = crossing.at(static_cast<std::size_t>(n));
    e["schedule_sent_bytes_per_step"] = cross_out;
    e["schedule_received_bytes_per_step"] = cross_in;
    e["wire_over_schedule_sent"] = ratio(wire_sent, cross_out);
    e["wire_over_schedule_received"] = ratio(wire_received, cross_in);
    const auto [messages_out, messages_in] = messages.at(static_cast<std::size_t>(n));
    const double allowance = kWirePerMessageBytes * (messages_out + messages_in);
    e["schedule_messages_per_step"] = {{"out", messages_out}, {"in", messages_in}};
    e["wire_allowed_sent_bytes_per_step"] = kWireOverCountedMax * cross_out + allowance;
    e["wire_allowed_received_bytes_per_step"] = kWireOverCountedMax * cross_in + allowance;
    bool agrees = wire_sent >= 0 && wire_received >= 0 && wire_sent <= kWireOverCountedMax * cross_out + allowance &&
                  wire_received <= kWireOverCountedMax * cross_in + allowance;
    for (const auto* key : {"wire_over_schedule_sent", "wire_over_schedule_received"}) {
      if (e[key].is_number()) agrees = agrees && e[key].get<double>() >= kWireOverCountedMin;
    }
    e["agrees"] = agrees;
    out.push_back(std::move(e));
  }
  return out;
}

double median_of(const std::vector<StepRecord>& steps, double (*get)(const StepRecord&)) {
  std::vector<double> v;
  for (const auto& st : steps) v.push_back(get(st));
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// Who waited for whom: every rank's median compute and communication time per step.
nlohmann::json per_rank(const RunResult& r, int per_node) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& rank : r.ranks) {
    out.push_back(
        {{"rank", rank.rank},
         {"node", node_of(rank, per_node)},
         {"step_s", median_of(rank.steps, [](const StepRecord& st) { return st.step_time; })},
         {"compute_s",
          median_of(rank.steps,
                    [](const StepRecord& st) { return st.phases.forward + st.phases.backward + st.phases.optimizer; })},
         {"comm_s", median_of(rank.steps, [](const StepRecord& st) { return st.phases.comm; })},
         {"comm_exposed_s", median_of(rank.steps, [](const StepRecord& st) { return st.phases.comm_exposed; })}});
  }
  return out;
}

// The platform of an emulated run: every node's link to the switch as probed, each direction on
// its own (the probe's RTT to the switch halved as its latency); the ranks of one node on an
// intra-node link of kAssumedIntraBytesPerS until a run's probe replaces it (intra_node_platform);
// TCP's send buffer as Linux grows it on the slowest link (emulated_tcp_send_buffer_bytes).
constexpr double kAssumedIntraBytesPerS = 1e9;
SimPlatform probed_platform(const nlohmann::json& network) {
  SimPlatform pf;
  for (const auto& l : network.at("links")) {
    pf.nodes.push_back({l.at("probed_up_bytes_per_s").get<double>(), l.at("probed_down_bytes_per_s").get<double>(),
                        l.at("rtt_s").get<double>() / 2.0});
  }
  pf.ranks_per_node = network.at("ranks_per_node").get<int>();
  pf.intra_bytes_per_s = kAssumedIntraBytesPerS;
  pf.send_buffer_bytes = emulated_tcp_send_buffer_bytes(pf);
  return pf;
}

// A step's compute as the schedule plays it: its data wait and staging, forward, backward and
// optimizer phases as measured.
RankCompute compute_of(const PhaseTimes& t) { return {t.data_wait + t.h2d, t.forward, t.backward, t.optimizer}; }

// A rank's mean compute over its steps (0 without any): the mean, as the simulation it feeds is
// held against the mean step.
RankCompute mean_compute(const std::vector<StepRecord>& steps) {
  RankCompute sum;
  for (const auto& st : steps) {
    const RankCompute c = compute_of(st.phases);
    sum = {sum.data + c.data, sum.forward + c.forward, sum.backward + c.backward, sum.optimizer + c.optimizer};
  }
  const double n = steps.empty() ? 1.0 : static_cast<double>(steps.size());
  return {sum.data / n, sum.forward / n, sum.backward / n, sum.optimizer / n};
}

// The inputs of the run's step as its strategy's schedule: every rank's mean forward,
// backward, optimizer and data phases as measured (over simulated_steps), its buckets, the bytes
// it sent and the host's reductions as its probe timed them. The engine is left to the caller.
ScheduleInputs measured_schedule_inputs(const RunResult& r) {
  ScheduleInputs in;
  in.config = r.config;
  in.num_params = r.num_params;
  in.input_floats = r.input_features;
  in.classes = r.num_classes;
  in.buckets = r.schedule_buckets;
  for (const auto& rank : r.ranks) {
    in.measured_bytes_sent += static_cast<double>(rank.comm_per_step.bytes_sent) / static_cast<double>(r.ranks.size());
  }
  for (std::size_t i = 0; i < r.ranks.size(); ++i) in.compute.push_back(mean_compute(simulated_steps(r, i)));
  if (r.engine_probe) in.reduction = r.engine_probe->reduction;
  return in;
}

// The most steps the in-run simulation replays (evenly spread over a longer run's steps): 3 runs of
// 40 steps, at tens of messages a step on the emulated cluster's few ranks.
constexpr int kMaxReplayedSteps = 120;

// The run's steps back to back as its strategy's schedule, each with every rank's data, forward,
// backward and optimizer phases of that step as measured (simulated_steps; at most
// kMaxReplayedSteps of them, evenly spread): where one rank computed longer in a step, the others
// wait for it in the replay as they did, which mean phases leave out. `in` gives the rest (the
// buckets, the engine, the bytes). Leaves `schedules.replay` empty where a rank has fewer than
// two steps or the strategy has no schedule.
void add_replay(const RunResult& r, ScheduleInputs in, MeasuredSchedules& schedules) {
  const Strategy& s = *r.traits.strategy;
  std::size_t n = r.ranks.empty() ? 0 : simulated_steps(r, 0).size();
  for (std::size_t i = 0; i < r.ranks.size(); ++i) n = std::min(n, simulated_steps(r, i).size());
  if (s.schedule == nullptr || n < 2) return;
  const std::size_t played = std::min<std::size_t>(n, kMaxReplayedSteps);
  StepSchedule& replay = schedules.replay.emplace(r.config.world_size);
  for (std::size_t k = 0; k < played; ++k) {
    const std::size_t step = k * n / played;
    for (std::size_t i = 0; i < r.ranks.size(); ++i) in.compute.at(i) = compute_of(simulated_steps(r, i)[step].phases);
    s.schedule(in, replay);
  }
  schedules.replayed_steps = static_cast<int>(played);
}

// The per-link bandwidth bound: the time the busiest link direction needs for the bytes the
// schedule sends across it, at its probed rate. No run can communicate faster.
double link_bound_s(const SimPlatform& platform, const std::vector<std::pair<double, double>>& crossing) {
  double bound = 0;
  for (std::size_t n = 0; n < crossing.size(); ++n) {
    bound = std::max({bound, crossing[n].first / platform.nodes.at(n).up_bytes_per_s,
                      crossing[n].second / platform.nodes.at(n).down_bytes_per_s});
  }
  return bound;
}

// Cells of the network table, each from one run's "network" object.
std::string simulated_cell(const nlohmann::json& n) {
  const auto& sim = n.at("simulation");
  if (!sim.contains("simulated_step_s")) return std::string("unavailable");
  return fmt::format("{:.1f} ms", 1e3 * sim.at("simulated_step_s").get<double>());
}

std::string simulation_error_cell(const nlohmann::json& n) {
  const auto& sim = n.at("simulation");
  if (!sim.contains("error")) return std::string("-");
  if (!sim.contains("uncalibrated")) return fmt::format("{:+.1f} % (-)", 100.0 * sim.at("error").get<double>());
  return fmt::format("{:+.1f} % ({:+.1f} %)", 100.0 * sim.at("error").get<double>(),
                     100.0 * sim.at("uncalibrated").at("error").get<double>());
}

std::string sampling_error_cell(const nlohmann::json& n) {
  const auto& sim = n.at("simulation");
  if (!sim.contains("measured")) return std::string("-");
  const auto& m = sim.at("measured");
  return fmt::format("±{:.1f} % ({} steps)", 100.0 * m.at("error_two_se").get<double>(),
                     m.at("steps").get<std::size_t>());
}

std::string wire_cell(const nlohmann::json& n) {
  double lo = 1e300, hi = 0;
  for (const auto& node : n.at("nodes")) {
    for (const auto* key : {"wire_over_schedule_sent", "wire_over_schedule_received"}) {
      if (!node.contains(key)) continue;
      if (!node.at(key).is_number()) continue;
      lo = std::min(lo, node.at(key).get<double>());
      hi = std::max(hi, node.at(key).get<double>());
    }
  }
  return hi == 0 ? std::string("-") : fmt::format("{:.3f} - {:.3f}", lo, hi);
}

}  // namespace

namespace {
// The run's bytes for the alpha-beta terms; the gradient's as they cross the wire in `format`
// (16 bits each under a 16-bit hook; PowerSGD's uncompressed tensors, Ps and Qs under powersgd:R).
StepModel wire_step_model(const RunResult& r, WireFormat format) {
  StepModel m;
  m.param_bytes = static_cast<double>(r.num_params) * (format == WireFormat::fp32 ? 4.0 : 2.0);
  if (r.config.allreduce.comm_hook.powersgd_rank > 0 && !r.schedule_buckets.empty()) {
    double floats = 0;
    for (const ScheduleBucket& b : r.schedule_buckets) {
      for (const std::size_t n : b.allreduces) floats += static_cast<double>(n);
    }
    m.param_bytes = floats * 4.0;
  }
  if (r.config.model.dlrm.sparse_grad && r.config.world_size > 1) {
    // Sparse pushes and pulls move what the batch touched: the gradient whose sharded push and
    // pull (2 (p-1)/p of it) send what the busiest rank sent per step.
    double sent = 0;
    for (const auto& rank : r.ranks) sent = std::max(sent, static_cast<double>(rank.comm_per_step.bytes_sent));
    const double p = r.config.world_size;
    m.param_bytes = sent * p / (2.0 * (p - 1.0));
  }
  m.sample_bytes = static_cast<double>(r.input_features) * 4.0;
  m.logit_bytes = static_cast<double>(r.num_classes) * 4.0;
  return m;
}
// Rank 0's mean step time over its simulated_steps, that less its exposed communication (the
// compute the projection keeps as measured), and its mean communication time; seconds. With the
// steps' count and the mean step's relative standard error.
struct StepMeans {
  double step_s, compute_s, comm_s;
  std::size_t steps;
  double step_relative_se;
};
StepMeans step_means(const RunResult& r) {
  std::vector<double> step_s, non_comm_s, comm_s;
  for (const auto& st : simulated_steps(r, 0)) {
    step_s.push_back(st.step_time);
    non_comm_s.push_back(st.step_time - st.phases.comm_exposed);
    comm_s.push_back(st.phases.comm);
  }
  return {mean(step_s), mean(non_comm_s), mean(comm_s), step_s.size(), relative_standard_error(step_s)};
}

// What the in-run simulation was held against, and the sampling error of that comparison: the
// mean step's relative standard error over its steps, and the engine probe's over its repetitions
// (of the last collective's end, the sequence's). The calibration makes the simulated
// communication follow the probe, so the simulated step (simulated_s) moves with the probe by its
// communication's share (what is left of it after rank 0's measured compute); `error_two_se`, two
// of the two combined, is what sampling alone moves the error by, at about 95 % for independent
// samples.
nlohmann::json measured_sampling(const RunResult& r, const StepMeans& means, double simulated_s) {
  nlohmann::json out = {{"step_s", means.step_s},
                        {"steps", means.steps},
                        {"runs", r.pooled_steps.empty() ? 1 : (r.engine_probe ? r.engine_probe->runs : 1)},
                        {"step_relative_se", means.step_relative_se}};
  double probe_se = 0;
  if (r.engine_probe && !r.engine_probe->repetition_ends.empty()) {
    std::vector<double> ends;
    for (const auto& rep : r.engine_probe->repetition_ends) {
      if (!rep.empty()) ends.push_back(rep.back());
    }
    out["probe_repetitions"] = ends.size();
    out["probe_relative_se"] = relative_standard_error(ends);
    const double share = simulated_s > 0 ? std::clamp(1.0 - means.compute_s / simulated_s, 0.0, 1.0) : 1.0;
    out["simulated_comm_share"] = share;
    probe_se = share * relative_standard_error(ends);
  }
  out["error_two_se"] = 2.0 * std::hypot(means.step_relative_se, probe_se);
  return out;
}
}  // namespace

namespace {

// The alpha-beta projection of a run's step: its measured compute, plus `comm_model` seconds of
// communication of which the strategy's overlapped `share` is exposed as measured.
nlohmann::json alpha_beta_projection(const StepMeans& means, double share, double comm_model) {
  const double measured = means.step_s, compute = means.compute_s, comm = means.comm_s;
  const double exposed_fraction = comm > 0 ? (measured - compute) / comm : 1.0;
  const double projected = compute + comm_model * (1.0 - share * (1.0 - exposed_fraction));
  return {{"measured_step_s", measured},
          {"projected_step_s", projected},
          {"error", (projected - measured) / measured},
          {"compute_s", compute},
          {"comm_model_s", comm_model},
          {"exposed_fraction", exposed_fraction},
          {"method", "compute: rank 0's mean step time less its exposed communication, as measured; "
                     "communication: the strategy's alpha-beta terms on the probed link, its overlapped "
                     "share exposed as measured"}};
}

}  // namespace

namespace {

// The cluster a run's network block is read against: its probed links and placement.
struct ClusterView {
  LinkModel probed;
  SimPlatform platform;
  int nodes = 0, per_node = 0;
};

// Run r's network block (add_network_results). What the run measured comes first; then the
// schedule and what crosses each link; then the figures read against them; the simulation last.
nlohmann::json network_block(const ClusterView& view, const RunResult& r) {
  const Strategy& s = *r.traits.strategy;
  const StepMeans means = step_means(r);
  ScheduleInputs in = measured_schedule_inputs(r);
  nlohmann::json block = {{"per_rank", per_rank(r, view.per_node)},
                          {"wire_over_counted_bounds", {kWireOverCountedMin, kWireOverCountedMax}}};
  std::vector<int> placement;
  for (const auto& rank : r.ranks) placement.push_back(node_of(rank, view.per_node));
  const WireFormat format = bucket_allreduce(r.config).format;
  LinkModel link = view.probed;  // with the engine's collective algorithms
  link.collectives = collective_family(r.config.comm);
  in.engine = schedule_engine(r.config.comm);
  std::optional<StepSchedule> schedule;
  if (s.schedule != nullptr) s.schedule(in, schedule.emplace(r.config.world_size));
  const auto crossing = schedule ? schedule->node_link_bytes(placement, view.nodes)
                                 : std::vector<std::pair<double, double>>{};
  const auto messages = schedule ? schedule->node_link_messages(placement, view.nodes)
                                 : std::vector<std::pair<double, double>>{};
  const StepModel m = wire_step_model(r, format);
  const int p = r.config.world_size;
  const double b = static_cast<double>(r.config.global_batch) / p;
  const Transport transport = s.transport(r.config);
  LinkModel bandwidth_only = link;
  bandwidth_only.alpha_s = 0;
  // Under --hierarchy node the ring that crosses the links is the nodes' (2(N-1)/N of the
  // gradient per link); the alpha-beta terms leave the intra-node phases out.
  const int ring_p = r.config.hierarchy == Hierarchy::node ? view.nodes : p;
  const double comm_model = ring_p >= 2 ? s.comm_time(m, link, transport, ring_p, b) : 0.0;
  // Per link when the schedule says what crosses each; else the alpha-beta terms at alpha = 0.
  const double bound = schedule      ? link_bound_s(view.platform, crossing)
                       : ring_p >= 2 ? s.comm_time(m, bandwidth_only, transport, ring_p, b)
                                     : 0.0;
  block["link"] = {{"bytes_per_s", 1.0 / link.beta_s_per_byte},
                   {"alpha_s", link.alpha_s},
                   {"source", link.source},
                   {"collectives", link.collectives}};
  block["projection"] = alpha_beta_projection(means, r.traits.overlapped_share, comm_model);
  block["bandwidth_bound"] = {{"comm_s", means.comm_s},
                              {"bound_s", bound},
                              {"fraction", means.comm_s > 0 ? bound / means.comm_s : 0.0},
                              {"per_link", schedule.has_value()}};
  block["nodes"] = node_bytes(r, view.nodes, view.per_node, crossing, messages);
  MeasuredSchedules schedules{schedule, std::nullopt, 0};
  if (schedule) add_replay(r, in, schedules);
  block["simulation"] = simulate_measured_run(view.platform, r, schedules, in.engine, means.step_s);
  nlohmann::json& sim = block["simulation"];
  if (sim.contains("error")) sim["measured"] = measured_sampling(r, means, sim.at("simulated_step_s").get<double>());
  return block;
}

}  // namespace

void add_network_results(const nlohmann::json& network, const std::vector<RunResult>& runs, nlohmann::json& runs_json) {
  const ClusterView view{probed_link(network), probed_platform(network), network.at("nodes").get<int>(),
                         network.at("ranks_per_node").get<int>()};
  for (std::size_t i = 0; i < runs.size(); ++i) runs_json[i]["network"] = network_block(view, runs[i]);
}

void print_network_table(const std::vector<RunResult>& runs, const nlohmann::json& document) {
  const auto& network = document.at("network");
  const auto& docs = document.at("runs");
  constexpr int kLabel = 34;
  std::size_t col = 22;
  auto label = [](const nlohmann::json& doc) { return doc.at("strategy").at("label").get<std::string>(); };
  for (const auto& doc : docs) col = std::max(col, label(doc).size() + 2);
  const auto& first_link = docs.front().at("network").at("link");
  fmt::print("\nEmulated cluster: {} nodes x {} rank{}, {} ({}), slowest link probed at {:.1f} MB/s ({:.0f} Mbit/s), "
             "alpha {:.3f} ms\n",
             network.at("nodes").get<int>(), network.at("ranks_per_node").get<int>(),
             network.at("ranks_per_node").get<int>() == 1 ? "" : "s", network.at("qdisc").get<std::string>(),
             network.at("links").front().at("requested_rate").get<std::string>(),
             first_link.at("bytes_per_s").get<double>() / 1e6, first_link.at("bytes_per_s").get<double>() * 8 / 1e6,
             first_link.at("alpha_s").get<double>() * 1e3);
  fmt::print("{:<{}}", "", kLabel);
  for (const auto& doc : docs) fmt::print("{:>{}}", label(doc), col);
  fmt::print("\n");
  auto row = [&](const std::string& label, auto cell) {
    fmt::print("{:<{}}", label, kLabel);
    for (std::size_t i = 0; i < runs.size(); ++i) fmt::print("{:>{}}", cell(docs[i].at("network")), col);
    fmt::print("\n");
  };
  row("step time measured / projected", [](const nlohmann::json& n) {
    const auto& p = n.at("projection");
    return fmt::format("{:.1f} / {:.1f} ms", 1e3 * p.at("measured_step_s").get<double>(),
                       1e3 * p.at("projected_step_s").get<double>());
  });
  row("projection error", [](const nlohmann::json& n) {
    return fmt::format("{:+.1f} %", 100.0 * n.at("projection").at("error").get<double>());
  });
  row("step time simulated (SimGrid)", simulated_cell);
  row("simulation error (uncalibrated)", simulation_error_cell);
  row("  its sampling error (2 SE)", sampling_error_cell);
  row("comm / bandwidth bound (ms)", [](const nlohmann::json& n) {
    const auto& b = n.at("bandwidth_bound");
    return fmt::format("{:.1f} / {:.1f}", 1e3 * b.at("comm_s").get<double>(), 1e3 * b.at("bound_s").get<double>());
  });
  row("fraction of the bound", [](const nlohmann::json& n) {
    return fmt::format("{:.0f} %", 100.0 * n.at("bandwidth_bound").at("fraction").get<double>());
  });
  row("wire / schedule bytes (node range)", wire_cell);
  if (network.at("ranks_per_node").get<int>() > 1) {
    row("intra-node link (simulated)", [](const nlohmann::json& n) -> std::string {
      const auto& sim = n.at("simulation");
      if (!sim.contains("intra_node")) return "-";
      const auto& intra = sim.at("intra_node");
      return fmt::format("{:.2f} GB/s {}", intra.at("bytes_per_s").get<double>() / 1e9,
                         intra.contains("seconds") ? "probed" : "assumed");
    });
  }
  // Who waited for whom: each rank's median compute and communication.
  for (int rank = 0; rank < static_cast<int>(runs.front().ranks.size()); ++rank) {
    row(fmt::format("rank {} compute / comm (ms, p50)", rank), [rank](const nlohmann::json& n) {
      const auto& pr = n.at("per_rank").at(static_cast<std::size_t>(rank));
      return fmt::format("{:.1f} / {:.1f}", 1e3 * pr.at("compute_s").get<double>(),
                         1e3 * pr.at("comm_s").get<double>());
    });
  }
}

}  // namespace dpbench
