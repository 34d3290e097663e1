// The start bundle `dpbench run --reference pytorch` hands to PyTorch holds exactly what a run
// starts from (parameters, buffers, samples, order), and the loss comparison measures what it says.
#include <cmath>
#include <cstdint>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "bench/reference/reference.hpp"
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
  return {make_synthetic_dataset(shape, 3, 100, 7), make_synthetic_dataset(shape, 3, 20, 8), {}};
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

// The band the reference is judged against: 3 x the largest drift between dpbench's own modes up
// to each step, never below the fixed floor; one mode measures no drift and leaves the floor.
TEST(LossAgreement, BandIsThreeTimesTheOwnModesDriftAndAtLeastTheFloor) {
  const auto one = agreement_band({{2.0, 1.0, 0.5}});
  EXPECT_TRUE(one["own_drift"].is_null());
  EXPECT_TRUE(one["sensitivity_drift"].is_null());
  EXPECT_DOUBLE_EQ(one["band"].get<double>(), kReferenceLossTolerance);
  const auto three = agreement_band({{2.0, 1.0, 0.5}, {2.0, 1.001, 0.5}, {2.0, 1.0, 0.5005}});
  EXPECT_NEAR(three["own_drift"].get<double>(), 1e-3, 1e-12);  // the worst pair, the worst step
  EXPECT_NEAR(three["band"].get<double>(), 3e-3, 1e-12);
  const auto per_step = three["per_step"].get<std::vector<double>>();
  ASSERT_EQ(per_step.size(), 3u);
  EXPECT_DOUBLE_EQ(per_step[0], kReferenceLossTolerance);  // no drift yet
  EXPECT_NEAR(per_step[1], 3e-3, 1e-12);
  EXPECT_NEAR(per_step[2], 3e-3, 1e-12);  // the running maximum, not step 2's own 1e-3
  const auto quiet = agreement_band({{2.0, 1.0}, {2.0, 1.0 + 1e-7}});
  EXPECT_DOUBLE_EQ(quiet["band"].get<double>(), kReferenceLossTolerance);
}

// The perturbed runs widen the band from the step where the trajectory amplifies, the largest of
// them at each step; a reference is judged step by step, so a difference early, where the band
// is still narrow, fails even when it is smaller than the last step's band.
TEST(LossAgreement, PerturbedRunsWidenTheBandFromWhereTheTrajectoryAmplifies) {
  const std::vector<double> base = {2.0, 1.0, 1.0, 1.0, 1.0};
  const auto band = agreement_band({base}, base, {{2.0, 1.0, 1.0, 1.01, 1.0}, {2.0, 1.0, 1.0, 1.0, 1.1}});
  EXPECT_NEAR(band["sensitivity_drift"].get<double>(), 0.1, 1e-12);
  const auto per_step = band["per_step"].get<std::vector<double>>();
  ASSERT_EQ(per_step.size(), 5u);
  EXPECT_DOUBLE_EQ(per_step[2], kReferenceLossTolerance);
  EXPECT_NEAR(per_step[3], 0.03, 1e-12);
  EXPECT_NEAR(per_step[4], 0.3, 1e-12);
  nlohmann::json late = loss_agreement(base, {2.0, 1.0, 1.0, 1.02, 1.2});
  judge_agreement(late, base, {2.0, 1.0, 1.0, 1.02, 1.2}, band, 0.0);
  EXPECT_TRUE(late["within"].get<bool>()) << late.dump();
  nlohmann::json early = loss_agreement(base, {2.0, 1.001, 1.0, 1.0, 1.0});
  judge_agreement(early, base, {2.0, 1.001, 1.0, 1.0, 1.0}, band, 0.0);
  EXPECT_FALSE(early["within"].get<bool>());
  EXPECT_EQ(early["first_step_outside"], 1);
  EXPECT_TRUE(late["first_step_outside"].is_null());
  EXPECT_EQ(early["worst_step"], 1);
  EXPECT_NEAR(early["worst_step_rel_diff"].get<double>(), 1e-3 / 1.001, 1e-12);
  EXPECT_DOUBLE_EQ(early["tolerance"].get<double>(), kReferenceLossTolerance);
  // A compression hook's floor widens every step.
  judge_agreement(early, base, {2.0, 1.001, 1.0, 1.0, 1.0}, band, 1e-2);
  EXPECT_TRUE(early["within"].get<bool>());
}

// Every parameter moves by exactly one unit in the last place, each coin its own way.
TEST(LossAgreement, PerturbedStartIsOneUlpAwayEverywhere) {
  TrainConfig cfg;
  cfg.model.workload = "mlp";
  cfg.model.hidden = {64};
  cfg.seed = 11;
  const LoadedData data = small_data(SampleShape{1, 1, 4});
  const auto a = perturbed_initial_params(cfg, *data.train, 0), b = perturbed_initial_params(cfg, *data.train, 1);
  const auto model = make_model(cfg, data.train->shape(), static_cast<std::size_t>(data.train->num_classes()));
  const std::vector<float> start = initial_parameters(*model, cfg);
  ASSERT_EQ(a->size(), start.size());
  std::size_t up = 0, differ = 0;
  for (std::size_t i = 0; i < start.size(); ++i) {
    const float v = start[i];
    EXPECT_TRUE((*a)[i] == std::nextafter(v, 1e30f) || (*a)[i] == std::nextafter(v, -1e30f)) << i;
    up += (*a)[i] > v ? 1 : 0;
    differ += (*a)[i] != (*b)[i] ? 1 : 0;
  }
  EXPECT_GT(up, start.size() / 3);
  EXPECT_LT(up, 2 * start.size() / 3);
  EXPECT_GT(differ, start.size() / 3);
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
