// GPU training (both modes on device buffers, GPU ranks in the local backend, NCCL when it can
// run): the same agreements the CPU trainers are held to, plus agreement with the CPU trainers
// themselves, the root GPU's memory, and overlap of the buckets' all-reduce with backward.
// Every test needs a usable CUDA device and skips with the reason otherwise. Ranks beyond the
// number of GPUs are virtual ranks sharing a GPU, as on a one-GPU machine.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "train/buckets.hpp"
#include "allreduce/ddp_trainer.hpp"
#include "registry/strategies.hpp"
#include "cuda/cuda_runtime.hpp"
#include "core/device.hpp"
#include "core/error.hpp"
#include "cuda/nccl_comm.hpp"
#include "core/stats.hpp"
#include "ps/data_parallel.hpp"
#include "tests/fixtures.hpp"
#include "tests/process_util.hpp"
#include "tests/training_fixtures.hpp"
#include "train/models.hpp"
#include "workloads/click_logs.hpp"
#include "workloads/mlp.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

constexpr std::size_t kFeatures = 48;
constexpr std::size_t kCudaTrainingClasses = 10;

class CudaTraining : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = probe_cuda();
    if (!probe.built_with_cuda) GTEST_SKIP() << "built without CUDA";
    if (!probe.usable) GTEST_SKIP() << "no CUDA device: " << probe.reason;
    data_ = make_synthetic_dataset(SampleShape{1, 1, static_cast<int>(kFeatures)}, kCudaTrainingClasses, 2048, 5);
  }
  TrainData data() const { return {data_.get(), nullptr}; }
  std::unique_ptr<Dataset> data_;
};

// fp32 cuBLAS math, so that GPU and CPU runs differ only by the order of floating-point sums.
TrainConfig gpu_config(const std::string& mode, int world_size, std::size_t batch) {
  TrainConfig c = testing::small_train_config(mode, world_size, batch);
  c.device = DeviceKind::cuda;
  c.precision = Precision::fp32;
  c.loader.pin_memory = true;
  return c;
}
using testing::relative_l2;

void expect_trained(const RunResult& r) {
  ASSERT_EQ(r.steps_total, 20);
  ASSERT_EQ(r.final_params.size(), r.num_params);
  ASSERT_GT(r.epoch_train_loss.size(), 0u);
  ASSERT_TRUE(std::isfinite(r.final_train_loss));
}

// Same tolerance as the CPU agreement tests: the modes sum the same gradients in different
// orders (chain reduce vs ring), which moves parameters by a few ulps per step.
TEST_F(CudaTraining, PsAndAllreduceAgreeAfter20Steps) {
  const RunResult ps = train_data_parallel(gpu_config("ps", 4, 64), data());
  const RunResult ar = train_allreduce(gpu_config("allreduce", 4, 64), data());
  expect_trained(ps);
  expect_trained(ar);
  EXPECT_LT(relative_l2(ps.final_params, ar.final_params), 1e-5);
  EXPECT_NEAR(ps.final_train_loss, ar.final_train_loss, 1e-4);
}

// The GPU trainers against the CPU trainers on the same data and seed. fp32 GEMMs on the GPU
// sum in a different order than OpenBLAS, so bits differ; 20 steps of SGD keep the difference
// near float rounding (1e-4 relative leaves room for that, and is far below what one wrong
// step would cause: the parameters move by more than 1e-2 relative in 20 steps).
TEST_F(CudaTraining, GpuModesMatchCpuModes) {
  // Every registered strategy, under each of its transports.
  for (const Strategy& s : strategies()) {
    std::vector<Transport> transports = s.transports;
    if (transports.empty()) transports = {Transport::collective};
    for (const Transport transport : transports) {
      TrainConfig gpu = gpu_config(std::string(name(s.mode)), 2, 64);
      gpu.transport = transport;
      TrainConfig cpu = gpu;
      cpu.device = DeviceKind::cpu;
      cpu.loader.pin_memory = false;
      const RunResult g = s.train(gpu, data());
      const RunResult c = s.train(cpu, data());
      expect_trained(g);
      expect_trained(c);
      EXPECT_LT(relative_l2(g.final_params, c.final_params), 1e-4) << s.mode << " " << transport;
      EXPECT_NEAR(g.final_train_loss, c.final_train_loss, 1e-3) << s.mode << " " << transport;
    }
  }
}

