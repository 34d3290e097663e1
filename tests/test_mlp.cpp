// Tests of the MLP and its CPU kernels: gradients against central finite differences in double
// precision, gradient-ready order (what bucketing relies on), the loss and the SGD update.
#include <cmath>
#include <stdexcept>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/memory.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {
namespace {

struct MlpProblem {
  std::vector<double> params, x;
  std::vector<std::int32_t> labels;
  std::size_t batch = 5;
};

MlpProblem make_problem(const Mlp<double>& model) {
  MlpProblem pr;
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  pr.params.resize(model.num_params());
  model.init_params(pr.params.data(), 7);
  pr.x.resize(pr.batch * model.input_features());
  for (double& v : pr.x) v = normal(rng);
  for (std::size_t i = 0; i < pr.batch; ++i) {
    pr.labels.push_back(static_cast<std::int32_t>(i % model.num_classes()));
  }
  return pr;
}

double mean_loss(Mlp<double>& model, const MlpProblem& pr, const std::vector<double>& params) {
  std::vector<double> logits(pr.batch * model.num_classes());
  model.forward(params.data(), pr.x.data(), pr.batch, logits.data());
  return cpu::softmax_cross_entropy(logits.data(), pr.labels.data(), pr.batch, model.num_classes(),
                                    static_cast<double*>(nullptr), 1.0) /
         static_cast<double>(pr.batch);
}

TEST(MlpGradients, MatchCentralFiniteDifferencesInDouble) {
  MemoryTracker tracker;  // declared first: the model frees its buffers into it
  Mlp<double> model({6, 5, 4, 3});
  model.reserve(5, tracker);
  const MlpProblem pr = make_problem(model);

  std::vector<double> logits(pr.batch * 3), dlogits(pr.batch * 3), grads(model.num_params());
  model.forward(pr.params.data(), pr.x.data(), pr.batch, logits.data());
  cpu::softmax_cross_entropy(logits.data(), pr.labels.data(), pr.batch, 3, dlogits.data(),
                             1.0 / static_cast<double>(pr.batch));
  model.backward(pr.params.data(), pr.x.data(), dlogits.data(), pr.batch, grads.data(), nullptr);

  const double eps = 1e-6;
  double max_err = 0, max_grad = 0;
  std::vector<double> p = pr.params;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + eps;
    const double up = mean_loss(model, pr, p);
    p[i] = keep - eps;
    const double down = mean_loss(model, pr, p);
    p[i] = keep;
    const double numeric = (up - down) / (2 * eps);
    max_err = std::max(max_err, std::abs(numeric - grads[i]));
    max_grad = std::max(max_grad, std::abs(grads[i]));
  }
  EXPECT_GT(max_grad, 1e-3);  // the check is not vacuous
  EXPECT_LT(max_err / max_grad, 1e-6) << "max abs error " << max_err;
}

TEST(MlpGradients, ReadyInReverseParameterOrderOncePerParameter) {
  MemoryTracker tracker;  // declared first: the model frees its buffers into it
  Mlp<double> model({6, 5, 4, 3});
  model.reserve(5, tracker);
  const MlpProblem pr = make_problem(model);
  std::vector<double> logits(15), dlogits(15, 0.1), grads(model.num_params());
  model.forward(pr.params.data(), pr.x.data(), pr.batch, logits.data());
  std::vector<std::size_t> order;
  model.backward(pr.params.data(), pr.x.data(), dlogits.data(), pr.batch, grads.data(),
                 [&](std::size_t i) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<std::size_t>{5, 4, 3, 2, 1, 0}));
}

TEST(MlpLayout, FlatBufferViewsFollowLinearLayout) {
  MemoryTracker tracker;  // declared first: the model frees its buffers into it
  Mlp<float> model({784, 512, 256, 10});
  ASSERT_EQ(model.params().size(), 6u);
  EXPECT_EQ(model.params()[0].name, "fc1.weight");
  EXPECT_EQ(model.params()[0].shape, (std::vector<std::size_t>{512, 784}));
  EXPECT_EQ(model.params()[1].offset, 512u * 784u);
  EXPECT_EQ(model.num_params(), 784u * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10);
  model.reserve(64, tracker);
  // Two hidden activations plus two gradient scratch buffers of the widest hidden layer.
  EXPECT_EQ(tracker.current_bytes(MemoryCategory::activations),
            static_cast<std::int64_t>(sizeof(float) * 64 * (512 + 256 + 2 * 512)));
}

TEST(MlpInit, MatchesLinearDefaultBoundsAndIsSeeded) {
  Mlp<float> model({100, 10});
  std::vector<float> a(model.num_params()), b(model.num_params()), c(model.num_params());
  model.init_params(a.data(), 1);
  model.init_params(b.data(), 1);
  model.init_params(c.data(), 2);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  const float bound = 1.0f / std::sqrt(100.0f);
  float max_abs = 0;
  for (float v : a) max_abs = std::max(max_abs, std::abs(v));
  EXPECT_LE(max_abs, bound);
  EXPECT_GT(max_abs, 0.9f * bound);
}

