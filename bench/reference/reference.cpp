#include "bench/reference/reference.hpp"

#include <fcntl.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "allreduce/powersgd.hpp"
#include "record/result_json.hpp"
#include "registry/strategies.hpp"
#include "core/error.hpp"
#include "train/models.hpp"
#include "workloads/distributed_sampler.hpp"

extern char** environ;

namespace dpbench {

namespace {

namespace fs = std::filesystem;

// The reference script: under $DPBENCH_HOME, else the source tree this binary was built from.
fs::path script_path() {
  const char* home = std::getenv("DPBENCH_HOME");
  const fs::path root = home != nullptr ? home : DPBENCH_SOURCE_DIR;
  return root / "bench" / "reference" / "pytorch_reference.py";
}

std::string python_of(const ReferenceOptions& o) { return o.python.empty() ? default_python() : o.python; }

// For its lifetime, lets the calling thread run on every CPU of the machine (as far as its cpuset
// allows), then puts its own CPU affinity back. A spawned child inherits the spawning thread's
// affinity: mpirun binds each rank to one core, and PyTorch's processes, started by rank 0, shared
// that one core while dpbench's ranks had one each. The reference's thread count assumes the whole
// machine (add_reference_run), and now so does its affinity. Leaves the affinity as it was when
// it cannot read or widen it.
class EveryCpuForChildren {
 public:
  EveryCpuForChildren() {
    if (sched_getaffinity(0, sizeof(saved_), &saved_) != 0) return;
    cpu_set_t every;
    CPU_ZERO(&every);
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    for (long i = 0; i < cpus && i < CPU_SETSIZE; ++i) CPU_SET(static_cast<int>(i), &every);
    widened_ = !CPU_EQUAL(&every, &saved_) && sched_setaffinity(0, sizeof(every), &every) == 0;
  }
  ~EveryCpuForChildren() {
    if (widened_) sched_setaffinity(0, sizeof(saved_), &saved_);
  }
  EveryCpuForChildren(const EveryCpuForChildren&) = delete;
  EveryCpuForChildren& operator=(const EveryCpuForChildren&) = delete;

