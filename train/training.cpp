#include "train/training.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <signal.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <exception>
#include <mutex>
#include <thread>

#include <regex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.hpp"
#include "core/names.hpp"
#include "core/net_interface.hpp"
#include "train/optimizer.hpp"
#include "train/elastic.hpp"
#include "workloads/cpu_kernels.hpp"
#include "train/models.hpp"

namespace dpbench {

LaunchSpec launch_spec(const TrainConfig& config) {
  LaunchSpec spec;
  spec.comm = config.comm;
  spec.world_size = config.world_size;
  spec.timeout = config.timeout;
  spec.process = config.process;
  if (!config.checkpoint.dir.empty()) {
    // What the next attempt of an elastic restart measures its recovery from.
    spec.on_rank_failure = [dir = config.checkpoint.dir](int rank, const std::string& what) {
      record_failure(dir, rank, what);
    };
  }
  return spec;
}

RecordCodec rank_records(std::vector<RankResult>& ranks) {
  return {[&ranks](int rank) { return rank_to_json(ranks.at(static_cast<std::size_t>(rank))).dump(); },
          [&ranks](int rank, const std::string& bytes) {
    ranks.at(static_cast<std::size_t>(rank)) = rank_from_json(nlohmann::json::parse(bytes));
          }};
}

void run_ranks(const TrainConfig& config, std::vector<RankResult>& ranks, const RankBody& body) {
  const LaunchSpec spec = launch_spec(config);
  const RecordCodec records = rank_records(ranks);
  make_rank_runner(spec, records)->run(body);
}

nlohmann::json rank_to_json(const RankResult& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& s : r.steps) {
    const PhaseTimes& ph = s.phases;
    steps.push_back(
        {s.step_time, ph.data_wait, ph.h2d, ph.forward, ph.backward, ph.comm, ph.comm_exposed, ph.optimizer});
    if (s.collectives.empty()) continue;
    nlohmann::json timed = nlohmann::json::array();
    for (const CollectiveTiming& c : s.collectives) {
      timed.push_back({static_cast<int>(c.kind), c.floats, c.enter_s, c.exit_s});
    }
    steps.back().push_back(std::move(timed));
  }
  const DeviceView& d = r.device;
  return {{"rank", r.rank},
          {"local_batch", r.local_batch},
          {"steps", steps},
          {"sent", r.comm_per_step.bytes_sent},
          {"received", r.comm_per_step.bytes_received},
          {"peak_bytes", r.memory.peak_bytes},
          {"peak_by_category", r.memory.peak_by_category},
          {"device", {d.device, d.virtual_rank, d.used_before, d.used_after, d.total}},
          {"checkpoint_write_s", r.checkpoint_write_s},
          {"checkpoint_bytes", r.checkpoint_bytes},
          {"wire", {r.wire_per_step.bytes_sent, r.wire_per_step.bytes_received}},
          {"wall", r.timed_wall_s},
          {"node", r.node},
          {"restart_count", r.restart_count},
          {"staleness", r.step_staleness}};
}

RankResult rank_from_json(const nlohmann::json& j) {
  RankResult r;
  r.rank = j.at("rank");
  r.local_batch = j.at("local_batch");
  for (const auto& s : j.at("steps")) {
    StepRecord rec;
    rec.step_time = s[0];
    rec.phases = {s[1], s[2], s[3], s[4], s[5], s[6], s[7]};
    if (s.size() > 8) {
      for (const auto& c : s[8])
        rec.collectives.push_back({static_cast<CollectiveKind>(c[0].get<int>()), c[1], c[2], c[3]});
    }
    r.steps.push_back(rec);
  }
  r.comm_per_step = {j.at("sent"), j.at("received")};
  r.memory.peak_bytes = j.at("peak_bytes");
  r.memory.peak_by_category = j.at("peak_by_category").get<std::map<std::string, std::int64_t>>();
  const auto& d = j.at("device");
  r.device = {d[0], d[1], d[2], d[3], d[4]};
  r.checkpoint_write_s = j.at("checkpoint_write_s").get<std::vector<double>>();
  r.checkpoint_bytes = j.at("checkpoint_bytes");
  r.wire_per_step = {j.at("wire")[0], j.at("wire")[1]};
  r.node = j.value("node", -1);
  r.restart_count = j.value("restart_count", 0);
  r.step_staleness = j.value("staleness", std::vector<int>{});
  r.timed_wall_s = j.at("wall");
  return r;
}

