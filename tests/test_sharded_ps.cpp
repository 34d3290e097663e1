// Tests of the sharded parameter server (sharded_ps/): the servers' ranges, the same parameters
// as `allreduce` after 20 steps for 1-5 ranks (MLP and CNN, both transports, fewer servers than
// ranks), byte counts equal to the documented formulas, memory split across the servers, and
// bad --servers values as input errors.
#include <algorithm>
#include <memory>
#include <numeric>
#include <string>

#include <gtest/gtest.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "tests/training_fixtures.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using testing::relative_l2;

std::unique_ptr<Dataset> mlp_data() { return make_synthetic_dataset(SampleShape{1, 1, 48}, 10, 2048, 5); }

TrainConfig sharded(int p, std::size_t batch, const std::string& transport, int servers = 0) {
  TrainConfig c = testing::small_train_config("sharded_ps", p, batch);
  c.transport = parse_transport(transport);
  c.sharded_ps.servers = servers;
  return c;
}

TEST(ShardLayout, ContiguousRangesBalancedOverTheServers) {
  const ShardLayout l = shard_layout(10, 4, 3);
  EXPECT_EQ(l.counts, (std::vector<std::size_t>{4, 3, 3, 0}));
  EXPECT_EQ(std::vector<std::size_t>(l.offsets.begin(), l.offsets.begin() + 3), (std::vector<std::size_t>{0, 4, 7}));
  // A bucket over [3, 8) touches server 0's last element, all of server 1 and server 2's first.
  EXPECT_EQ(shard_counts_within(l, 3, 5), (std::vector<std::size_t>{1, 3, 1, 0}));
  EXPECT_THROW(shard_layout(10, 4, 0), InputError);
  EXPECT_THROW(shard_layout(10, 4, 5), InputError);
}

TEST(ShardedPs, MatchesAllreduceAfter20StepsForOneToFiveRanks) {
  const auto data = mlp_data();
  const TrainData td{data.get(), nullptr};
  for (int p = 1; p <= 5; ++p) {
    const RunResult ar = train_allreduce(testing::small_train_config("allreduce", p, 60), td);
    ASSERT_EQ(ar.final_params.size(), ar.num_params);
    ASSERT_NE(ar.num_params % 4, 0u);  // p = 4 does not divide the parameter count
    for (const std::string transport : {"collective", "p2p"}) {
      const RunResult sp = train_sharded_ps(sharded(p, 60, transport), td);
      ASSERT_EQ(sp.steps_total, 20);
      EXPECT_LT(relative_l2(sp.final_params, ar.final_params), 1e-5) << "p=" << p << " " << transport;
      EXPECT_NEAR(sp.final_train_loss, ar.final_train_loss, 1e-4) << "p=" << p << " " << transport;
    }
  }
}

TEST(ShardedPs, FewerServersThanRanksMatchAllreduce) {
  const auto data = mlp_data();
  const TrainData td{data.get(), nullptr};
  const RunResult ar = train_allreduce(testing::small_train_config("allreduce", 4, 64), td);
  for (const std::string transport : {"collective", "p2p"}) {
    for (int servers : {1, 3}) {
      const RunResult sp = train_sharded_ps(sharded(4, 64, transport, servers), td);
      EXPECT_LT(relative_l2(sp.final_params, ar.final_params), 1e-5) << transport << " K=" << servers;
    }
  }
}

TEST(ShardedPs, CnnMatchesAllreduceWithBatchNormBuffers) {
  const auto images = make_synthetic_dataset(SampleShape{1, 8, 8}, 10, 1024, 3);
  const TrainData td{images.get(), nullptr};
  auto cnn = [](const std::string& mode, const std::string& transport) {
    TrainConfig c = testing::small_train_config(mode, 3, 48);
    c.model.workload = "cnn";
    c.model.channels = {4, 6};
    c.model.hidden = {16};
    c.transport = parse_transport(transport);
    return c;
  };
  const RunResult ar = train_allreduce(cnn("allreduce", "collective"), td);
  for (const std::string transport : {"collective", "p2p"}) {
    const RunResult sp = train_sharded_ps(cnn("sharded_ps", transport), td);
    EXPECT_LT(relative_l2(sp.final_params, ar.final_params), 1e-5) << transport;
    EXPECT_LT(relative_l2(sp.final_buffers, ar.final_buffers), 1e-5) << transport;
  }
}