// Pageable uploads (pin_memory off, the path without staging buffers) carry the same batches as
// pinned ones: the same run, bit for bit.
TEST_F(CudaTraining, PageableUploadsMatchPinnedUploads) {
  for (const std::string mode : {"ps", "allreduce"}) {
    TrainConfig pageable = gpu_config(mode, 2, 64);
    pageable.loader.pin_memory = false;
    const auto train = [&](const TrainConfig& c) {
      return mode == "ps" ? train_data_parallel(c, data()) : train_allreduce(c, data());
    };
    const RunResult a = train(pageable);
    const RunResult b = train(gpu_config(mode, 2, 64));
    expect_trained(a);
    ASSERT_EQ(a.final_params.size(), b.final_params.size()) << mode;
    EXPECT_EQ(a.final_params, b.final_params) << mode;
  }
}

// With pin_memory the staging prefetches: each step's batch is copied on the staging's own
// stream while the step before computes, into a second device buffer. Across epoch ends (2,048
// samples, batch 256: 8 steps an epoch, 20 steps), every mode trains bit for bit as with
// pageable uploads, which copy on the compute stream and never prefetch; the second buffer shows
// in the device's data_staging peak. (The loss is summed over blocks with atomicAdd, in no fixed
// order, so it agrees to float rounding only: seen 1.94068 on both sides with other last bits.)
TEST_F(CudaTraining, PrefetchedBatchesMatchPageableUploadsAcrossEpochs) {
  for (const std::string mode : {"ps", "sharded_ps", "allreduce"}) {
    for (int world_size : {1, 2}) {
      TrainConfig pinned = gpu_config(mode, world_size, 256);
      pinned.run.epochs = 3;
      TrainConfig pageable = pinned;
      pageable.loader.pin_memory = false;
      const RunResult a = testing::train_mode(pageable, *data_);
      const RunResult b = testing::train_mode(pinned, *data_);
      const std::string what = mode + " x" + std::to_string(world_size);
      expect_trained(a);
      ASSERT_EQ(b.final_params.size(), a.final_params.size()) << what;
      EXPECT_EQ(b.final_params, a.final_params) << what;
      EXPECT_NEAR(b.final_train_loss, a.final_train_loss, 1e-5 * std::abs(a.final_train_loss)) << what;
      const auto staging = [](const RunResult& r) { return r.ranks[0].memory.peak_by_category.at("data_staging"); };
      const std::size_t rows = mode == "ps" ? 256 : 256 / static_cast<std::size_t>(world_size);
      EXPECT_GE(staging(b), staging(a) + static_cast<std::int64_t>(rows * (kFeatures * 4 + 4))) << what;
    }
  }
}

TEST_F(CudaTraining, PsP2pMatchesPsCollective) {
  TrainConfig p2p = gpu_config("ps", 3, 60);
  p2p.transport = Transport::p2p;
  const RunResult a = train_data_parallel(p2p, data());
  const RunResult b = train_data_parallel(gpu_config("ps", 3, 60), data());
  expect_trained(a);
  expect_trained(b);
  EXPECT_LT(relative_l2(a.final_params, b.final_params), 1e-5);
}

TEST_F(CudaTraining, UnevenRankBatchesMatchOneRank) {
  // 20 steps of 256 samples in one epoch: 5120 samples at least (the fixture's 2048 give 8 steps).
  const auto big = make_synthetic_dataset(SampleShape{1, 1, static_cast<int>(kFeatures)}, kCudaTrainingClasses, 8192,
                                          5);
  const TrainData td{big.get(), nullptr};
  TrainConfig uneven = gpu_config("allreduce", 4, 256);
  uneven.rank_batches = {96, 96, 32, 32};
  const RunResult a = train_allreduce(uneven, td);
  const RunResult b = train_allreduce(gpu_config("allreduce", 1, 256), td);
  expect_trained(a);
  expect_trained(b);
  EXPECT_LT(relative_l2(a.final_params, b.final_params), 1e-5);
  EXPECT_EQ(a.ranks[2].local_batch, 32u);
}

