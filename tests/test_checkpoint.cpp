// Tests of checkpoints and --resume (train/checkpoint.hpp): a run stopped after a checkpoint and
// resumed equals an uninterrupted run bit for bit, in its final parameters, BatchNorm buffers and
// every per-step loss, for every mode and transport on the MLP and the CNN, with in-process ranks
// and under mpirun; damaged checkpoints are skipped for the previous one or refused; a config
// mismatch names its field; saves leave no temporary file.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "core/gloo_comm.hpp"
#include "core/mpi_comm.hpp"
#include "ps/data_parallel.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"
#include "train/checkpoint.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

// 480 samples in global batches of 48: 10 steps per epoch, 2 epochs, so a checkpoint every 4
// steps lands mid-epoch (step 12 is step 2 of epoch 1).
constexpr std::int64_t kSamples = 480;

struct Variant {
  std::string mode, transport, workload;
  int servers = 0;
  std::string optimizer = "sgd";
};

std::string name_of(const Variant& v) {
  return v.mode + "_" + v.transport + "_" + v.workload + (v.servers > 0 ? "_servers" + std::to_string(v.servers) : "") +
         (v.optimizer != "sgd" ? "_" + v.optimizer : "");
}

std::unique_ptr<Dataset> dataset_for(const std::string& workload) {
  const SampleShape shape = workload == "cnn" ? SampleShape{2, 8, 8} : SampleShape{1, 1, 48};
  return make_synthetic_dataset(shape, 10, kSamples, 5);
}

TrainConfig config_for(const Variant& v) {
  TrainConfig c = small_train_config(v.mode, 3, 48);
  c.transport = parse_transport(v.transport);
  c.sharded_ps.servers = v.servers;
  c.model.workload = v.workload;
  c.optimizer.name = v.optimizer;
  if (v.optimizer != "sgd") c.optimizer.lr = 0.01f;
  if (v.workload == "cnn") {
    c.model.channels = {4, 6};
    c.model.hidden = {16};
  }
  c.run.epochs = 2;
  c.run.max_steps = -1;  // 20 steps
  return c;
}

RunResult train(const TrainConfig& c, const Dataset& data) { return testing::train_mode(c, data); }

// The checkpoint files in dir, by name.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_same_run(const RunResult& resumed, const RunResult& whole, const std::string& what) {
  ASSERT_EQ(resumed.final_params.size(), whole.final_params.size()) << what;
  ASSERT_GT(whole.final_params.size(), 0u);
  EXPECT_TRUE(resumed.final_params == whole.final_params) << what << ": parameters differ";
  EXPECT_TRUE(resumed.final_buffers == whole.final_buffers) << what << ": BatchNorm buffers differ";
  ASSERT_EQ(whole.step_train_loss.size(), 20u) << what;
  ASSERT_EQ(resumed.step_train_loss.size(), whole.step_train_loss.size()) << what;
  for (std::size_t s = 0; s < whole.step_train_loss.size(); ++s) {
    EXPECT_EQ(resumed.step_train_loss[s], whole.step_train_loss[s]) << what << ": step " << s;
  }
  EXPECT_TRUE(resumed.epoch_train_loss == whole.epoch_train_loss) << what;
  EXPECT_EQ(resumed.final_train_loss, whole.final_train_loss) << what;
}

void PrintTo(const Variant& v, std::ostream* os) { *os << name_of(v); }

class ResumeEquality : public ::testing::TestWithParam<Variant> {};