 private:
  cpu_set_t saved_{};
  bool widened_ = false;
};

// Runs argv[0] (looked up on PATH) with stdout and stderr appended to `log` ("" -> /dev/null),
// on every CPU of the machine (EveryCpuForChildren), and returns its exit status (128 + signal
// when it was killed). Throws Error when it cannot start.
int spawn_and_wait(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  for (auto& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  const std::string target = log.empty() ? "/dev/null" : log;
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, target.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  int err = 0;
  {
    const EveryCpuForChildren every_cpu;
    err = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  }
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) throw Error(fmt::format("cannot start {}: {}", args.front(), std::strerror(err)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw Error(fmt::format("waitpid {}: {}", args.front(), std::strerror(errno)));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The last non-empty line of a text file ("" when there is none).
std::string last_line(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last;
}

// Writes `count` elements of `data` to dir/name. Throws IoError naming the file.
template <typename T>
void write_raw(const fs::path& dir, const std::string& name, const T* data, std::size_t count) {
  const fs::path path = dir / name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(T)));
  f.close();
  if (!f) throw IoError(fmt::format("{}: cannot write the start bundle ({})", path.string(), std::strerror(errno)));
}

nlohmann::json tensor_views(const std::vector<ParamView>& views) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& v : views) out.push_back({{"name", v.name}, {"shape", v.shape}, {"offset", v.offset}});
  return out;
}

// --comm-hook powersgd:R: the initial Q [cols, r] of every parameter PowerSGD compresses, in
// parameter order, written to dir/powersgd_q.f32; its tensor table (names of the parameters).
nlohmann::json write_powersgd_q(const fs::path& dir, const Model& model, int rank, std::uint64_t seed) {
  Bucket all;
  for (std::size_t i = 0; i < model.params().size(); ++i) all.params.push_back(i);
  std::vector<float> qs;
  nlohmann::json tensors = nlohmann::json::array();
  for (const PowerSgdTensor& t : powersgd_tensors(model.params(), all, rank)) {
    if (!t.compressed) continue;
    tensors.push_back({{"name", model.params()[t.param].name}, {"shape", {t.cols, t.rank}}, {"offset", qs.size()}});
    const std::vector<float> q = powersgd_initial_q(t, seed);
    qs.insert(qs.end(), q.begin(), q.end());
  }
  write_raw(dir, "powersgd_q.f32", qs.data(), qs.size());
  return {{"file", "powersgd_q.f32"}, {"dtype", "float32"}, {"count", qs.size()}, {"rank", rank}, {"tensors", tensors}};
}

// A dataset's samples as the model sees them ([N, features] floats) and its labels ([N] int64),
// written to dir/<prefix>_x.f32 and dir/<prefix>_y.i64 one block of samples at a time.
nlohmann::json write_split(const fs::path& dir, const std::string& prefix, const Dataset& set) {
  const std::size_t features = set.shape().features();
  const auto n = static_cast<std::size_t>(set.size());
  const fs::path x_path = dir / (prefix + "_x.f32");
  std::ofstream x(x_path, std::ios::binary | std::ios::trunc);
  std::vector<std::int64_t> labels(n);
  constexpr std::size_t kBlock = 1024;
  std::vector<float> block(kBlock * features);
  for (std::size_t begin = 0; begin < n; begin += kBlock) {
    const std::size_t rows = std::min(kBlock, n - begin);
    for (std::size_t i = 0; i < rows; ++i) {
      labels[begin + i] = set.load(static_cast<std::int64_t>(begin + i), block.data() + i * features);
    }
    x.write(reinterpret_cast<const char*>(block.data()), static_cast<std::streamsize>(rows * features * sizeof(float)));
  }
  x.close();
  if (!x) throw IoError(fmt::format("{}: cannot write the start bundle ({})", x_path.string(), std::strerror(errno)));
  write_raw(dir, prefix + "_y.i64", labels.data(), labels.size());
  return {{"x", {{"file", prefix + "_x.f32"}, {"dtype", "float32"}, {"shape", {n, features}}}},
          {"y", {{"file", prefix + "_y.i64"}, {"dtype", "int64"}, {"shape", {n}}}}};
}

}  // namespace

