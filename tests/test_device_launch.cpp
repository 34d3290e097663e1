// Tests of the launch machinery GPU ranks use, written once in train/ and core/ so that it runs
// here: a torchrun-style rank's payload broadcast, record gathering and failure reporting over
// the rendezvous (run_rendezvous_rank), communicators outside a LocalGroup aborted with it
// (CommAbortRegistry), rank placement on devices and NCCL's shared-GPU rule, and the GPU
// launcher's whole decision tree (launch_device_ranks) driven by a fake device.
#include <chrono>
#include <cstdlib>
#include <future>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/rendezvous.hpp"
#include "launch/device_launch.hpp"
#include "train/failure_guard.hpp"
#include "train/training.hpp"

namespace dpbench {
namespace {

using namespace std::chrono_literals;

constexpr const char* kDeviceLaunchHost = "127.0.0.1";

TEST(DevicePlacement, RanksOnDeviceCountsRoundRobinPlacement) {
  EXPECT_EQ(ranks_on_device(5, 2, 0), 3);
  EXPECT_EQ(ranks_on_device(5, 2, 1), 2);
  EXPECT_EQ(ranks_on_device(2, 4, 1), 1);
  EXPECT_EQ(ranks_on_device(2, 4, 3), 0);
  EXPECT_EQ(ranks_on_device(8, 8, 7), 1);
}

TEST(DevicePlacement, NcclSharesAGpuFrom2Point30On) {
  EXPECT_FALSE(nccl_allows_shared_gpu("2.28.9"));
  EXPECT_FALSE(nccl_allows_shared_gpu("2.5.6"));
  EXPECT_TRUE(nccl_allows_shared_gpu("2.30.0"));
  EXPECT_EQ(nccl_version_text(22809), "2.28.9");  // NCCL_VERSION(2,28,9) since 2.9
  EXPECT_EQ(nccl_version_text(23001), "2.30.1");
  EXPECT_EQ(nccl_version_text(2708), "2.7.8");  // before 2.9: X*1000 + Y*100 + Z
  EXPECT_EQ(nccl_version_text(0), "");
  EXPECT_TRUE(nccl_allows_shared_gpu("3.0.1"));
  EXPECT_TRUE(nccl_allows_shared_gpu(""));  // unknown: creating the communicator says
}

// Which GPUs a build runs on, from CMake's CUDA_ARCHITECTURES and the compute capability alone
// (no CUDA context): machine code within its major version upwards, PTX anywhere above.
TEST(DevicePlacement, BuildRunsOnCapabilitiesItsArchitecturesCover) {
  EXPECT_TRUE(cuda_build_runs_on("90", 9, 0));
  EXPECT_FALSE(cuda_build_runs_on("90", 8, 0));
  EXPECT_TRUE(cuda_build_runs_on("90", 10, 0));        // compute_90 PTX, compiled by the driver
  EXPECT_FALSE(cuda_build_runs_on("90-real", 10, 0));  // machine code only
  EXPECT_TRUE(cuda_build_runs_on("80-real", 8, 6));    // sm_80 runs on 8.6
  EXPECT_FALSE(cuda_build_runs_on("86-real", 8, 0));
  EXPECT_TRUE(cuda_build_runs_on("90a-real", 9, 0));
  EXPECT_FALSE(cuda_build_runs_on("90a-real", 10, 0));  // architecture-specific: 9.0 only
  EXPECT_TRUE(cuda_build_runs_on("86-virtual", 8, 9));
  EXPECT_FALSE(cuda_build_runs_on("86-virtual", 8, 0));
  EXPECT_FALSE(cuda_build_runs_on("80-real,90-real", 7, 5));
  EXPECT_TRUE(cuda_build_runs_on("80-real;90-real", 9, 0));
  EXPECT_TRUE(cuda_build_runs_on("native", 7, 5));  // unreadable: the first launch tells
  EXPECT_TRUE(cuda_build_runs_on("", 5, 0));
}

// A rank that throws aborts its communicators before the first resource whose destruction
// synchronises the device goes, once; a rank that returns never aborts.
TEST(FailureGuard, AbortsOnceBeforeTheFirstSynchronisingDestructorWhenTheRankThrows) {
  std::vector<std::string> events;
  struct Syncing {
    FailureGuard& guard;
    std::vector<std::string>& events;
    std::string name;
    ~Syncing() {
      guard.before_sync_destroy();
      events.push_back(name + " destroyed");
    }
  };
  try {
    FailureGuard guard([&] { events.push_back("abort"); });
    Syncing blas{guard, events, "blas"};
    Syncing staging{guard, events, "staging"};
    throw Error("kernel fault");
  } catch (const Error&) {
  }
  EXPECT_EQ(events, (std::vector<std::string>{"abort", "staging destroyed", "blas destroyed"}));
  events.clear();
  {
    FailureGuard guard([&] { events.push_back("abort"); });
    Syncing blas{guard, events, "blas"};
  }
  EXPECT_EQ(events, (std::vector<std::string>{"blas destroyed"}));
  // An abort that throws is swallowed: the error being unwound is the one reported.
  try {
    FailureGuard guard([] { throw Error("abort failed"); });
    throw Error("kernel fault");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernel fault");
  }
}

// Runs run_rendezvous_rank for ranks 0..p-1 on threads, each with its own rendezvous and records
// (as processes have). rank_main(rank, payload) is each rank's body. Returns each rank's records
// and the message it threw ("" if none; "InputError: ..." for an InputError).
struct RankOutcome {
  std::vector<RankResult> ranks;
  std::string error;
};
std::vector<RankOutcome> run_job(int p, const std::function<void(int, const std::string&, RankResult&)>& rank_main) {
  Rendezvous root(kDeviceLaunchHost, 0, p, 0, 20s);
  std::vector<RankOutcome> out(static_cast<std::size_t>(p));
  auto one = [&](Rendezvous& rv) {
    const int r = rv.rank();
    RankOutcome& o = out[static_cast<std::size_t>(r)];
    o.ranks.resize(static_cast<std::size_t>(p));
    try {
      run_rendezvous_rank(
          rv, "run 1", rank_records(o.ranks), [] { return std::string("id\0bytes", 8); },
          [&](const std::string& payload) { rank_main(r, payload, o.ranks[static_cast<std::size_t>(r)]); });
    } catch (const InputError& e) {
      o.error = std::string("InputError: ") + e.what();
    } catch (const std::exception& e) {
      o.error = e.what();
    }
  };
  std::vector<std::future<void>> peers;
  for (int r = 1; r < p; ++r) {
    peers.push_back(std::async(std::launch::async, [&, r] {
      Rendezvous rv(kDeviceLaunchHost, root.port(), p, r, 20s);
      one(rv);
    }));
  }
  one(root);
  for (auto& f : peers) f.get();
  return out;
}

TEST(RendezvousRank, EveryRankGetsRankZerosPayloadAndRankZeroGetsEveryRecord) {
  const auto out = run_job(3, [](int r, const std::string& payload, RankResult& mine) {
    EXPECT_EQ(payload, std::string("id\0bytes", 8)) << "rank " << r;
    mine.rank = r;
    mine.local_batch = static_cast<std::size_t>(10 + r);
  });
  for (const auto& o : out) EXPECT_EQ(o.error, "");
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(out[0].ranks[static_cast<std::size_t>(r)].rank, r);
    EXPECT_EQ(out[0].ranks[static_cast<std::size_t>(r)].local_batch, static_cast<std::size_t>(10 + r));
  }
}

TEST(RendezvousRank, AFailingRankIsNamedOnItselfAndOnRankZero) {
  const auto out = run_job(2, [](int r, const std::string&, RankResult&) {
    if (r == 1) throw Error("out of memory");
  });
  EXPECT_EQ(out[1].error, "rank 1: out of memory");
  // Rank 0 finished its body and learns of rank 1's failure while gathering.
  EXPECT_NE(out[0].error.find("rank 1: out of memory"), std::string::npos) << out[0].error;
}

TEST(RendezvousRank, InputErrorStaysAnInputErrorWithTheRankPrepended) {
  const auto out = run_job(2, [](int r, const std::string&, RankResult&) {
    if (r == 1) throw InputError("--precision fp8: unknown");
  });
  EXPECT_EQ(out[1].error, "InputError: rank 1: --precision fp8: unknown");
}

TEST(RendezvousRank, RankZeroFailingAfterAPeerNamesThePeerFirst) {
  const auto out = run_job(2, [](int r, const std::string&, RankResult&) {
    if (r == 1) throw Error("cuda: kernel fault");
    std::this_thread::sleep_for(200ms);  // rank 1's report arrives first
    throw Error("rank 0: allreduce: aborted");
  });
  EXPECT_EQ(out[0].error, "rank 1 failed: rank 1: cuda: kernel fault (and then rank 0: allreduce: aborted)");
}

TEST(CommAbortRegistry, GroupAbortAbortsRegisteredCommunicatorsAndLateOnesAtOnce) {
  auto group = std::make_shared<LocalGroup>(2, 10s);
  CommAbortRegistry registry(*group);
  // Stand-ins for NCCL communicators: communicators of their own groups, which record the abort.
  auto outside0 = std::make_shared<LocalGroup>(1, 10s);
  auto outside1 = std::make_shared<LocalGroup>(1, 10s);
  LocalCommunicator comm0(outside0, 0, nullptr), comm1(outside1, 0, nullptr);
  registry.set(0, &comm0);
  group->abort("rank 0: failed");
  EXPECT_TRUE(outside0->aborted());
  EXPECT_EQ(outside0->abort_reason(), "rank 0: failed");
  EXPECT_FALSE(outside1->aborted());
  registry.set(1, &comm1);  // registered after the abort: aborted at once
  EXPECT_TRUE(outside1->aborted());
  EXPECT_EQ(outside1->abort_reason(), "rank 0: failed");
  registry.set(0, nullptr);
  registry.set(1, nullptr);
}

// A fake device for launch_device_ranks: records every rank it is asked to run.
struct FakeDevice {
  struct Run {
    int rank = -1, device = -1;
    bool virtual_rank = false, local = false, nccl_threads = false, on_live = false;
    int peer_devices = 0;
    CommIdBytes id{};
  };
  std::mutex mutex;
  std::vector<Run> runs;
  int ids_created = 0;
  int fail_rank = -1;
  int barriers = 0;  // ranks that passed the shared-GPU barrier