// Stopped after 14 steps (checkpoints after 4, 8 and 12) and resumed from step 12, mid-epoch 1:
// the same 20 steps as a run that never stopped and never checkpointed.
TEST_P(ResumeEquality, StoppedAndResumedRunEqualsUninterruptedBitwise) {
  const Variant v = GetParam();
  const auto data = dataset_for(v.workload);
  const TrainConfig base = config_for(v);
  const RunResult whole = train(base, *data);
  ASSERT_EQ(whole.resumed_from_step, -1);
  if (v.workload == "cnn") ASSERT_EQ(whole.final_buffers.size(), 2u * (4 + 6));

  TempDir tmp;
  TrainConfig first = base;
  first.checkpoint.dir = tmp.path().string();
  first.checkpoint.every = 4;
  first.run.max_steps = 14;
  const RunResult stopped = train(first, *data);
  ASSERT_EQ(stopped.step_train_loss.size(), 14u);
  // The checkpointed run's own steps are those of the uninterrupted run (up to the order in which
  // the end-of-run all-reduce of a shorter loss vector sums the ranks' floats).
  for (std::size_t s = 0; s < 14; ++s) {
    EXPECT_NEAR(stopped.step_train_loss[s], whole.step_train_loss[s], 1e-6 * whole.step_train_loss[s]) << s;
  }
  const int writers = v.mode == "sharded_ps" ? (v.servers > 0 ? v.servers : 3) : 1;
  for (const int step : {4, 8, 12}) {
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(fs::exists(checkpoint_path(first.checkpoint.dir, step, r)), r < writers) << step << " rank " << r;
    }
  }
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(stopped.ranks[static_cast<std::size_t>(r)].checkpoint_write_s.size(), 3u);
    EXPECT_EQ(stopped.ranks[static_cast<std::size_t>(r)].checkpoint_bytes > 0, r < writers) << r;
  }

  TrainConfig second = base;
  second.checkpoint.dir = first.checkpoint.dir;
  second.checkpoint.every = 4;
  second.checkpoint.resume = true;
  const RunResult resumed = train(second, *data);
  EXPECT_EQ(resumed.resumed_from_step, 12);
  expect_same_run(resumed, whole, name_of(v));
}

INSTANTIATE_TEST_SUITE_P(
    EveryMode, ResumeEquality,
    ::testing::Values(Variant{"ps", "collective", "mlp"}, Variant{"ps", "p2p", "mlp"},
                      Variant{"sharded_ps", "collective", "mlp"}, Variant{"sharded_ps", "p2p", "mlp"},
                      Variant{"sharded_ps", "collective", "mlp", 2}, Variant{"allreduce", "collective", "mlp"},
                      Variant{"ps", "collective", "cnn"}, Variant{"sharded_ps", "collective", "cnn"},
                      Variant{"sharded_ps", "p2p", "cnn"}, Variant{"allreduce", "collective", "cnn"},
                      // Adam's state (two arrays) and its step count (bias correction) resume too.
                      Variant{"ps", "collective", "mlp", 0, "adam"},
                      Variant{"sharded_ps", "collective", "mlp", 0, "adamw"},
                      Variant{"sharded_ps", "p2p", "mlp", 2, "adam"},
                      Variant{"allreduce", "collective", "mlp", 0, "adamw"}),
    [](const ::testing::TestParamInfo<Variant>& info) { return name_of(info.param); });

class CheckpointDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    data_ = dataset_for("mlp");
    whole_ = train(config_for(variant_), *data_);
    config_ = config_for(variant_);
    config_.checkpoint.dir = tmp_.path().string();
    config_.checkpoint.every = 4;
    config_.run.max_steps = 14;  // checkpoints after 4, 8, 12
    (void)train(config_, *data_);
    config_.run.max_steps = -1;
    config_.checkpoint.resume = true;
  }
  std::string file(long step, int rank = 0) const { return checkpoint_path(config_.checkpoint.dir, step, rank); }
  static void truncate(const std::string& path, std::uintmax_t keep) { fs::resize_file(path, keep); }
  static void flip_byte(const std::string& path, std::uintmax_t at) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(at));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(static_cast<std::streamoff>(at));
    f.write(&c, 1);
  }
  // Resumes, returning the run and what it printed on stderr.
  RunResult resume(std::string* err) {
    ::testing::internal::CaptureStderr();
    RunResult r = train(config_, *data_);
    *err = ::testing::internal::GetCapturedStderr();
    return r;
  }

  Variant variant_{"sharded_ps", "collective", "mlp"};
  std::unique_ptr<Dataset> data_;
  RunResult whole_;
  TrainConfig config_;
  TempDir tmp_;
};