std::string default_python() { return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

void check_reference(const ReferenceOptions& o, const TrainConfig& base) {
  if (o.framework.empty()) return;
  if (o.framework != "pytorch") {
    throw InputError(fmt::format("--reference {}: unknown framework (available: pytorch)", o.framework));
  }
  if (!base.rank_batches.empty()) {
    throw InputError("--reference pytorch: --rank-batch has no PyTorch counterpart (DDP needs equal shards)");
  }
  if (base.loader.crop_padding > 0 || base.loader.hflip) {
    throw InputError("--reference pytorch: augmentation (--crop-padding, --hflip) is not reproduced by the reference");
  }
  if (base.model.sync_bn && base.device != DeviceKind::cuda) {
    throw InputError("--reference pytorch: --sync-bn needs CUDA in PyTorch 1.13 (SyncBatchNorm has no CPU kernels)");
  }
  const fs::path script = script_path();
  if (!fs::exists(script)) {
    throw InputError(fmt::format("--reference pytorch: {} not found (set DPBENCH_HOME to the dpbench source tree)",
                                 script.string()));
  }
  const std::string python = python_of(o);
  if (spawn_and_wait({python, "-c", "import torch"}, "") != 0) {
    throw InputError(fmt::format("--reference pytorch: {} cannot import torch (apt-get install python3-torch, "
                                 "or --reference-python names another interpreter)",
                                 python));
  }
}

namespace {
// start.json's config: the steps (warm-up included) and steps per epoch, the optimizer and DDP's
// settings (PowerSGD's first compressed step under --comm-hook powersgd:R).
nlohmann::json bundle_config(const TrainConfig& config, long steps, long spe) {
  nlohmann::json c = {{"global_batch", config.global_batch},
                      {"steps", steps},
                      {"warmup_steps", config.run.warmup_steps},
                      {"steps_per_epoch", spe},
                      {"bucket_cap_mb", config.allreduce.bucket_cap_mb},
                      {"comm_hook", hook_name(config.allreduce.comm_hook)}};
  c.update(optimizer_to_json(config));
  if (config.allreduce.comm_hook.powersgd_rank > 0) c["start_powersgd_iter"] = config.allreduce.start_powersgd_iter;
  return c;
}
}  // namespace

namespace {

// start.json's model.dlrm: the sizes the reference builds its DLRM from, and whether its tables'
// gradients are sparse (nn.EmbeddingBag(sparse=True)).
nlohmann::json dlrm_spec(const DlrmShape& s) {
  return {{"dense_features", s.dense_features},
          {"tables", s.tables},
          {"rows", s.rows},
          {"dim", s.dim},
          {"lookups", s.lookups},
          {"bottom", s.bottom},
          {"top", s.top},
          {"sparse_grad", s.sparse_grad},
          {"embedding_optimizer", s.embedding_optimizer}};
}

// order.i64: the DistributedSampler's shuffle of `size` samples for each of `epochs` epochs
// (seed + epoch), one after the other.
void write_sample_order(const fs::path& dir, std::uint64_t seed, std::int64_t size, long epochs) {
  std::vector<std::int64_t> order;
  order.reserve(static_cast<std::size_t>(epochs) * static_cast<std::size_t>(size));
  for (long e = 0; e < epochs; ++e) {
    const std::vector<std::int64_t> perm = shuffled_indices(size, seed + static_cast<std::uint64_t>(e));
    order.insert(order.end(), perm.begin(), perm.end());
  }
  write_raw(dir, "order.i64", order.data(), order.size());
}

}  // namespace

void write_start_bundle(const std::string& dir_name, const TrainConfig& config, const LoadedData& data) {
  const fs::path dir(dir_name);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("{}: cannot create the start bundle's directory ({})", dir.string(), ec.message()));
  const Dataset& train = *data.train;
  const SampleShape shape = train.shape();
  const auto classes = static_cast<std::size_t>(train.num_classes());
  const auto model = make_model(config, shape, classes);

  const std::vector<float> params = initial_parameters(*model, config);
  write_raw(dir, "params.f32", params.data(), params.size());
  nlohmann::json buffers = nullptr;
  if (model->num_buffers() > 0) {
    const std::vector<float> initial = model->initial_buffers();
    write_raw(dir, "buffers.f32", initial.data(), initial.size());
    buffers = {{"file", "buffers.f32"},
               {"dtype", "float32"},
               {"count", initial.size()},
               {"tensors", tensor_views(model->buffer_views())}};
  }

  const long spe = steps_per_epoch(config, train);
  const long steps = total_steps(config, train);
  const long epochs = (steps + spe - 1) / spe;
  const auto n = static_cast<std::size_t>(train.size());
  write_sample_order(dir, config.seed, train.size(), epochs);

  nlohmann::json start = {
      {"schema", {{"name", "dpbench-start"}, {"version", 1}}},
      {"workload", config.model.workload},
      {"model",
       {{"input", {shape.channels, shape.height, shape.width}},
        {"classes", classes},
        {"hidden", config.model.hidden},
        {"channels", config.model.channels}}},
      {"params",
       {{"file", "params.f32"},
        {"dtype", "float32"},
        {"count", params.size()},
        {"tensors", tensor_views(model->params())}}},
      {"buffers", buffers},
      {"train", write_split(dir, "train", train)},
      {"test", data.test != nullptr ? write_split(dir, "test", *data.test) : nlohmann::json()},
      {"order", {{"file", "order.i64"}, {"dtype", "int64"}, {"shape", {epochs, n}}}},
      {"config", bundle_config(config, steps, spe)},
  };
  if (config.model.workload == "dlrm") start["model"]["dlrm"] = dlrm_spec(config.model.dlrm);
  if (const int rank = config.allreduce.comm_hook.powersgd_rank; rank > 0) {
    start["powersgd_q"] = write_powersgd_q(dir, *model, rank, config.seed);
  }
  std::ofstream f(dir / "start.json", std::ios::trunc);
  f << start.dump(2) << "\n";
  f.close();
  if (!f) throw IoError(fmt::format("{}: cannot write the start bundle", (dir / "start.json").string()));
}