  DeviceRanks launcher(int devices, std::string version = "2.28.9") {
    DeviceRanks d;
    d.devices = devices;
    d.nccl_version = [version] { return version; };
    d.create_id = [this] {
      std::lock_guard<std::mutex> lock(mutex);
      ++ids_created;
      CommIdBytes id{};
      id[0] = 'N';
      id[127] = static_cast<char>(ids_created);
      return id;
    };
    d.run_rank = [this](int rank, int device, bool virtual_rank, const CommSource& source) {
      if (rank == fail_rank) throw Error("kernel fault");
      if (source.shared_gpu_barrier) {
        source.shared_gpu_barrier(rank);  // as the CUDA rank does before its first collective
        std::lock_guard<std::mutex> lock(mutex);
        ++barriers;
      }
      std::lock_guard<std::mutex> lock(mutex);
      Run run{rank,
              device,
              virtual_rank,
              source.group != nullptr,
              source.nccl_threads != nullptr,
              static_cast<bool>(source.on_live),
              source.peer_devices,
              {}};
      if (source.id != nullptr) run.id = *source.id;
      runs.push_back(run);
    };
    return d;
  }
  const Run& of(int rank) const {
    for (const Run& r : runs) {
      if (r.rank == rank) return r;
    }
    throw Error("rank did not run");
  }
};

TrainConfig launch_config(const std::string& comm, int world_size) {
  TrainConfig c;
  c.comm = parse_backend(comm);
  c.world_size = world_size;
  c.timeout = 10s;
  return c;
}

TEST(DeviceLaunch, LocalRanksAreThreadsPlacedRoundRobinAndVirtualWhenDevicesAreShared) {
  FakeDevice fake;
  std::vector<RankResult> ranks(5);
  launch_device_ranks(launch_spec(launch_config("local", 5)), rank_records(ranks), fake.launcher(2));
  ASSERT_EQ(fake.runs.size(), 5u);
  for (int r = 0; r < 5; ++r) {
    EXPECT_EQ(fake.of(r).device, r % 2);
    EXPECT_TRUE(fake.of(r).virtual_rank);  // 3 ranks on GPU 0, 2 on GPU 1
    EXPECT_TRUE(fake.of(r).local);
    EXPECT_EQ(fake.of(r).peer_devices, 2);
  }
  EXPECT_EQ(fake.ids_created, 0);
}

TEST(DeviceLaunch, NcclThreadsShareOneIdAndRegisterForAborts) {
  FakeDevice fake;
  std::vector<RankResult> ranks(2);
  launch_device_ranks(launch_spec(launch_config("nccl", 2)), rank_records(ranks), fake.launcher(4));
  ASSERT_EQ(fake.runs.size(), 2u);
  EXPECT_EQ(fake.ids_created, 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(fake.of(r).device, r);
    EXPECT_FALSE(fake.of(r).virtual_rank);
    EXPECT_FALSE(fake.of(r).local);
    EXPECT_TRUE(fake.of(r).nccl_threads);
    EXPECT_TRUE(fake.of(r).on_live);
    EXPECT_EQ(fake.of(r).id[0], 'N');
    EXPECT_EQ(fake.of(r).id[127], 1);
  }
}

TEST(DeviceLaunch, NcclRanksSharingAGpuNeedNccl2Point30) {
  FakeDevice old_nccl;
  std::vector<RankResult> ranks(3);
  try {
    launch_device_ranks(launch_spec(launch_config("nccl", 3)), rank_records(ranks), old_nccl.launcher(2, "2.28.9"));
    FAIL() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--comm nccl --ranks 3: 3 rank(s) on 2 GPU(s) here, and NCCL 2.28.9 refuses"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(old_nccl.runs.empty());
  FakeDevice new_nccl;
  launch_device_ranks(launch_spec(launch_config("nccl", 3)), rank_records(ranks), new_nccl.launcher(2, "2.30.1"));
  EXPECT_EQ(new_nccl.runs.size(), 3u);
  EXPECT_TRUE(new_nccl.of(2).virtual_rank);
  EXPECT_EQ(new_nccl.barriers, 3);  // every rank met once, sharing its GPU or not
}

// The same rule on every launch path: a rank the caller names is refused like ranks as threads.
TEST(DeviceLaunch, AGivenProcessRankFollowsTheSharedGpuRuleToo) {
  FakeDevice fake;
  TrainConfig c = launch_config("nccl", 4);
  c.process.rank = 1;
  std::vector<RankResult> ranks(4);
  EXPECT_THROW(launch_device_ranks(launch_spec(c), rank_records(ranks), fake.launcher(2, "2.28.9")), InputError);
  EXPECT_TRUE(fake.runs.empty());
  c.world_size = 2;  // a GPU per rank: any NCCL will do
  launch_device_ranks(launch_spec(c), rank_records(ranks), fake.launcher(2, "2.28.9"));
  EXPECT_EQ(fake.runs.size(), 1u);
}

// NCCL reads NCCL_MULTI_RANK_GPU_ENABLE once per process: it is set at every NCCL launch that
// NCCL 2.30+ could share, even one with a GPU per rank (a sweep's first point), never before 2.30,
// and a user's own value is kept.
TEST(DeviceLaunch, NcclMultiRankGpuEnableIsSetWhateverTheFirstPointsShape) {
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
  EXPECT_FALSE(apply_nccl_launch_policy(2, 2, "2.28.9", "--comm nccl --ranks 2"));
  EXPECT_EQ(std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"), nullptr);
  FakeDevice fake;
  std::vector<RankResult> ranks(2);
  launch_device_ranks(launch_spec(launch_config("nccl", 2)), rank_records(ranks),
                      fake.launcher(4, "2.30.1"));  // no sharing
  ASSERT_NE(std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"), "1");
  EXPECT_EQ(fake.barriers, 0);  // nobody shares: no meeting
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "0", 1);
  EXPECT_TRUE(apply_nccl_launch_policy(3, 2, "2.30.1", "--comm nccl --ranks 3"));
  EXPECT_STREQ(std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"), "0");
  unsetenv("NCCL_MULTI_RANK_GPU_ENABLE");
}

TEST(DeviceLaunch, AGivenProcessRankRunsAloneWithTheGivenId) {
  FakeDevice fake;
  TrainConfig c = launch_config("nccl", 4);
  c.process.rank = 3;
  c.process.nccl_id[0] = 'G';
  std::vector<RankResult> ranks(4);
  launch_device_ranks(launch_spec(c), rank_records(ranks), fake.launcher(2, "2.30.1"));
  ASSERT_EQ(fake.runs.size(), 1u);
  EXPECT_EQ(fake.of(3).device, 1);
  EXPECT_TRUE(fake.of(3).virtual_rank);  // ranks 1 and 3 share GPU 1
  EXPECT_EQ(fake.of(3).id[0], 'G');
  EXPECT_EQ(fake.ids_created, 0);
  c.process.rank = 4;
  EXPECT_THROW(launch_device_ranks(launch_spec(c), rank_records(ranks), fake.launcher(2, "2.30.1")), InputError);
}

TEST(DeviceLaunch, RefusesHostBackendsAndMachinesWithoutDevices) {
  FakeDevice fake;
  std::vector<RankResult> ranks(2);
  EXPECT_THROW(launch_device_ranks(launch_spec(launch_config("mpi", 2)), rank_records(ranks), fake.launcher(2)),
               InputError);
  EXPECT_THROW(launch_device_ranks(launch_spec(launch_config("local", 2)), rank_records(ranks), fake.launcher(0)),
               Error);
  EXPECT_TRUE(fake.runs.empty());
}

TEST(DeviceLaunch, AFailingRankIsRethrownWithItsRank) {
  FakeDevice fake;
  fake.fail_rank = 1;
  std::vector<RankResult> ranks(2);
  try {
    launch_device_ranks(launch_spec(launch_config("local", 2)), rank_records(ranks), fake.launcher(2));
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "rank 1: kernel fault");
  }
}

}  // namespace
}  // namespace dpbench