TEST(ShardedPs, BytesPerRankPerStepEqualTheFormulas) {
  const auto data = mlp_data();
  const TrainData td{data.get(), nullptr};
  struct Case {
    int p;
    int servers;
  };
  for (const Case k : {Case{2, 0}, Case{3, 0}, Case{4, 0}, Case{5, 0}, Case{4, 1}, Case{4, 3}}) {
    for (const std::string transport : {"collective", "p2p"}) {
      const RunResult r = train_sharded_ps(sharded(k.p, 60, transport, k.servers), td);
      const ShardLayout layout = shard_layout(r.num_params, k.p, k.servers == 0 ? k.p : k.servers);
      std::int64_t total = 0;
      for (int rank = 0; rank < k.p; ++rank) {
        const ElementCounts f = sharded_ps_step_counts(layout, rank, parse_transport(transport));
        const auto& got = r.ranks[static_cast<std::size_t>(rank)].comm_per_step;
        EXPECT_EQ(got.bytes_sent, static_cast<std::int64_t>(f.sent * sizeof(float)))
            << transport << " p=" << k.p << " K=" << k.servers << " rank " << rank;
        EXPECT_EQ(got.bytes_received, static_cast<std::int64_t>(f.received * sizeof(float)))
            << transport << " p=" << k.p << " K=" << k.servers << " rank " << rank;
        total += got.bytes_sent;
      }
      if (k.servers == 0 && transport == "collective") {
        // Every range crosses p-1 links in each phase: ring all-reduce's 2(p-1) n in all.
        EXPECT_EQ(total, static_cast<std::int64_t>(2 * (k.p - 1) * r.num_params * sizeof(float)));
      }
    }
  }
  // The formulas themselves, at K = p: 2(p-1)/p n each way up to rounding (collective), and
  // n + (p-2) n/p (p2p); at K = 1 the server's link carries p-1 times the parameters each way.
  const ShardLayout even = shard_layout(1200, 4, 4);
  EXPECT_EQ(sharded_ps_step_counts(even, 1, Transport::collective).sent, 1800u);
  EXPECT_EQ(sharded_ps_step_counts(even, 1, Transport::p2p).sent, 1800u);
  const ShardLayout one = shard_layout(1200, 4, 1);
  EXPECT_EQ(sharded_ps_step_counts(one, 0, Transport::p2p).received, 3u * 1200);
  EXPECT_EQ(sharded_ps_step_counts(one, 2, Transport::p2p).received, 1200u);
}

TEST(ShardedPs, MemoryIsSplitAcrossTheServers) {
  const auto data = mlp_data();
  const TrainData td{data.get(), nullptr};
  for (const std::string transport : {"collective", "p2p"}) {
    const RunResult all = train_sharded_ps(sharded(4, 64, transport), td);
    std::int64_t lo = all.ranks[0].memory.peak_bytes, hi = lo;
    for (const auto& rank : all.ranks) {
      lo = std::min(lo, rank.memory.peak_bytes);
      hi = std::max(hi, rank.memory.peak_bytes);
      // A quarter of the momentum buffer each (up to one element of rounding).
      EXPECT_NEAR(static_cast<double>(rank.memory.peak_by_category.at("optimizer_state")),
                  static_cast<double>(all.num_params * sizeof(float)) / 4.0, sizeof(float));
    }
    EXPECT_LE(static_cast<double>(hi), 1.05 * static_cast<double>(lo)) << transport;

    const RunResult one = train_sharded_ps(sharded(4, 64, transport, 1), td);
    EXPECT_EQ(one.ranks[0].memory.peak_by_category.at("optimizer_state"),
              static_cast<std::int64_t>(one.num_params * sizeof(float)));
    for (std::size_t w = 1; w < one.ranks.size(); ++w) {
      EXPECT_EQ(one.ranks[w].memory.peak_by_category.at("optimizer_state"), 0) << transport;
      EXPECT_LT(one.ranks[w].memory.peak_bytes, one.ranks[0].memory.peak_bytes) << transport;
    }
  }
}

TEST(ShardedPs, BadServersAndTransportAreInputErrors) {
  const auto data = mlp_data();
  const TrainData td{data.get(), nullptr};
  EXPECT_THROW(train_sharded_ps(sharded(4, 64, "collective", 5), td), InputError);
  EXPECT_THROW(train_sharded_ps(sharded(4, 64, "collective", -1), td), InputError);
  EXPECT_THROW(train_sharded_ps(sharded(4, 64, "ring"), td), InputError);
  EXPECT_THROW(train_sharded_ps(sharded(3, 64, "collective"), td), InputError);  // 64 % 3 != 0
}

}  // namespace
}  // namespace dpbench