namespace {
// |a - b| / max(|b|, tiny) at each of the first min(len) steps.
std::vector<double> relative_drift(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(std::min(a.size(), b.size()));
  for (std::size_t s = 0; s < out.size(); ++s) {
    out[s] = std::abs(a[s] - b[s]) / std::max(std::abs(b[s]), std::numeric_limits<double>::min());
  }
  return out;
}
}  // namespace

nlohmann::json agreement_band(const std::vector<std::vector<double>>& mode_losses, const std::vector<double>& base,
                              const std::vector<std::vector<double>>& perturbed) {
  std::size_t steps = 0;
  for (const auto& l : mode_losses) steps = std::max(steps, l.size());
  std::vector<double> drift(steps, 0.0);  // the largest drift at each step, then its running maximum
  nlohmann::json own = nullptr, sensitivity = nullptr;
  const auto take = [&drift](const std::vector<double>& d) {
    double worst = 0;
    for (std::size_t s = 0; s < d.size() && s < drift.size(); ++s) {
      drift[s] = std::max(drift[s], d[s]);
      worst = std::max(worst, d[s]);
    }
    return worst;
  };
  for (std::size_t i = 0; i < mode_losses.size(); ++i) {
    for (std::size_t j = i + 1; j < mode_losses.size(); ++j) {
      own = std::max(own.is_null() ? 0.0 : own.get<double>(), take(relative_drift(mode_losses[i], mode_losses[j])));
    }
  }
  for (const auto& p : perturbed) {
    if (base.empty() || p.empty()) continue;
    sensitivity = std::max(sensitivity.is_null() ? 0.0 : sensitivity.get<double>(), take(relative_drift(p, base)));
  }
  std::vector<double> per_step(steps);
  double envelope = 0;
  for (std::size_t s = 0; s < steps; ++s) {
    envelope = std::max(envelope, drift[s]);
    per_step[s] = std::max(kReferenceLossTolerance, kAgreementMargin * envelope);
  }
  return {{"per_step", per_step},       {"band", per_step.empty() ? kReferenceLossTolerance : per_step.back()},
          {"own_drift", own},           {"sensitivity_drift", sensitivity},
          {"margin", kAgreementMargin}, {"floor", kReferenceLossTolerance}};
}

void judge_agreement(nlohmann::json& agreement, const std::vector<double>& dpbench,
                     const std::vector<double>& reference, const nlohmann::json& band, double floor) {
  const auto per_step = band.at("per_step").get<std::vector<double>>();
  if (per_step.empty()) throw Error("loss agreement: the band has no steps");
  const std::vector<double> rel = relative_drift(dpbench, reference);
  double worst = -1, tolerance = 0;
  std::size_t at = 0;
  nlohmann::json first_outside = nullptr;
  for (std::size_t s = 0; s < rel.size(); ++s) {
    const double t = std::max(floor, per_step[std::min(s, per_step.size() - 1)]);
    if (rel[s] > t && first_outside.is_null()) first_outside = s;
    if (rel[s] / t > worst) {
      worst = rel[s] / t;
      tolerance = t;
      at = s;
    }
  }
  agreement["tolerance"] = tolerance;
  agreement["worst_step"] = at;
  agreement["worst_step_rel_diff"] = rel.empty() ? 0.0 : rel[at];
  agreement["first_step_outside"] = first_outside;
  agreement["within"] = first_outside.is_null();
  agreement["band"] = band;
}

nlohmann::json loss_agreement(const std::vector<double>& dpbench, const std::vector<double>& reference) {
  const std::size_t steps = std::min(dpbench.size(), reference.size());
  if (steps == 0) throw Error("loss agreement: no steps to compare");
  for (std::size_t s = 0; s < steps; ++s) {
    if (!std::isfinite(dpbench[s]) || !std::isfinite(reference[s])) {
      throw Error(fmt::format("loss agreement: step {} has a non-finite loss (dpbench {}, reference {})", s, dpbench[s],
                              reference[s]));
    }
  }
  const std::vector<double> rel = relative_drift(dpbench, reference);
  const auto worst_at = std::max_element(rel.begin(), rel.end());
  const double worst = *worst_at;
  const auto at = static_cast<std::size_t>(worst_at - rel.begin());
  return {{"steps", steps},
          {"max_rel_diff", worst},
          {"at_step", at},
          {"tolerance", kReferenceLossTolerance},
          {"within", worst <= kReferenceLossTolerance}};
}