TEST(SoftmaxCrossEntropy, LossAndGradientOfKnownLogits) {
  const std::vector<float> logits = {0.0f, 0.0f, std::log(2.0f)};  // softmax = 1/4, 1/4, 1/2
  const std::vector<std::int32_t> labels = {2};
  std::vector<float> d(3);
  const double loss = cpu::softmax_cross_entropy(logits.data(), labels.data(), 1, 3, d.data(), 1.0f);
  EXPECT_NEAR(loss, std::log(2.0), 1e-6);
  EXPECT_NEAR(d[0], 0.25f, 1e-6);
  EXPECT_NEAR(d[2], -0.5f, 1e-6);
}

// torch.optim.Adam's update in double, for the tests below: returns p after `steps` steps of the
// same gradient g (L2 weight decay wd; decoupled: AdamW's).
double adam_reference(double p, double g, int steps, double lr, double b1, double b2, double eps, double wd,
                      bool decoupled) {
  double m = 0, v = 0;
  for (int t = 1; t <= steps; ++t) {
    if (decoupled) p *= 1 - lr * wd;
    const double d = decoupled ? g : g + wd * p;
    m = b1 * m + (1 - b1) * d;
    v = b2 * v + (1 - b2) * d * d;
    const double mhat = m / (1 - std::pow(b1, t)), vhat = v / (1 - std::pow(b2, t));
    p -= lr * mhat / (std::sqrt(vhat) + eps);
  }
  return p;
}

TEST(Adam, FirstStepMovesEveryParameterByLrTimesTheGradientsSign) {
  // Bias correction makes step 1's m-hat = g and v-hat = g^2: the update is lr * g / (|g| + eps).
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, g = {0.5f, -3.0f, 1e-3f}, m(3, 0.0f), v(3, 0.0f);
  cpu::adam(p.data(), g.data(), m.data(), v.data(), 3, cpu::adam_scalars(0.01, 0.9, 0.999, 1e-8, 0.0, 1, false));
  EXPECT_NEAR(p[0], 1.0f - 0.01f, 1e-6);
  EXPECT_NEAR(p[1], -2.0f + 0.01f, 1e-6);
  EXPECT_NEAR(p[2], 0.5f - 0.01f, 1e-6);
  EXPECT_FLOAT_EQ(m[1], 0.1f * -3.0f);
  EXPECT_FLOAT_EQ(v[1], 0.001f * 9.0f);
}

TEST(Adam, TenStepsOfAdamAndAdamWMatchTheFormulaInDouble) {
  for (const bool decoupled : {false, true}) {
    std::vector<float> p = {0.8f}, g = {0.3f}, m = {0.0f}, v = {0.0f};
    for (int t = 1; t <= 10; ++t) {
      cpu::adam(p.data(), g.data(), m.data(), v.data(), 1, cpu::adam_scalars(0.05, 0.8, 0.99, 1e-6, 0.1, t, decoupled));
    }
    EXPECT_NEAR(p[0], adam_reference(0.8, 0.3, 10, 0.05, 0.8, 0.99, 1e-6, 0.1, decoupled), 1e-6) << decoupled;
  }
  // The two differ: Adam's decay goes through the running averages, AdamW's does not.
  EXPECT_GT(std::abs(adam_reference(0.8, 0.3, 10, 0.05, 0.8, 0.99, 1e-6, 0.1, false) -
                     adam_reference(0.8, 0.3, 10, 0.05, 0.8, 0.99, 1e-6, 0.1, true)),
            1e-3);
}

TEST(Adam, AdamWWithAZeroGradientOnlyDecaysTheParameters) {
  std::vector<float> p = {2.0f}, g = {0.0f}, m = {0.0f}, v = {0.0f};
  cpu::adam(p.data(), g.data(), m.data(), v.data(), 1, cpu::adam_scalars(0.1, 0.9, 0.999, 1e-8, 0.5, 1, true));
  EXPECT_FLOAT_EQ(p[0], 2.0f * 0.95f);
  EXPECT_THROW(cpu::adam_scalars(0.1, 0.9, 0.999, 1e-8, 0.0, 0, false), std::invalid_argument);
}

TEST(SgdMomentum, TwoStepsMatchPyTorchFormula) {
  std::vector<float> p = {1.0f}, g = {0.5f}, v = {0.0f};
  cpu::sgd_momentum(p.data(), g.data(), v.data(), 1, 0.1f, 0.9f, 0.0f);
  EXPECT_FLOAT_EQ(v[0], 0.5f);  // first step: v = g
  EXPECT_FLOAT_EQ(p[0], 1.0f - 0.05f);
  cpu::sgd_momentum(p.data(), g.data(), v.data(), 1, 0.1f, 0.9f, 0.0f);
  EXPECT_FLOAT_EQ(v[0], 0.9f * 0.5f + 0.5f);
  EXPECT_FLOAT_EQ(p[0], 0.95f - 0.1f * 0.95f);
}

}  // namespace
}  // namespace dpbench