namespace {
std::function<void(int, long)>& step_start_hook() {
  static std::function<void(int, long)> hook;
  return hook;
}
}  // namespace

void set_step_start_hook(std::function<void(int rank, long step)> hook) { step_start_hook() = std::move(hook); }

void maybe_inject_fault(int rank, long step) {
  if (const auto& hook = step_start_hook()) hook(rank, step);
  note_step_start(step);
  static const std::optional<Fault> fault = fault_from_env();
  if (!fault || fault->step != step) return;
  const char* local = std::getenv("LOCAL_RANK");  // checked by resolve_launch
  if (fault->rank >= 0 ? fault->rank != rank : local == nullptr || fault->local_rank != std::atoi(local)) return;
  // Under torchrun, only the first attempt fails, so that a restart can succeed.
  if (restart_count() > 0) return;
  if (fault->kind == "throw") throw Error(fmt::format("injected fault at step {} (DPBENCH_FAULT)", step));
  if (fault->kind == "kill") std::raise(SIGKILL);
  if (fault->kind == "kill-agent") {
    kill(getppid(), SIGKILL);  // torchrun's agent started this process
    std::raise(SIGKILL);
  }
  if (fault->kind == "link-down") {
    set_interface_down(cluster_interface());  // the rank goes on; its peers lose it
    return;
  }
  if (fault->kind == "hang") {
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  }
}

void maybe_delay_step(Mode mode) {
  struct Delay {
    Mode mode;
    double ms = 0;
  };
  static const std::optional<Delay> delay = []() -> std::optional<Delay> {
    const char* spec = std::getenv("DPBENCH_STEP_DELAY");
    if (spec == nullptr || *spec == '\0') return std::nullopt;
    static const std::regex form(R"(^mode=([a-z_]+),ms=([0-9]+(\.[0-9]+)?)$)");
    std::cmatch m;
    if (!std::regex_match(spec, m, form)) {
      throw InputError(fmt::format("DPBENCH_STEP_DELAY={}: expected mode=M,ms=X", spec));
    }
    return Delay{parse_mode(m[1].str(), "DPBENCH_STEP_DELAY mode"), std::stod(m[2].str())};
  }();
  if (delay && delay->mode == mode) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay->ms));
}

void maybe_send_extra_message(const TrainConfig& config, Communicator& comm, int rank) {
  struct Extra {
    Mode mode;
    std::size_t floats = 0;
  };
  static const std::optional<Extra> extra = [&config]() -> std::optional<Extra> {
    const char* spec = std::getenv("DPBENCH_EXTRA_MESSAGE");
    if (spec == nullptr || *spec == '\0') return std::nullopt;
    static const std::regex form(R"(^mode=([a-z_]+),floats=([0-9]{1,9})$)");
    std::cmatch m;
    if (!std::regex_match(spec, m, form)) {
      throw InputError(fmt::format("DPBENCH_EXTRA_MESSAGE={}: expected mode=M,floats=N", spec));
    }
    if (config.device != DeviceKind::cpu) {
      throw InputError(fmt::format("DPBENCH_EXTRA_MESSAGE={}: host buffers only (--device cpu)", spec));
    }
    return Extra{parse_mode(m[1].str(), "DPBENCH_EXTRA_MESSAGE mode"), std::stoul(m[2].str())};
  }();
  if (!extra || extra->mode != config.mode || config.world_size < 2 || rank > 1) return;
  std::vector<float> message(extra->floats, 1.0f);
  if (rank == 0) comm.send(message.data(), message.size(), 1);
  if (rank == 1) comm.recv(message.data(), message.size(), 0);
}

