// Tests of described models: the description reader's checks, the built-in descriptions against
// their published sizes and dpbench's own MLP, the replay's buffer layout, gradient-ready order,
// waits and gradients, DDP's buckets in the ready order, and every mode agreeing on a replay.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cluster/link.hpp"
#include "core/error.hpp"
#include "train/buckets.hpp"
#include "train/models.hpp"
#include "tests/training_fixtures.hpp"
#include "workloads/cnn.hpp"
#include "workloads/mlp.hpp"
#include "workloads/model_description.hpp"
#include "workloads/replay_model.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using nlohmann::json;

// Three layers: fc1 (params 0, 1), relu (none), fc2 (params 2, 3); backward reaches fc2, relu,
// fc1, and fc2's bias becomes ready before its weight.
json small_description() {
  return {{"schema", {{"name", "dpbench-model"}, {"version", 1}}},
          {"name", "small"},
          {"source", {{"how", "by hand"}, {"module", "tests"}}},
          {"device", {{"kind", "cpu"}, {"name", "test"}, {"threads", 1}, {"batch", 4}}},
          {"input", {{"shape", {8}}, {"dtype", "float32"}, {"bytes_per_sample", 32}}},
          {"label_bytes_per_sample", 8},
          {"output", {{"shape", {3}}, {"bytes_per_sample", 12}}},
          {"activation_bytes_per_sample", 64},
          {"params",
           {{{"name", "fc1.weight"}, {"shape", {5, 8}}},
            {{"name", "fc1.bias"}, {"shape", {5}}},
            {{"name", "fc2.weight"}, {"shape", {3, 5}}},
            {{"name", "fc2.bias"}, {"shape", {3}}}}},
          {"layers",
           {{{"name", "fc1"},
             {"type", "Linear"},
             {"forward_us_per_sample", 100},
             {"backward_us_per_sample", 3000},
             {"forward_flops_per_sample", 80},
             {"backward_flops_per_sample", 160}},
            {{"name", "relu"},
             {"type", "ReLU"},
             {"forward_us_per_sample", 10},
             {"backward_us_per_sample", 1000},
             {"forward_flops_per_sample", 0},
             {"backward_flops_per_sample", 0}},
            {{"name", "fc2"},
             {"type", "Linear"},
             {"forward_us_per_sample", 50},
             {"backward_us_per_sample", 2000},
             {"forward_flops_per_sample", 30},
             {"backward_flops_per_sample", 60}}}},
          {"backward",
           {{{"layer", 2}, {"grads_ready", {3, 2}}},
            {{"layer", 1}, {"grads_ready", json::array()}},
            {{"layer", 0}, {"grads_ready", {1, 0}}}}}};
}