// The root GPU holds the master parameters, their gradients and the momentum buffer on top
// of its replica (device bytes charged by the allocator, rounded to 512 bytes per block).
TEST_F(CudaTraining, RootGpuHoldsMasterState) {
  const RunResult r = train_data_parallel(gpu_config("ps", 4, 64), data());
  const auto master_bytes = static_cast<std::int64_t>(3 * r.num_params * sizeof(float));
  for (std::size_t w = 1; w < r.ranks.size(); ++w) {
    EXPECT_GE(r.ranks[0].memory.peak_bytes - r.ranks[w].memory.peak_bytes, master_bytes) << "worker " << w;
    EXPECT_EQ(r.ranks[w].memory.peak_by_category.at("optimizer_state"), 0);
    EXPECT_GE(r.ranks[w].device.device, 0);
    EXPECT_GT(r.ranks[w].device.used_after, 0);
  }
  EXPECT_GE(r.ranks[0].memory.peak_by_category.at("optimizer_state"),
            static_cast<std::int64_t>(r.num_params * sizeof(float)));
  EXPECT_EQ(r.ranks[3].device.virtual_rank, cuda::device_count() < 4);
}

// DDP overlap: with a model of several buckets, the all-reduce of the first buckets runs while
// backward computes the rest, so the exposed part of the communication is below its total.
// With the local backend the margin is (backward left after bucket 0 is ready) minus host
// latencies: comm starts when the communication thread has seen bucket 0's event, and the compute
// stream's join is recorded only after the rank's thread has seen the last bucket end (a thread
// wake-up). So the model leaves two 4096x4096 GEMMs per rank after bucket 0 (~17 GFLOP: hundreds
// of microseconds in fp32 even on an H100, more with two virtual ranks sharing it), far above a
// wake-up (tens of microseconds).
TEST_F(CudaTraining, AllreduceOverlapsBackward) {
  TrainConfig c = gpu_config("allreduce", 2, 512);
  c.model.hidden = {4096, 4096, 4096};
  c.allreduce.bucket_cap_mb = 1.0;
  c.allreduce.first_bucket_mb = 0.25;
  c.run.epochs = 8;  // 2048 samples / 512 = 4 steps per epoch: 32, capped at 30
  c.run.max_steps = 30;
  c.run.warmup_steps = 5;
  // Precondition: several buckets, and bucket 0 (the last layers' parameters) leaves layer 2
  // (parameters 2 and 3) and layer 1 to be computed while it is reduced.
  const auto model = make_model(c, data_->shape(), kCudaTrainingClasses);
  const std::vector<Bucket> buckets = assign_buckets(model->params(), sizeof(float), c.allreduce.first_bucket_mb,
                                                     c.allreduce.bucket_cap_mb);
  ASSERT_GE(buckets.size(), 2u);
  for (const std::size_t p : buckets[0].params) ASSERT_GT(p, 3u) << "bucket 0 holds parameter " << p;

  const RunResult r = train_allreduce(c, data());
  ASSERT_EQ(r.steps_total, 30);
  std::vector<double> total, exposed;
  for (const auto& s : r.ranks[0].steps) {
    total.push_back(s.phases.comm);
    exposed.push_back(s.phases.comm_exposed);
    EXPECT_GE(s.phases.backward, 0.0);
  }
  ASSERT_EQ(total.size(), 25u);
  EXPECT_GT(median(total), 0.0);
  EXPECT_LT(median(exposed), median(total));
}

TEST_F(CudaTraining, NcclOneRankMatchesLocalOneRank) {
#ifndef DPBENCH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  TrainConfig nccl = gpu_config("allreduce", 1, 64);
  nccl.comm = Backend::nccl;
  const RunResult a = train_allreduce(nccl, data());
  const RunResult b = train_allreduce(gpu_config("allreduce", 1, 64), data());
  expect_trained(a);
  expect_trained(b);
  // One rank: no reduction at all, the same kernels in the same order: identical bits.
  EXPECT_EQ(a.final_params, b.final_params);
}

