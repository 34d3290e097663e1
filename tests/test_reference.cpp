// The start bundle `dpbench run --reference pytorch` hands to PyTorch holds exactly what a run
// starts from (parameters, buffers, samples, order), and the loss comparison measures what it says.
#include <cstdint>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/app/reference.hpp"
#include "core/error.hpp"
#include "tests/fixtures.hpp"
#include "train/models.hpp"
#include "workloads/distributed_sampler.hpp"
#include "workloads/synthetic.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

template <typename T>
std::vector<T> read_raw(const fs::path& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const auto bytes = static_cast<std::size_t>(f.tellg());
  std::vector<T> out(bytes / sizeof(T));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(bytes));
  return out;
}

LoadedData small_data(SampleShape shape) {
  return {make_synthetic_dataset(shape, 3, 100, 7), make_synthetic_dataset(shape, 3, 20, 8)};
}

TEST(StartBundle, HoldsTheRunsParametersSamplesAndOrder) {
  TempDir tmp;
  TrainConfig cfg;
  cfg.model.workload = "mlp";
  cfg.model.hidden = {5};
  cfg.global_batch = 16;  // 6 steps per epoch
  cfg.run.epochs = 3;
  cfg.run.max_steps = 8;  // reaches epoch 1 only: two permutations
  cfg.seed = 11;
  const LoadedData data = small_data(SampleShape{1, 1, 4});
  write_start_bundle(tmp.path().string(), cfg, data);

  const auto start = nlohmann::json::parse(slurp(tmp.path() / "start.json"));
  EXPECT_EQ(start["schema"]["name"], "dpbench-start");
  EXPECT_EQ(start["config"]["steps"], 8);
  EXPECT_EQ(start["config"]["steps_per_epoch"], 6);
  EXPECT_TRUE(start["buffers"].is_null());

  const auto model = make_model(cfg, data.train->shape(), 3);
  std::vector<float> expected(model->num_params());
  model->init_params(expected.data(), cfg.seed);
  EXPECT_EQ(read_raw<float>(tmp.path() / "params.f32"), expected);
  ASSERT_EQ(start["params"]["tensors"].size(), 4u);
  EXPECT_EQ(start["params"]["tensors"][2]["name"], "fc2.weight");
  EXPECT_EQ(start["params"]["tensors"][2]["offset"], 5 * 4 + 5);
  EXPECT_EQ(start["params"]["tensors"][2]["shape"], nlohmann::json({3, 5}));

  const auto order = read_raw<std::int64_t>(tmp.path() / "order.i64");
  ASSERT_EQ(order.size(), 200u);
  EXPECT_EQ(std::vector<std::int64_t>(order.begin(), order.begin() + 100), shuffled_indices(100, 11));
  EXPECT_EQ(std::vector<std::int64_t>(order.begin() + 100, order.end()), shuffled_indices(100, 12));

  const auto x = read_raw<float>(tmp.path() / "test_x.f32");
  const auto y = read_raw<std::int64_t>(tmp.path() / "test_y.i64");
  ASSERT_EQ(x.size(), 20u * 4u);
  ASSERT_EQ(y.size(), 20u);
  std::vector<float> sample(4);
  const int label = data.test->load(13, sample.data());
  EXPECT_EQ(y[13], label);
  EXPECT_EQ(std::vector<float>(x.begin() + 13 * 4, x.begin() + 14 * 4), sample);
}

TEST(StartBundle, CarriesGivenInitialParametersAndTheCnnsBuffers) {
  TempDir tmp;
  TrainConfig cfg;
  cfg.model.workload = "cnn";
  cfg.model.channels = {2, 3};
  cfg.model.hidden = {4};
  cfg.global_batch = 10;
  const LoadedData data = small_data(SampleShape{1, 4, 4});
  const auto model = make_model(cfg, data.train->shape(), 3);
  auto given = std::make_shared<std::vector<float>>(model->num_params());
  for (std::size_t i = 0; i < given->size(); ++i) (*given)[i] = 0.001f * static_cast<float>(i);
  cfg.initial_params = given;
  write_start_bundle(tmp.path().string(), cfg, data);

  EXPECT_EQ(read_raw<float>(tmp.path() / "params.f32"), *given);
  const auto start = nlohmann::json::parse(slurp(tmp.path() / "start.json"));
  ASSERT_FALSE(start["buffers"].is_null());
  EXPECT_EQ(start["buffers"]["tensors"][1]["name"], "bn1.running_var");
  EXPECT_EQ(start["buffers"]["tensors"][1]["offset"], 2);
  // running_mean 0, running_var 1, as nn.BatchNorm2d starts.
  EXPECT_EQ(read_raw<float>(tmp.path() / "buffers.f32"), std::vector<float>({0, 0, 1, 1, 0, 0, 0, 1, 1, 1}));

  cfg.initial_params = std::make_shared<std::vector<float>>(3);
  EXPECT_THROW(write_start_bundle(tmp.path().string(), cfg, data), InputError);
}

// The band the reference is judged against: twice the largest drift between dpbench's own modes,
// never below the fixed floor; one mode measures no drift and leaves the floor.
TEST(LossAgreement, BandIsTwiceTheOwnModesDriftAndAtLeastTheFloor) {
  const auto one = agreement_band({{2.0, 1.0, 0.5}});
  EXPECT_TRUE(one["own_drift"].is_null());
  EXPECT_DOUBLE_EQ(one["band"].get<double>(), kReferenceLossTolerance);
  const auto three = agreement_band({{2.0, 1.0, 0.5}, {2.0, 1.001, 0.5}, {2.0, 1.0, 0.5005}});
  EXPECT_NEAR(three["own_drift"].get<double>(), 1e-3, 1e-12);  // the worst pair, the worst step
  EXPECT_NEAR(three["band"].get<double>(), 2e-3, 1e-12);
  const auto quiet = agreement_band({{2.0, 1.0}, {2.0, 1.0 + 1e-7}});
  EXPECT_DOUBLE_EQ(quiet["band"].get<double>(), kReferenceLossTolerance);
}

TEST(LossAgreement, IsTheLargestRelativeDifferenceAndWhereItIs) {
  const auto same = loss_agreement({2.0, 1.0, 0.5}, {2.0, 1.0, 0.5});
  EXPECT_EQ(same["max_rel_diff"], 0.0);
  EXPECT_TRUE(same["within"].get<bool>());
  const auto off = loss_agreement({2.0, 1.001, 0.5, 9.0}, {2.0, 1.0, 0.5002});
  EXPECT_EQ(off["steps"], 3);  // the shorter list
  EXPECT_NEAR(off["max_rel_diff"].get<double>(), 1e-3, 1e-12);
  EXPECT_EQ(off["at_step"], 1);
  EXPECT_FALSE(off["within"].get<bool>());
  EXPECT_THROW(loss_agreement({}, {1.0}), Error);
  EXPECT_THROW(loss_agreement({1.0, std::nan("")}, {1.0, 1.0}), Error);
}

}  // namespace
}  // namespace dpbench
