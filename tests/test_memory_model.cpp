// The memory model (train/memory_model.hpp, each strategy's Strategy::memory) against the
// tracking allocator: every rank's peak bytes of every category, to the byte, for the built-in
// models in every mode and transport, 1-4 ranks, SGD and Adam.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "bench/app/memory_command.hpp"
#include "registry/strategies.hpp"
#include "ps/data_parallel.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "tests/training_fixtures.hpp"
#include "workloads/click_logs.hpp"
#include "train/memory_model.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

struct Case {
  std::string workload, mode, transport;
  int servers = 0;
  bool node_hierarchy = false;  // --hierarchy node over nodes of 2 ranks (1 at odd world sizes)
  int staleness = 0;            // sharded_ps --staleness
};

TrainConfig case_config(const Case& k, int p, const std::string& optimizer) {
  TrainConfig c = testing::small_train_config(k.mode, p, 60);
  c.transport = parse_transport(k.transport);
  c.sharded_ps.servers = k.servers > 0 ? std::min(k.servers, p) : 0;
  c.model.workload = k.workload;
  c.optimizer.name = optimizer;
  c.run.max_steps = 3;
  c.run.warmup_steps = 1;
  c.sharded_ps.staleness = k.staleness;
  if (k.node_hierarchy) {
    c.hierarchy = Hierarchy::node;
    c.process.ranks_on_this_node = p % 2 == 0 ? 2 : 1;
  }
  if (k.workload == "cnn") {
    c.model.channels = {3, 5};
    c.model.hidden = {12};
  }
  return c;
}

using testing::train_mode;