// NCCL ranks as threads need one GPU each before NCCL 2.30 ("Duplicate GPU detected").
TEST_F(CudaTraining, NcclTwoRanksMatchLocal) {
#ifndef DPBENCH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#endif
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs for 2 in-process NCCL ranks (one GPU here)";
  for (const std::string mode : {"ps", "allreduce"}) {
    TrainConfig nccl = gpu_config(mode, 2, 64);
    nccl.comm = Backend::nccl;
    const TrainConfig local = gpu_config(mode, 2, 64);
    const RunResult a = mode == "ps" ? train_data_parallel(nccl, data()) : train_allreduce(nccl, data());
    const RunResult b = mode == "ps" ? train_data_parallel(local, data()) : train_allreduce(local, data());
    EXPECT_LT(relative_l2(a.final_params, b.final_params), 1e-5) << mode;
    EXPECT_EQ(a.ranks[1].comm_per_step.bytes_sent, b.ranks[1].comm_per_step.bytes_sent) << mode;
  }
}

// The cnn workload on the GPU against the CPU: ps (running statistics from the root's
// replica), allreduce with per-rank BatchNorm (running statistics broadcast from rank 0) and
// with SyncBatchNorm. Parameters and BatchNorm running statistics both. Tolerance as in
// GpuModesMatchCpuModes (fp32 sums in another order).
TEST_F(CudaTraining, CnnMatchesCpu) {
  auto images = make_synthetic_dataset(SampleShape{1, 8, 8}, kCudaTrainingClasses, 1024, 3);
  const TrainData td{images.get(), nullptr};
  for (const std::string variant : {"ps", "allreduce", "allreduce sync_bn"}) {
    const bool ps = variant == "ps";
    TrainConfig gpu = gpu_config(ps ? "ps" : "allreduce", 2, 32);
    gpu.model.workload = "cnn";
    gpu.model.channels = {4, 6};
    gpu.model.hidden = {16};
    gpu.model.sync_bn = variant == "allreduce sync_bn";
    TrainConfig cpu = gpu;
    cpu.device = DeviceKind::cpu;
    const RunResult g = ps ? train_data_parallel(gpu, td) : train_allreduce(gpu, td);
    const RunResult c = ps ? train_data_parallel(cpu, td) : train_allreduce(cpu, td);
    expect_trained(g);
    expect_trained(c);
    EXPECT_LT(relative_l2(g.final_params, c.final_params), 1e-4) << variant;
    // Two BatchNorm layers: running mean and variance of 4 and 6 channels.
    ASSERT_EQ(c.final_buffers.size(), 2u * (4 + 6)) << variant;
    ASSERT_EQ(g.final_buffers.size(), c.final_buffers.size()) << variant;
    EXPECT_LT(relative_l2(g.final_buffers, c.final_buffers), 1e-4) << variant;
  }
}

// The dlrm workload (dense embedding gradients) on the GPU against the CPU, under ps and
// allreduce: 12 steps of SGD at lr 0.5 over Zipf(1.05) click logs, so that rows repeat and the
// embedding bag's atomic backward sums several lookups per row. Tolerance as in
// GpuModesMatchCpuModes (the MLPs' fp32 GEMMs and the bags' atomics add in another order).
TEST_F(CudaTraining, DlrmMatchesCpu) {
  const DlrmShape shape = testing::small_dlrm_shape(3, 300);
  const auto logs = make_click_logs(shape, {1.05}, 1024, 5);
  const TrainData td{logs.get(), nullptr};
  for (const std::string mode : {"ps", "allreduce"}) {
    TrainConfig cpu = testing::small_dlrm_config(shape, 2, 64, 12);
    cpu.mode = parse_mode(mode);
    TrainConfig gpu = cpu;
    gpu.device = DeviceKind::cuda;
    gpu.precision = Precision::fp32;
    const RunResult g = mode == "ps" ? train_data_parallel(gpu, td) : train_allreduce(gpu, td);
    const RunResult c = mode == "ps" ? train_data_parallel(cpu, td) : train_allreduce(cpu, td);
    ASSERT_EQ(g.final_params.size(), c.final_params.size()) << mode;
    ASSERT_TRUE(std::isfinite(g.final_train_loss)) << mode;
    EXPECT_LT(relative_l2(g.final_params, c.final_params), 1e-4) << mode;
    EXPECT_NEAR(g.final_train_loss, c.final_train_loss, 1e-3) << mode;
  }
}

// NCCL with one rank per process, as a launcher that shares the ncclUniqueId itself runs it: two
// processes of this binary on one GPU (distinct NCCL_HOSTID, so NCCL treats them as two hosts
// and talks over loopback). Both modes' parameters after 20 steps match the local backend's
// 2-rank run (same tolerance as the other agreement tests).
constexpr const char* kTrainChild = "DPBENCH_TRAIN_CHILD";