std::optional<Fault> fault_from_env() {
  const char* spec = std::getenv("DPBENCH_FAULT");
  if (spec == nullptr || *spec == '\0') return std::nullopt;
  Fault f;
  std::string text(spec);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    const std::size_t end = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, end - pos);
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    try {
      if (key == "rank") {
        f.rank = std::stoi(value);
      } else if (key == "local_rank") {
        f.local_rank = std::stoi(value);
      } else if (key == "step") {
        f.step = std::stol(value);
      } else if (key == "kind" && (value == "throw" || value == "hang" || value == "kill" || value == "link-down" ||
                                   value == "kill-agent")) {
        f.kind = value;
      } else {
        throw std::invalid_argument(item);
      }
    } catch (const std::exception&) {
      throw InputError(fmt::format(
          "DPBENCH_FAULT={}: expected rank=R|local_rank=L,step=S,kind=throw|hang|kill|link-down|kill-agent", spec));
    }
    pos = end + 1;
  }
  if ((f.rank < 0) == (f.local_rank < 0)) {
    throw InputError(fmt::format("DPBENCH_FAULT={}: give one of rank=R and local_rank=L", spec));
  }
  if (f.kind == "kill-agent" && std::getenv("TORCHELASTIC_RUN_ID") == nullptr) {
    throw InputError(fmt::format("DPBENCH_FAULT={}: kind=kill-agent needs torchrun", spec));
  }
  if (f.kind == "link-down" && cluster_interface().empty()) {
    throw InputError(fmt::format("DPBENCH_FAULT={}: kind=link-down needs an emulated cluster (run --nodes)", spec));
  }
  return f;
}

MemoryReport memory_report(const MemoryTracker& tracker) {
  MemoryReport report;
  report.peak_bytes = tracker.peak_bytes();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    report.peak_by_category[std::string(category_name(cat))] = tracker.peak_bytes(cat);
  }
  return report;
}

TimeToTarget time_to_target_loss(const std::vector<double>& step_losses, const std::vector<double>& step_end_s,
                                 double target) {
  TimeToTarget out;
  double sum = 0;
  for (std::size_t i = 0; i < step_losses.size(); ++i) {
    sum += step_losses[i];
    if (i >= static_cast<std::size_t>(kTargetLossWindow)) sum -= step_losses[i - kTargetLossWindow];
    const auto n = static_cast<double>(std::min<std::size_t>(i + 1, kTargetLossWindow));
    if (!(sum / n <= target)) continue;
    out.step = static_cast<long>(i) + 1;
    const std::size_t before = step_losses.size() - std::min(step_losses.size(), step_end_s.size());
    if (i >= before) out.seconds = step_end_s[i - before];
    return out;
  }
  return out;
}

TimeToTarget time_to_target_auc(const std::vector<TestPoint>& curve, double target) {
  for (const TestPoint& p : curve) {
    if (p.auc >= target) return {p.step, p.seconds};
  }
  return {};
}