namespace {
// Why the harness failed: the first of its result file's warnings (a program it skipped or saw fail
// names why there), else its log's last line.
std::string harness_failure(const std::string& log, const std::string& out) {
  if (fs::exists(out)) {
    std::ifstream in(out);
    const nlohmann::json doc = nlohmann::json::parse(in, nullptr, false);
    if (doc.is_object() && doc.contains("warnings") && doc["warnings"].is_array() && !doc["warnings"].empty() &&
        doc["warnings"][0].is_string()) {
      return doc["warnings"][0].get<std::string>();
    }
  }
  return last_line(log);
}
}  // namespace

nlohmann::json run_reference(const ReferenceOptions& o, const std::string& start_dir, const RunResult& run,
                             int threads) {
  const TrainConfig& cfg = run.config;
  const Strategy& strategy = find_strategy(cfg.mode);
  const std::string program = cfg.world_size == 1                       ? "plain"
                              : strategy.pytorch_counterpart != nullptr ? strategy.pytorch_counterpart(cfg)
                                                                        : "";
  if (program.empty()) return nullptr;
  const fs::path dir(start_dir);
  const std::string out = (dir / fmt::format("pytorch-{}-{}.json", cfg.mode, cfg.transport)).string();
  const std::string log = (dir / fmt::format("pytorch-{}-{}.log", cfg.mode, cfg.transport)).string();
  std::error_code ec;
  fs::remove(out, ec);
  const std::vector<std::string> args = {python_of(o),
                                         script_path().string(),
                                         "--device",
                                         std::string(name(cfg.device)),
                                         "--start",
                                         start_dir,
                                         "--programs",
                                         program,
                                         "--world-size",
                                         std::to_string(cfg.world_size),
                                         "--threads",
                                         std::to_string(threads),
                                         "--timeout",
                                         std::to_string(
                                             std::max<long>(1, static_cast<long>(cfg.timeout.count() / 1000))),
                                         "--quiet",
                                         "--out",
                                         out};
  // OpenMP's idle threads spin by default and then compete with OpenBLAS's for the cores the
  // process was given (Debian's torch uses both); passive waiting leaves them to the work.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  const int code = spawn_and_wait(args, log);
  if (code != 0 || !fs::exists(out)) {
    const std::string why = harness_failure(log, out);
    throw Error(fmt::format("--reference pytorch: {} {} failed (exit {}){}{}", program, cfg.mode, code,
                            why.empty() ? "" : ": ", why));
  }
  std::ifstream f(out);
  const nlohmann::json doc = nlohmann::json::parse(f);
  if (!doc.contains("runs") || doc["runs"].empty()) {
    const std::string why = doc.contains("warnings") && !doc["warnings"].empty() ? doc["warnings"][0].dump() : "";
    throw Error(fmt::format("--reference pytorch: {} wrote no run {}", program, why));
  }
  nlohmann::json record = doc["runs"][0];
  record["dpbench_mode"] = cfg.mode;
  record["dpbench_label"] = strategy.label(cfg);
  record["torch_version"] = doc["env"].value("torch", "");
  // The optimizer PyTorch ran, as its own result file says (the start bundle chose it).
  const nlohmann::json config = doc.value("config", nlohmann::json::object());
  record["optimizer"] = {{"name", config.value("optimizer", "sgd")},
                         {"betas", config.value("betas", nlohmann::json::array())},
                         {"eps", config.value("eps", nlohmann::json())}};
  record["omp_wait_policy"] = std::getenv("OMP_WAIT_POLICY");
  record["loss_agreement"] = loss_agreement(run.step_train_loss,
                                            record["quality"]["step_train_loss"].get<std::vector<double>>());
  return record;
}

}  // namespace dpbench