TEST_F(CudaTraining, NcclTwoProcessesMatchLocal) {
#ifndef DPBENCH_HAVE_NCCL
  GTEST_SKIP() << "built without NCCL";
#else
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  testing::TempDir tmp;
  for (const std::string mode : {"ps", "allreduce"}) {
    const NcclUniqueIdBytes id = nccl_create_unique_id();
    const std::string out = (tmp.path() / (mode + ".f32")).string();
    std::vector<pid_t> pids;
    for (int r = 0; r < 2; ++r) {
      pids.push_back(testing::spawn_self("CudaTrainingChild.RunsOneRankOfATwoProcessRun",
                                         {std::string(kTrainChild) + "=" + mode + " " + std::to_string(r) + " 2 " +
                                              testing::to_hex(id) + " " + out,
                                          "NCCL_HOSTID=dpbench-train-host-" + std::to_string(r)},
                                         {std::string(kTrainChild) + "=", "NCCL_HOSTID="}));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
    // Reap both children before asserting: a failed rank 0 must not leave rank 1 running (and
    // holding the GPU) into the next tests.
    int status[2];
    for (int r = 0; r < 2; ++r) status[r] = testing::wait_child(pids[static_cast<std::size_t>(r)], deadline);
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(testing::exited_ok(status[r])) << mode << " rank " << r << (status[r] < 0 ? " hung" : " failed");
    }
    std::ifstream in(out, std::ios::binary | std::ios::ate);
    ASSERT_TRUE(in) << mode << ": rank 0 wrote no parameters to " << out;
    std::vector<float> params(static_cast<std::size_t>(in.tellg()) / sizeof(float));
    in.seekg(0);
    in.read(reinterpret_cast<char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
    const TrainConfig local = gpu_config(mode, 2, 64);
    const RunResult b = mode == "ps" ? train_data_parallel(local, data()) : train_allreduce(local, data());
    ASSERT_EQ(params.size(), b.final_params.size()) << mode;
    EXPECT_LT(relative_l2(params, b.final_params), 1e-5) << mode;
  }
#endif
}

// The child side of NcclTwoProcessesMatchLocal: one rank; rank 0 writes its final parameters.
TEST(CudaTrainingChild, RunsOneRankOfATwoProcessRun) {
  const char* spec = std::getenv(kTrainChild);
  if (spec == nullptr) GTEST_SKIP() << "runs only as a child process of CudaTraining.NcclTwoProcessesMatchLocal";
  std::istringstream fields(spec);
  std::string mode, hex, out;
  int rank = -1, p = 0;
  fields >> mode >> rank >> p >> hex >> out;
  ASSERT_TRUE(fields && rank >= 0 && p > rank) << kTrainChild << "=" << spec;
  TrainConfig c = gpu_config(mode, p, 64);
  c.comm = Backend::nccl;
  c.timeout = std::chrono::seconds(60);  // well inside the parent's 180 s: a stall reports NCCL's reason
  c.process.rank = rank;
  c.process.ranks_on_this_node = 1;  // its own NCCL host (NCCL_HOSTID): the two ranks do not share a communicator's GPU
  c.process.nccl_id = testing::from_hex(hex);
  const auto data = make_synthetic_dataset(SampleShape{1, 1, static_cast<int>(kFeatures)}, kCudaTrainingClasses, 2048,
                                           5);
  const TrainData td{data.get(), nullptr};
  const RunResult r = mode == "ps" ? train_data_parallel(c, td) : train_allreduce(c, td);
  if (rank != 0) return;
  ASSERT_EQ(r.final_params.size(), r.num_params);
  std::ofstream f(out, std::ios::binary);
  f.write(reinterpret_cast<const char*>(r.final_params.data()),
          static_cast<std::streamsize>(r.final_params.size() * sizeof(float)));
  ASSERT_TRUE(f.good()) << out;
}

TEST(CudaTrainingConfig, BadPrecisionIsAnInputError) {
  TrainConfig c;
  c.device = DeviceKind::cuda;
  try {
    c.precision = parse_precision("bf16");
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--precision bf16"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dpbench
