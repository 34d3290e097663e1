// Tests of the launch machinery GPU ranks use, written once in train/ and core/ so that it runs
// here: a torchrun-style rank's payload broadcast, record gathering and failure reporting over
// the rendezvous (run_rendezvous_rank), communicators outside a LocalGroup aborted with it
// (CommAbortRegistry), rank placement on devices and NCCL's shared-GPU rule.
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"
#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "core/rendezvous.hpp"
#include "train/training.hpp"

namespace dpbench {
namespace {

using namespace std::chrono_literals;

constexpr const char* kHost = "127.0.0.1";

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
  EXPECT_TRUE(nccl_allows_shared_gpu("3.0.1"));
  EXPECT_TRUE(nccl_allows_shared_gpu(""));  // unknown: creating the communicator says
}

// Runs run_rendezvous_rank for ranks 0..p-1 on threads, each with its own rendezvous and records
// (as processes have). rank_main(rank, payload) is each rank's body. Returns each rank's records
// and the message it threw ("" if none; "InputError: ..." for an InputError).
struct RankOutcome {
  std::vector<RankResult> ranks;
  std::string error;
};
std::vector<RankOutcome> run_job(int p, const std::function<void(int, const std::string&, RankResult&)>& rank_main) {
  Rendezvous root(kHost, 0, p, 0, 20s);
  std::vector<RankOutcome> out(static_cast<std::size_t>(p));
  auto one = [&](Rendezvous& rv) {
    const int r = rv.rank();
    RankOutcome& o = out[static_cast<std::size_t>(r)];
    o.ranks.resize(static_cast<std::size_t>(p));
    try {
      run_rendezvous_rank(
          rv, "run 1", o.ranks, [] { return std::string("id\0bytes", 8); },
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
      Rendezvous rv(kHost, root.port(), p, r, 20s);
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

}  // namespace
}  // namespace dpbench