double roc_auc(const std::vector<float>& scores, const std::vector<std::int32_t>& labels) {
  if (scores.size() != labels.size()) {
    throw Error(fmt::format("roc_auc: {} scores for {} labels", scores.size(), labels.size()));
  }
  // A diverged model's scores: no order, so no AUC (and a NaN would break the sort's ordering).
  if (std::any_of(scores.begin(), scores.end(), [](float s) { return std::isnan(s); })) return -1;
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double positive_ranks = 0, positives = 0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i + 1;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double midrank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1..j share their mean
    for (std::size_t k = i; k < j; ++k) {
      const std::int32_t y = labels[order[k]];
      if (y != 0 && y != 1) throw Error(fmt::format("roc_auc: label {} is not 0 or 1", y));
      positive_ranks += y * midrank;
      positives += y;
    }
    i = j;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return -1;
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

TestMetrics evaluate_test(const TrainConfig& config, const Dataset& test, const float* params, const float* buffers) {
  const std::size_t features = test.shape().features();
  MemoryTracker untracked;  // declared before the model, which frees its activations into it
  auto model = make_model(config, test.shape(), static_cast<std::size_t>(test.num_classes()));
  constexpr std::size_t kEvalBatch = 500;
  model->reserve(kEvalBatch, untracked);
  if (buffers != nullptr) std::copy(buffers, buffers + model->num_buffers(), model->buffers());
  model->set_training(false);
  std::vector<float> x(kEvalBatch * features);
  std::vector<std::int32_t> y(kEvalBatch);
  std::vector<float> logits(kEvalBatch * model->num_classes());
  std::size_t correct = 0;
  const std::int64_t n = test.size();
  const bool binary = model->num_classes() == 2;
  std::vector<float> scores;
  std::vector<std::int32_t> labels;
  for (std::int64_t start = 0; start < n; start += static_cast<std::int64_t>(kEvalBatch)) {
    const auto b = static_cast<std::size_t>(std::min<std::int64_t>(kEvalBatch, n - start));
    for (std::size_t i = 0; i < b; ++i) {
      y[i] = test.load(start + static_cast<std::int64_t>(i), x.data() + i * features);
    }
    model->forward(params, x.data(), b, logits.data());
    correct += cpu::count_correct(logits.data(), y.data(), b, model->num_classes());
    for (std::size_t i = 0; binary && i < b; ++i) {
      scores.push_back(logits[2 * i + 1] - logits[2 * i]);
      labels.push_back(y[i]);
    }
  }
  TestMetrics out;
  out.accuracy = n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
  if (binary) out.auc = roc_auc(scores, labels);
  return out;
}

long steps_per_epoch(const TrainConfig& config, const Dataset& train) {
  return static_cast<long>(static_cast<std::size_t>(train.size()) / config.global_batch);
}

long total_steps(const TrainConfig& config, const Dataset& train) {
  const long all = steps_per_epoch(config, train) * config.run.epochs;
  return config.run.max_steps >= 0 ? std::min(all, config.run.max_steps) : all;
}

void finish_result(RunResult& result, const TrainData& data, const std::vector<double>& loss_sums,
                   const std::vector<long>& steps_in_epoch, const float* params, std::size_t n, const float* buffers,
                   std::size_t num_buffers) {
  const TrainConfig& config = result.config;
  for (std::size_t e = 0; e < loss_sums.size() && e < steps_in_epoch.size(); ++e) {
    if (steps_in_epoch[e] == 0) continue;
    result.epoch_train_loss.push_back(loss_sums[e] /
                                      static_cast<double>(steps_in_epoch[e] * static_cast<long>(config.global_batch)));
  }
  result.final_train_loss = result.epoch_train_loss.empty() ? 0 : result.epoch_train_loss.back();
  result.num_params = n;
  result.input_features = data.train->shape().features();
  result.sample_shape = data.train->shape();
  result.num_classes = static_cast<std::size_t>(data.train->num_classes());
  if (config.keep_final_params) {
    result.final_params.assign(params, params + n);
    if (buffers != nullptr) result.final_buffers.assign(buffers, buffers + num_buffers);
  }
  if (config.evaluate && data.test != nullptr) {
    const TestMetrics test = evaluate_test(config, *data.test, params, buffers);
    result.test_accuracy = test.accuracy;
    result.test_auc = test.auc;
  }
  if (config.run.target_loss > 0) {
    result.reached_target_loss = time_to_target_loss(result.step_train_loss, result.step_end_s, config.run.target_loss);
  }
  if (config.run.target_auc > 0)
    result.reached_target_auc = time_to_target_auc(result.test_curve, config.run.target_auc);
}

void finish_rank(RankResult& rank, const CommStats& timed_bytes, long timed_steps, const MemoryTracker& tracker) {
  if (timed_steps > 0) {
    rank.comm_per_step.bytes_sent = timed_bytes.bytes_sent / timed_steps;
    rank.comm_per_step.bytes_received = timed_bytes.bytes_received / timed_steps;
  }
  rank.memory = memory_report(tracker);
}

}  // namespace dpbench