// The InputError message parse_model_description throws on `j`, or "" when it throws none.
std::string parse_error(const json& j) {
  try {
    parse_model_description(j, "test.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ModelDescription, BuiltinsHaveThePublishedParameterCounts) {
  const std::vector<std::pair<std::string, std::size_t>> published = {
      {"resnet50", 25557032}, {"vit_b_16", 86567656}, {"gpt2", 124439808}, {"bert-large", 335141888}};
  for (const auto& [name, count] : published) {
    const ModelDescription d = load_model_description(name);
    EXPECT_EQ(d.num_params(), count) << name;
    EXPECT_GT(d.forward_us(), 0) << name;
    EXPECT_GT(d.forward_flops(), 0) << name;
  }
  // Embedding tables are flagged: BERT's three, GPT-2's two.
  for (const auto& [name, tables] : std::vector<std::pair<std::string, int>>{{"bert-large", 3}, {"gpt2", 2}}) {
    const ModelDescription d = load_model_description(name);
    int flagged = 0;
    for (const auto& p : d.params) flagged += p.embedding ? 1 : 0;
    EXPECT_EQ(flagged, tables) << name;
  }
}

TEST(ModelDescription, BuiltinMlpAndCnnDescribeDpbenchsOwnTensors) {
  const ModelDescription d = load_model_description("mlp");
  const Mlp<float> mlp({784, 512, 256, 10});
  ASSERT_EQ(d.params.size(), mlp.params().size());
  for (std::size_t i = 0; i < d.params.size(); ++i) {
    EXPECT_EQ(d.params[i].name, mlp.params()[i].name);
    EXPECT_EQ(d.params[i].shape, mlp.params()[i].shape);
  }
  // backward readies the MLP's gradients in reverse parameter order, as Mlp::backward does
  std::vector<std::size_t> reverse(d.params.size());
  std::iota(reverse.rbegin(), reverse.rend(), std::size_t{0});
  EXPECT_EQ(d.grad_ready_order(), reverse);
  const auto cnn = make_cnn({16, 32}, {128}, SampleShape{1, 28, 28}, 10);
  EXPECT_EQ(load_model_description("cnn").num_params(), cnn->num_params());
}

TEST(ModelDescription, BadInputIsOneLineNamingTheField) {
  EXPECT_EQ(parse_error(small_description()), "");
  json j = small_description();
  j.erase("layers");
  EXPECT_EQ(parse_error(j), "test.json: missing field \"layers\"");
  j = small_description();
  j["layers"][1]["backward_us_per_sample"] = -1;
  EXPECT_EQ(parse_error(j), "test.json.layers[1].backward_us_per_sample: -1 is not a finite number >= 0");
  j = small_description();
  j["params"][0]["shape"] = {std::size_t{1} << 40, std::size_t{1} << 40};
  EXPECT_EQ(parse_error(j), "test.json.params[0].shape: the shape's size overflows (more than 2^62 elements)");
  j = small_description();
  j["params"][0]["shape"] = {5, 0};
  EXPECT_EQ(parse_error(j), "test.json.params[0].shape[1]: a dimension must be a positive integer");
  j = small_description();
  j["params"] = json::array();
  EXPECT_EQ(parse_error(j), "test.json.params: a model needs at least one parameter tensor");
  j = small_description();
  j["backward"][2]["grads_ready"] = {1};
  EXPECT_EQ(parse_error(j), "test.json.backward: parameter 0 (fc1.weight) never becomes ready");
  j = small_description();
  j["backward"][2]["grads_ready"] = {1, 0, 3};
  EXPECT_EQ(parse_error(j), "test.json.backward[2].grads_ready: parameter 3 is finalised twice");
  j = small_description();
  j["schema"]["version"] = 2;
  EXPECT_NE(parse_error(j).find("not a dpbench-model version 1 description"), std::string::npos);
  try {
    load_model_description("resnet-50");
    ADD_FAILURE() << "an unknown name was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("bert-large, cnn, gpt2, mlp, resnet50, vit_b_16"), std::string::npos)
        << e.what();
  }
}

TEST(ReplayModel, BuffersAreLaidOutInReverseReadyOrderSoBucketsAreContiguous) {
  const auto d = described_model("resnet50");
  const ReplayModel model(d, 1.0);
  const std::vector<std::size_t> order = model.grad_ready_order();
  ASSERT_EQ(order.size(), 161u);
  // resnet50 readies fc.bias before fc.weight: not reverse registration order
  EXPECT_EQ(d->params[order[0]].name, "fc.bias");
  EXPECT_EQ(d->params[order[1]].name, "fc.weight");
  std::size_t end = model.num_params();
  for (std::size_t p : order) {  // each next-ready tensor sits just below the previous one
    EXPECT_EQ(model.params()[p].offset + model.params()[p].size, end) << d->params[p].name;
    end = model.params()[p].offset;
  }
  EXPECT_EQ(end, 0u);
  const auto buckets = assign_buckets(model.params(), sizeof(float), 1.0, 25.0, order);
  ASSERT_GE(buckets.size(), 4u);  // 97.5 MiB: 1 MiB, then 25 MiB at a time (the PyTorch test pins them)
  std::size_t covered = 0, at = 0;
  for (const Bucket& b : buckets) {
    covered += b.size;
    for (std::size_t p : b.params) EXPECT_EQ(p, order[at++]);  // buckets take the ready order
  }
  EXPECT_EQ(covered, model.num_params());
}

TEST(Buckets, FollowTheReadyOrderAndRefuseARangeThatIsNotContiguous) {
  // Four tensors of 4 floats readied 2, 0, 1, 3 and laid out in reverse of it: 3, 1, 0, 2.
  const std::vector<ParamView> params = {{"a", {4}, 8, 4}, {"b", {4}, 4, 4}, {"c", {4}, 12, 4}, {"d", {4}, 0, 4}};
  const double first = 16.0 / (1024 * 1024), cap = 32.0 / (1024 * 1024);  // one tensor, then two
  const auto buckets = assign_buckets(params, sizeof(float), first, cap, {2, 0, 1, 3});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].params, (std::vector<std::size_t>{2}));
  EXPECT_EQ(buckets[1].params, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(buckets[1].offset, 4u);
  EXPECT_EQ(buckets[1].size, 8u);
  EXPECT_EQ(buckets[2].params, (std::vector<std::size_t>{3}));
  // Reverse registration order puts tensors 2 and 1 (offsets 12 and 4) in one bucket: refused.
  EXPECT_THROW(assign_buckets(params, sizeof(float), first, cap), Error);
  EXPECT_THROW(assign_buckets(params, sizeof(float), first, cap, {2, 0, 1}), Error);  // not a permutation
}

TEST(ReplayModel, BackwardReadiesInTheDescribedOrderAfterItsTimeWithALinearGradient) {
  auto d = std::make_shared<const ModelDescription>(parse_model_description(small_description(), "small"));
  MemoryTracker tracker;      // outlives the model, whose activations it tracks
  ReplayModel model(d, 2.0);  // every time doubled
  model.reserve(4, tracker);
  EXPECT_EQ(tracker.peak_bytes(MemoryCategory::activations), 4 * 64);
  std::vector<float> params(model.num_params()), grads(model.num_params()), grads2(model.num_params());
  std::vector<float> logits(4 * 3, 7.0f), dlogits(4 * 3, 0.0f);
  model.init_params(params.data(), 1);
  const auto t0 = std::chrono::steady_clock::now();
  model.forward(params.data(), nullptr, 4, logits.data());
  const double forward_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(forward_s, 2.0 * 4 * 160e-6);
  EXPECT_EQ(logits, std::vector<float>(12, 0.0f));
  for (std::size_t b = 0; b < 4; ++b) dlogits[b * 3] = 0.25f;
  std::vector<std::pair<std::size_t, double>> ready;
  const auto t1 = std::chrono::steady_clock::now();
  model.backward(params.data(), nullptr, dlogits.data(), 4, grads.data(), [&](std::size_t p) {
    ready.emplace_back(p, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  });
  ASSERT_EQ(ready.size(), 4u);
  EXPECT_EQ(ready[0].first, 3u);
  EXPECT_EQ(ready[1].first, 2u);
  EXPECT_EQ(ready[2].first, 1u);
  EXPECT_EQ(ready[3].first, 0u);
  EXPECT_GE(ready[0].second, 2.0 * 4 * 2000e-6);                        // after fc2's backward
  EXPECT_GE(ready[2].second, 2.0 * 4 * (2000e-6 + 1000e-6 + 3000e-6));  // after relu's and fc1's
  // Twice the output gradient gives twice the gradient (what lets ps and allreduce agree).
  for (float& v : dlogits) v *= 2;
  model.backward(params.data(), nullptr, dlogits.data(), 4, grads2.data(), {});
  double norm = 0;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    EXPECT_FLOAT_EQ(grads2[i], 2 * grads[i]);
    norm += grads[i] * grads[i];
  }
  EXPECT_GT(norm, 0);
  // fc2's gradients are ready after 2000 of 6000 us of backward, fc1's at the end
  const std::vector<double> at = model.grad_ready_times();
  EXPECT_DOUBLE_EQ(at[3], 2000.0 / 6000.0);
  EXPECT_DOUBLE_EQ(at[0], 1.0);
}

TEST(ReplayModel, EveryModeAgreesOnAReplay) {
  auto data = make_synthetic_dataset(SampleShape{1, 28, 28}, 10, 512, 5);
  std::vector<std::vector<float>> finals;
  for (const char* mode : {"allreduce", "ps", "sharded_ps"}) {
    TrainConfig c = testing::small_train_config(mode, 2, 32);
    c.model.described = "mlp";
    c.model.replay_time_scale = 0.01;
    c.run.max_steps = 6;
    const RunResult r = testing::train_mode(c, *data);
    ASSERT_EQ(r.num_params, 535818u) << mode;
    finals.push_back(r.final_params);
  }
  std::vector<float> initial(535818);
  ReplayModel(described_model("mlp"), 1.0).init_params(initial.data(), 11);
  EXPECT_GT(testing::relative_l2(finals[0], initial), 1e-4);  // the replay's gradients moved them
  EXPECT_LT(testing::relative_l2(finals[1], finals[0]), 1e-5);
  EXPECT_LT(testing::relative_l2(finals[2], finals[0]), 1e-5);
}

TEST(TimeDilation, LinksAreShapedAtTheirRateOverTheFactor) {
  cluster::ClusterSpec spec;
  spec.nodes = 4;
  spec.link = cluster::parse_rate("100gbit", "--link");
  spec.link_of[3] = cluster::parse_rate("25gbit", "--link-of");
  cluster::dilate(spec, 100);
  EXPECT_DOUBLE_EQ(spec.link.bits_per_s, 1e9);
  EXPECT_EQ(spec.link.text, "100gbit/100");
  EXPECT_DOUBLE_EQ(spec.rate_of(3).bits_per_s, 250e6);
  const std::vector<std::string> tc = cluster::tbf_args("veth0", spec.link);
  EXPECT_NE(std::find(tc.begin(), tc.end(), "1000000000bit"), tc.end());
  cluster::ClusterSpec slow;
  slow.link = cluster::parse_rate("50kbit", "--link");
  EXPECT_THROW(cluster::dilate(slow, 100), InputError);  // 500 bit/s: below tc's 1 kbit/s
}

}  // namespace
}  // namespace dpbench