TEST_F(CheckpointDamage, TruncatedNewestFileFallsBackToThePreviousCheckpoint) {
  truncate(file(12), fs::file_size(file(12)) / 2);
  std::string err;
  const RunResult r = resume(&err);
  EXPECT_EQ(r.resumed_from_step, 8);
  EXPECT_NE(err.find("warning: --resume: skipping the checkpoint of step 12"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  expect_same_run(r, whole_, "after a truncated checkpoint");
}

TEST_F(CheckpointDamage, FlippedByteIsACheckSumMismatchAndSkipped) {
  // A byte in the middle of server 2's momentum shard: the file keeps its size.
  flip_byte(file(12, 2), fs::file_size(file(12, 2)) - 40);
  std::string err;
  const RunResult r = resume(&err);
  EXPECT_EQ(r.resumed_from_step, 8);
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  EXPECT_NE(err.find("rank2"), std::string::npos) << err;
  expect_same_run(r, whole_, "after a corrupt shard");
}

TEST_F(CheckpointDamage, MissingShardMakesTheCheckpointIncomplete) {
  fs::remove(file(12, 1));
  std::string err;
  EXPECT_EQ(resume(&err).resumed_from_step, 8);
  EXPECT_NE(err.find("missing"), std::string::npos) << err;
}

TEST_F(CheckpointDamage, NoValidCheckpointIsAnInputErrorNamingTheDirectory) {
  for (const long step : {4L, 8L, 12L}) truncate(file(step), 100);
  try {
    ::testing::internal::CaptureStderr();
    (void)train(config_, *data_);
    (void)::testing::internal::GetCapturedStderr();
    FAIL() << "resumed from a damaged checkpoint";
  } catch (const InputError& e) {
    (void)::testing::internal::GetCapturedStderr();
    const std::string what = e.what();
    EXPECT_NE(what.find("no valid checkpoint in " + config_.checkpoint.dir), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST_F(CheckpointDamage, OtherConfigIsAnInputErrorNamingTheField) {
  config_.world_size = 2;
  config_.global_batch = 48;
  try {
    (void)train(config_, *data_);
    FAIL() << "resumed a 3-rank checkpoint with 2 ranks";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("world_size 3, this run has 2"), std::string::npos) << e.what();
  }
  config_.world_size = 3;
  config_.seed = 12;
  try {
    (void)train(config_, *data_);
    FAIL() << "resumed with another seed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("seed 11, this run has 12"), std::string::npos) << e.what();
  }
  // An SGD checkpoint (which names no optimizer) does not resume an Adam run.
  config_.seed = 11;
  config_.optimizer.name = "adam";
  try {
    (void)train(config_, *data_);
    FAIL() << "resumed an SGD checkpoint with Adam";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer null, this run has \"adam\""), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, EmptyDirectoryStartsFromStepZero) {
  const Variant v{"ps", "collective", "mlp"};
  const auto data = dataset_for(v.workload);
  TempDir tmp;
  TrainConfig c = config_for(v);
  c.checkpoint.dir = tmp.path().string();
  c.checkpoint.resume = true;  // and no --checkpoint-every: nothing written
  const RunResult r = train(c, *data);
  EXPECT_EQ(r.resumed_from_step, -1);
  expect_same_run(r, train(config_for(v), *data), "fresh");
  EXPECT_TRUE(files_in(tmp.path()).empty());
}

// Saves are atomic (no temporary file stays), keep the newest kKeepCheckpoints, and a run that
// starts over removes the files of the steps it has not reached again.
TEST(Checkpoint, SavesLeaveNoTemporaryFileAndKeepTheNewestThree) {
  const Variant v{"allreduce", "collective", "mlp"};
  const auto data = dataset_for(v.workload);
  TempDir tmp;
  TrainConfig c = config_for(v);
  c.checkpoint.dir = tmp.path().string();
  c.checkpoint.every = 3;  // after 3, 6, ..., 18
  (void)train(c, *data);
  EXPECT_EQ(files_in(tmp.path()), (std::vector<std::string>{"ckpt-000000012-rank0.dpbc", "ckpt-000000015-rank0.dpbc",
                                                            "ckpt-000000018-rank0.dpbc"}));
  c.run.max_steps = 7;  // a fresh run (no --resume) over the same directory
  (void)train(c, *data);
  EXPECT_EQ(files_in(tmp.path()), (std::vector<std::string>{"ckpt-000000003-rank0.dpbc", "ckpt-000000006-rank0.dpbc"}));
}

TEST(CheckpointFormat, RoundTripsAndDetectsDamage) {
  CheckpointFile f;
  f.fingerprint = {{"mode", "ps"}};
  f.step = 7;
  f.rank = 1;
  f.writers = 2;
  f.velocity_offset = 3;
  f.params = {1.5f, -2.0f};
  f.velocity = {0.25f};
  f.step_losses = {0.1, 0.2};
  const std::string bytes = encode_checkpoint(f);
  const CheckpointFile g = decode_checkpoint(bytes);
  EXPECT_EQ(g.step, 7);
  EXPECT_EQ(g.rank, 1);
  EXPECT_EQ(g.velocity_offset, 3u);
  EXPECT_EQ(g.params, f.params);
  EXPECT_TRUE(g.buffers.empty());
  EXPECT_EQ(g.velocity, f.velocity);
  EXPECT_EQ(g.step_losses, f.step_losses);
  EXPECT_EQ(g.fingerprint, f.fingerprint);
  auto error_of = [](const std::string& b) {
    try {
      (void)decode_checkpoint(b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of(bytes.substr(0, bytes.size() - 1)).find("truncated"), std::string::npos);
  EXPECT_NE(error_of(bytes.substr(0, 10)).find("truncated"), std::string::npos);
  for (const std::size_t at : {std::size_t{20}, bytes.size() - 12, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] = static_cast<char>(bad[at] ^ 1);
    EXPECT_NE(error_of(bad), "accepted") << at;
  }
  std::string bad = bytes;
  bad[bytes.size() - 12] = static_cast<char>(bad[bytes.size() - 12] ^ 1);  // a payload byte
  EXPECT_NE(error_of(bad).find("checksum mismatch"), std::string::npos) << error_of(bad);
  EXPECT_NE(error_of("hello world, not a checkpoint").find("not a dpbench checkpoint"), std::string::npos);
}

// ---- the command line, in-process ranks and mpirun

struct CheckpointOutcome {
  int exit_code = -1;
  std::string err;
};

class CheckpointCli : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return (tmp_.path() / name).string(); }
  CheckpointOutcome sh(const std::string& command) {
    const std::string err = path("stderr.txt");
    const int status = std::system((command + " >/dev/null 2>" + err).c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(err)};
  }
  TempDir tmp_;
};

const std::string kRun = std::string(DPBENCH_BINARY) +
                         " run --device cpu --data synthetic --input 64 --synthetic-samples 600 --hidden 32,16 "
                         "--batch-size 60 --epochs 2 --warmup-steps 1 --no-eval -q";

TEST_F(CheckpointCli, ResultRecordsCheckpointsAndAllInvalidExitsTwo) {
  const std::string ckpt = " --mode sharded_ps --ranks 3 --checkpoint-dir " + path("ck");
  ASSERT_EQ(sh(kRun + ckpt + " --checkpoint-every 5 --max-steps 12 -o " + path("a.json")).exit_code, 0);
  const auto a = nlohmann::json::parse(slurp(path("a.json")))["runs"][0];
  EXPECT_EQ(a["checkpoints"]["count"], 2);
  EXPECT_EQ(a["checkpoints"]["bytes_per_rank"].size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_GT(a["checkpoints"]["bytes_per_rank"][r].get<long>(), 0) << r;
  EXPECT_GT(a["checkpoints"]["write_time_s"]["total"].get<double>(), 0);
  EXPECT_TRUE(a["resumed_from_step"].is_null());
  ASSERT_EQ(sh(kRun + ckpt + " --resume -o " + path("b.json")).exit_code, 0);
  EXPECT_EQ(nlohmann::json::parse(slurp(path("b.json")))["runs"][0]["resumed_from_step"], 10);
  // Without the options: no new keys.
  ASSERT_EQ(sh(kRun + " --mode allreduce --ranks 2 -o " + path("c.json")).exit_code, 0);
  const auto c = nlohmann::json::parse(slurp(path("c.json")))["runs"][0];
  EXPECT_FALSE(c.contains("checkpoints"));
  EXPECT_FALSE(c.contains("resumed_from_step"));

  for (const long step : {5L, 10L}) fs::resize_file(checkpoint_path(path("ck"), step, 1), 64);
  const CheckpointOutcome o = sh(kRun + ckpt + " --resume -o " + path("d.json"));
  EXPECT_EQ(o.exit_code, 2) << o.err;
  const std::string last = o.err.substr(o.err.rfind('\n', o.err.size() - 2) + 1);
  EXPECT_NE(last.find("no valid checkpoint in " + path("ck")), std::string::npos) << o.err;
  EXPECT_FALSE(fs::exists(path("d.json")));
}

// A run ended by a failing rank (DPBENCH_FAULT throw at step 10, in-process ranks) resumes from
// its last checkpoint (step 8) and ends where the uninterrupted run does.
TEST_F(CheckpointCli, RunEndedByAFailedRankResumesFromItsLastCheckpoint) {
  const std::string run = kRun + " --mode allreduce --ranks 3";
  const std::string ckpt = " --checkpoint-dir " + path("ck") + " --checkpoint-every 4";
  ASSERT_EQ(sh(run + " -o " + path("whole.json") + " --save-params " + path("whole")).exit_code, 0);
  const CheckpointOutcome failed = sh("DPBENCH_FAULT=rank=1,step=10,kind=throw " + run + ckpt + " -o " +
                                      path("a.json"));
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  EXPECT_NE(failed.err.find("injected fault"), std::string::npos) << failed.err;
  EXPECT_TRUE(fs::exists(checkpoint_path(path("ck"), 8, 0)));
  const CheckpointOutcome o = sh(run + ckpt + " --resume -o " + path("b.json") + " --save-params " + path("resumed"));
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto whole = nlohmann::json::parse(slurp(path("whole.json")))["runs"][0];
  const auto resumed = nlohmann::json::parse(slurp(path("b.json")))["runs"][0];
  EXPECT_EQ(resumed["resumed_from_step"], 8);
  EXPECT_EQ(resumed["quality"]["step_train_loss"], whole["quality"]["step_train_loss"]);
  EXPECT_EQ(resumed["quality"]["epoch_train_loss"], whole["quality"]["epoch_train_loss"]);
  const auto a = read_f32(path("whole-allreduce.f32"));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_TRUE(read_f32(path("resumed-allreduce.f32")) == a);
}

TEST_F(CheckpointCli, OptionsAreChecked) {
  EXPECT_EQ(sh(kRun + " --mode ps --checkpoint-every 5").exit_code, 2);
  EXPECT_EQ(sh(kRun + " --mode ps --resume").exit_code, 2);
  const CheckpointOutcome two = sh(kRun + " --mode ps,allreduce --checkpoint-dir " + path("ck") +
                                   " --checkpoint-every 5");
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.err.find("give one --mode"), std::string::npos) << two.err;
}

// Under mpirun: each process writes its own files (rank 0; sharded_ps: every server), and a job
// stopped and resumed ends with the uninterrupted job's parameters and losses, bit for bit.
TEST_F(CheckpointCli, MpiStoppedAndResumedJobEqualsUninterruptedBitwise) {
  if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  if (std::system("command -v mpirun >/dev/null") != 0) GTEST_SKIP() << "mpirun is not on PATH";
  const std::string mpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np 2 ";
  for (const std::string mode : {"ps", "sharded_ps", "allreduce"}) {
    const std::string run = mpirun + kRun + " --comm mpi --mode " + mode;
    const std::string dir = path("ck-" + mode);
    ASSERT_EQ(sh(run + " -o " + path("whole.json") + " --save-params " + path("whole")).exit_code, 0) << mode;
    ASSERT_EQ(
        sh(run + " --checkpoint-dir " + dir + " --checkpoint-every 4 --max-steps 14 -o " + path("a.json")).exit_code, 0)
        << mode;
    EXPECT_EQ(fs::exists(checkpoint_path(dir, 12, 1)), mode == "sharded_ps") << mode;
    const CheckpointOutcome o = sh(run + " --checkpoint-dir " + dir + " --resume -o " + path("b.json") +
                                   " --save-params " + path("resumed"));
    ASSERT_EQ(o.exit_code, 0) << mode << o.err;
    const auto whole = nlohmann::json::parse(slurp(path("whole.json")))["runs"][0];
    const auto resumed = nlohmann::json::parse(slurp(path("b.json")))["runs"][0];
    EXPECT_EQ(resumed["resumed_from_step"], 12) << mode;
    EXPECT_EQ(resumed["quality"]["step_train_loss"], whole["quality"]["step_train_loss"]) << mode;
    const auto a = read_f32(path("whole-" + mode + ".f32"));
    ASSERT_GT(a.size(), 1000u);
    EXPECT_TRUE(read_f32(path("resumed-" + mode + ".f32")) == a) << mode;
  }
}

// Over gloo, 2 processes started by hand with torchrun's variables: a job stopped and resumed ends
// with the uninterrupted job's parameters and losses, bit for bit, in every mode and transport;
// and both processes exit 0 promptly after rank 0 wrote the result.
TEST_F(CheckpointCli, GlooStoppedAndResumedJobEqualsUninterruptedBitwise) {
  if (!gloo_built()) GTEST_SKIP() << "this build has no gloo (apt-get install libgloo-dev, then rebuild)";
  // Both ranks in the background; the exit code is the first non-zero one.
  const auto job = [&](const std::string& args) {
    const int port = free_tcp_port();
    std::vector<std::string> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back("RANK=" + std::to_string(r) + " LOCAL_RANK=" + std::to_string(r) +
                      " WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " timeout -k 5 120 " +
                      kRun + " --comm gloo " + args);
    }
    // The time both exited, then their status; all in one subshell, whose output sh() redirects.
    const std::string line = "(" + in_background(ranks) + "; status=$?; date +%s.%N > " + path("exited") +
                             "; exit $status)";
    return sh(line);
  };
  // Seconds from rank 0's result file being written to both processes having exited: the
  // communicators, gloo's connections and the rendezvous close without waiting for a timeout.
  const auto exit_delay = [&](const std::string& result) {
    return std::stod(slurp(path("exited"))) -
           std::chrono::duration<double>(
               std::chrono::file_clock::to_sys(fs::last_write_time(result)).time_since_epoch())
               .count();
  };
  for (const std::string variant : {"ps", "ps p2p", "sharded_ps", "sharded_ps p2p", "allreduce"}) {
    const std::string mode = variant.substr(0, variant.find(' '));
    const std::string transport = variant == mode ? "" : " --transport p2p";
    const std::string run = " --mode " + mode + transport;
    const std::string dir = path("ck-" + mode + (transport.empty() ? "" : "-p2p"));
    const CheckpointOutcome w = job(run + " -o " + path("whole.json") + " --save-params " + path("whole"));
    ASSERT_EQ(w.exit_code, 0) << variant << w.err;
    EXPECT_LT(exit_delay(path("whole.json")), 5.0) << variant;
    const CheckpointOutcome a = job(run + " --checkpoint-dir " + dir + " --checkpoint-every 4 --max-steps 14 -o " +
                                    path("a.json"));
    ASSERT_EQ(a.exit_code, 0) << variant << a.err;
    EXPECT_TRUE(fs::exists(checkpoint_path(dir, 12, 0))) << variant;
    EXPECT_EQ(fs::exists(checkpoint_path(dir, 12, 1)), mode == "sharded_ps") << variant;
    const CheckpointOutcome o = job(run + " --checkpoint-dir " + dir + " --resume -o " + path("b.json") +
                                    " --save-params " + path("resumed"));
    ASSERT_EQ(o.exit_code, 0) << variant << o.err;
    const auto whole = nlohmann::json::parse(slurp(path("whole.json")))["runs"][0];
    const auto resumed = nlohmann::json::parse(slurp(path("b.json")))["runs"][0];
    EXPECT_EQ(resumed["comm"], "gloo") << variant;
    EXPECT_EQ(resumed["resumed_from_step"], 12) << variant;
    EXPECT_EQ(resumed["quality"]["step_train_loss"], whole["quality"]["step_train_loss"]) << variant;
    const auto params = read_f32(path("whole-" + mode + ".f32"));
    ASSERT_GT(params.size(), 1000u);
    EXPECT_TRUE(read_f32(path("resumed-" + mode + ".f32")) == params) << variant;
  }
}

}  // namespace
}  // namespace dpbench