TEST(MemoryModel, EveryCategoryOfEveryRankEqualsTheAllocatorsPeakToTheByte) {
  const SampleShape mlp_shape{1, 1, 48}, cnn_shape{2, 8, 8};
  const auto mlp_data = make_synthetic_dataset(mlp_shape, 10, 600, 5);
  const auto cnn_data = make_synthetic_dataset(cnn_shape, 10, 600, 5);
  int checked = 0;
  for (const Case& k :
       {Case{"mlp", "ps", "collective"}, Case{"mlp", "ps", "p2p"}, Case{"mlp", "allreduce", "collective"},
        Case{"mlp", "sharded_ps", "collective"}, Case{"mlp", "sharded_ps", "p2p"},
        Case{"mlp", "sharded_ps", "collective", 2}, Case{"cnn", "ps", "collective"},
        Case{"cnn", "allreduce", "collective"}, Case{"cnn", "sharded_ps", "p2p"},
        Case{"mlp", "sharded_ps", "collective", 0, true}, Case{"mlp", "ps", "collective", 0, true},
        Case{"mlp", "sharded_ps", "collective", 0, false, 2}, Case{"cnn", "sharded_ps", "collective", 3, false, 1}}) {
    for (int p = 1; p <= 4; ++p) {
      for (const std::string optimizer : {"sgd", "adam"}) {
        const TrainConfig c = case_config(k, p, optimizer);
        const bool cnn = k.workload == "cnn";
        const RunResult run = train_mode(c, cnn ? *cnn_data : *mlp_data);
        const std::vector<RankMemory> model = find_strategy(c.mode).memory(
            builtin_memory_inputs(c, cnn ? cnn_shape : mlp_shape, 10));
        const std::string what = fmt::format("{} {} {} servers {} hierarchy {} staleness {} at {} ranks, {}",
                                             k.workload, k.mode, k.transport, c.sharded_ps.servers, c.hierarchy,
                                             c.sharded_ps.staleness, p, optimizer);
        ASSERT_EQ(model.size(), run.ranks.size()) << what;
        for (std::size_t r = 0; r < model.size(); ++r) {
          for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
            const auto name = std::string(category_name(static_cast<MemoryCategory>(cat)));
            EXPECT_EQ(static_cast<std::int64_t>(model[r].bytes[static_cast<std::size_t>(cat)]),
                      run.ranks[r].memory.peak_by_category.at(name))
                << what << ", rank " << r << " (" << model[r].role << "), " << name;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_EQ(checked, 13 * (1 + 2 + 3 + 4) * 2 * kNumMemoryCategories);
}

// The roles the model names, and Adam's state at twice SGD's on the ranks that hold it.
TEST(MemoryModel, RolesAndOptimizerStateOfADescribedModel) {
  MemoryInputs in;
  in.num_params = 335e6;
  in.input_floats = 512;
  in.classes = 2;
  in.activation_bytes = [](double rows) { return rows * 1e6; };
  in.config.world_size = 4;
  in.config.global_batch = 32;
  in.config.optimizer.name = "adamw";
  in.config.mode = Mode::ps;
  const auto ps = find_strategy(Mode::ps).memory(in);
  ASSERT_EQ(ps.size(), 4u);
  EXPECT_EQ(ps[0].role, "root");
  EXPECT_EQ(ps[1].role, "worker");
  EXPECT_DOUBLE_EQ(ps[0].bytes[static_cast<std::size_t>(MemoryCategory::optimizer_state)], 2 * 335e6 * 4);
  EXPECT_DOUBLE_EQ(ps[1].bytes[static_cast<std::size_t>(MemoryCategory::optimizer_state)], 0);
  // The root's excess over a worker: master parameters, gradients and the optimizer state
  // (4 x N floats with AdamW), the whole batch's logits and loader; more than 5 GB here.
  EXPECT_GT(ps[0].total() - ps[1].total(), 4 * 335e6 * 4);
  in.config.mode = Mode::sharded_ps;
  const auto sharded = find_strategy(Mode::sharded_ps).memory(in);
  EXPECT_EQ(sharded[3].role, "server");
  EXPECT_NEAR(sharded[3].bytes[static_cast<std::size_t>(MemoryCategory::optimizer_state)], 2 * 335e6 / 4 * 4, 8);
}

// `dpbench memory --workload dlrm --sparse-grad`: each sparse path's largest rank, as the command
// models it from the options alone, equals the largest rank a run of the same options measured.
TEST(MemoryCommand, SparseDlrmEqualsARunsMeasuredPeaks) {
  const DlrmShape shape = [] {
    DlrmShape s = testing::small_dlrm_shape(3, 301);
    s.sparse_grad = true;
    return s;
  }();
  const auto logs = make_click_logs(shape, {1.05}, 1024, 5);
  MemoryOptions o;
  o.base.model.workload = "dlrm";
  o.base.model.dlrm = shape;
  o.base.global_batch = 96;
  o.ranks = {3};
  for (const Mode mode : {Mode::sharded_ps, Mode::allreduce, Mode::ps}) {
    o.modes = {mode};
    TrainConfig c = testing::small_dlrm_config(shape, 3, 96, 2);
    c.optimizer.momentum = o.base.optimizer.momentum;
    c.mode = mode;
    const RunResult run = train_mode(c, *logs);
    std::int64_t most = 0;
    for (const auto& r : run.ranks) {
      std::int64_t total = 0;
      for (const auto& [name, bytes] : r.memory.peak_by_category) total += bytes;
      most = std::max(most, total);
    }
    double modelled = 0;
    const nlohmann::json doc = memory_document(o);
    for (const auto& row : doc["rows"]) modelled = std::max(modelled, row["total_bytes"].get<double>());
    EXPECT_EQ(static_cast<std::int64_t>(modelled), most) << mode;
  }
  EXPECT_EQ(memory_document(o)["model"]["tables"], 3);
}

}  // namespace
}  // namespace dpbench

namespace dpbench {
namespace {

// `dpbench memory` for a described model: without activations, an allreduce replica under Adam
// holds 4 + 4 + 8 bytes per parameter in fp32 and ZeRO's 2 + 2 + 12 in mixed precision (plus
// its 4-byte labels: 4 per sample and loader slot); the ps
// root holds the master copy beside its replica; the capacity search finds the largest
// parameter count whose largest rank fits.
TEST(MemoryCommand, DescribedModelPerParameterBytesAndCapacity) {
  MemoryOptions o;
  o.params = 1e9;
  o.input_bytes_per_sample = 4;
  o.output_bytes_per_sample = 0;
  o.base.optimizer.name = "adam";
  o.base.global_batch = 8;
  o.ranks = {2};
  o.modes = {Mode::allreduce, Mode::ps};
  o.capacity_gb = 80;
  auto doc = memory_document(o);
  ASSERT_EQ(doc["rows"].size(), 3u);  // allreduce replica; ps root, worker
  EXPECT_DOUBLE_EQ(doc["rows"][0]["total_bytes"].get<double>(), 16e9 + 4 * 4);
  EXPECT_EQ(doc["rows"][1]["role"], "root");
  EXPECT_DOUBLE_EQ(doc["rows"][1]["total_bytes"].get<double>(), 24e9 + 8 * 4);  // 2 x (4 + 4) + 8; the batch
  EXPECT_DOUBLE_EQ(doc["rows"][2]["total_bytes"].get<double>(), 8e9);
  EXPECT_NEAR(doc["largest_fitting"][0]["largest_params"].get<double>(), 80e9 / 16, 0.002 * 80e9 / 16);
  EXPECT_NEAR(doc["largest_fitting"][1]["largest_params"].get<double>(), 80e9 / 24, 0.002 * 80e9 / 24);
  o.mixed_precision = true;
  doc = memory_document(o);
  EXPECT_DOUBLE_EQ(doc["rows"][0]["total_bytes"].get<double>(), 16e9 + 4 * 4);  // 2 + 2 + 12
  EXPECT_DOUBLE_EQ(doc["rows"][0]["optimizer_state"].get<double>(), 12e9);
  MemoryOptions builtin;  // a built-in model: dpbench trains it fp32, no mixed projection
  builtin.mixed_precision = true;
  EXPECT_THROW(memory_document(builtin), InputError);
}

// The built-in default (the MLP on Fashion-MNIST-shaped samples) against a real run of the same
// configuration: every rank's total, to the byte.
TEST(MemoryCommand, BuiltInModelEqualsARunsMeasuredPeaks) {
  const auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 512, 5);
  MemoryOptions o;
  o.base.optimizer.name = "adamw";
  o.base.global_batch = 64;
  o.base.model.hidden = {32, 16};
  o.ranks = {3};
  o.base.global_batch = 63;
  for (const std::string mode : {"ps", "allreduce"}) {
    o.modes = {parse_mode(mode)};
    TrainConfig c = testing::small_train_config(mode, 3, 63);
    c.model.hidden = o.base.model.hidden;
    c.optimizer.name = "adamw";
    c.run.max_steps = 2;
    c.run.warmup_steps = 0;
    const RunResult run = train_mode(c, *data);
    std::int64_t most = 0;
    for (const auto& r : run.ranks)
      most = std::max(
          most, r.memory.peak_by_category.at("parameters") + r.memory.peak_by_category.at("gradients") +
                    r.memory.peak_by_category.at("optimizer_state") + r.memory.peak_by_category.at("activations") +
                    r.memory.peak_by_category.at("comm_buffers") + r.memory.peak_by_category.at("data_staging"));
    double modelled = 0;
    const nlohmann::json doc = memory_document(o);
    for (const auto& row : doc["rows"]) modelled = std::max(modelled, row["total_bytes"].get<double>());
    EXPECT_EQ(static_cast<std::int64_t>(modelled), most) << mode;
  }
}

}  // namespace
}  // namespace dpbench
