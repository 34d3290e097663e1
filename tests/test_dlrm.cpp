// Tests of the DLRM workload: its kernels against hand-computed values, the whole model's gradient
// against central finite differences in double precision (the embedding tables included), its
// parameter names and gradient-ready order, the bounded Zipf sampler's frequencies against the
// power law, and the click logs (deterministic, indices in range, both labels, learnable).
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.hpp"
#include "allreduce/ddp_trainer.hpp"
#include "analysis/run_simulation.hpp"
#include "ps/data_parallel.hpp"
#include "core/memory.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "train/memory_model.hpp"
#include "train/sparse_grad.hpp"
#include "registry/strategies.hpp"
#include "workloads/click_logs.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/criteo.hpp"
#include "workloads/dlrm.hpp"
#include "tests/fixtures.hpp"
#include "tests/training_fixtures.hpp"

namespace dpbench {
namespace {

TEST(DlrmKernels, EmbeddingBagSumsTheLookedUpRowsAndScattersTheGradientBack) {
  // Two tables of 3 rows x 2; one sample: 1 dense value, table 0 rows {2, 0}, table 1 rows {1, 1}.
  const cpu::BagShape s{1, 2, 3, 2, 2};
  const std::vector<double> tables = {1, 2, 3, 4, 5, 6, /* table 1 */ 10, 20, 30, 40, 50, 60};
  const std::vector<double> x = {0.5, 2, 0, 1, 1};
  std::vector<double> out(4);
  cpu::embedding_bag_sum_forward(tables.data(), x.data(), out.data(), 1, s);
  EXPECT_EQ(out, (std::vector<double>{5 + 1, 6 + 2, 2 * 30, 2 * 40}));
  std::vector<double> d(12, 7.0);  // overwritten, not accumulated
  cpu::embedding_bag_sum_backward(x.data(), std::vector<double>{1, 2, 3, 4}.data(), d.data(), 1, s);
  EXPECT_EQ(d, (std::vector<double>{1, 2, 0, 0, 1, 2, /* table 1 */ 0, 0, 6, 8, 0, 0}));
  const std::vector<double> bad = {0.5, 3, 0, 1, 1};  // row 3 of a 3-row table
  EXPECT_THROW(cpu::embedding_bag_sum_forward(tables.data(), bad.data(), out.data(), 1, s), Error);
}

TEST(DlrmKernels, DotInteractionIsTheDenseOutputThenTheLowerTriangle) {
  // K = 2 tables, dim 2: features f0 = z, f1, f2; pairs (1,0), (2,0), (2,1).
  const std::vector<double> z = {1, 2}, bags = {3, 4, 5, 6};
  std::vector<double> r(2 + 3);
  cpu::dot_interaction_forward(z.data(), bags.data(), r.data(), 1, 2, 2);
  EXPECT_EQ(r, (std::vector<double>{1, 2, 3 + 8, 5 + 12, 15 + 24}));
  const std::vector<double> dr = {1, 1, 1, 0, 2};  // d/dz = [1,1] + f1; d/df1 = z + 2 f2; d/df2 = 2 f1
  std::vector<double> dz(2), dbags(4);
  cpu::dot_interaction_backward(z.data(), bags.data(), dr.data(), dz.data(), dbags.data(), 1, 2, 2);
  EXPECT_EQ(dz, (std::vector<double>{1 + 3, 1 + 4}));
  EXPECT_EQ(dbags, (std::vector<double>{1 + 10, 2 + 12, 6, 8}));
}

DlrmShape small_shape() {
  DlrmShape s;
  s.dense_features = 3;
  s.tables = 3;
  s.rows = 5;
  s.dim = 3;
  s.lookups = 2;
  s.bottom = {4};
  s.top = {5};
  return s;
}

// A batch of 4 samples: dense values from a normal law, indices covering rows with repeats.
std::vector<double> small_batch(const DlrmShape& s, std::size_t batch) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> x(batch * s.input_features());
  for (std::size_t b = 0; b < batch; ++b) {
    double* row = x.data() + b * s.input_features();
    for (std::size_t j = 0; j < s.dense_features; ++j) row[j] = normal(rng);
    for (std::size_t i = 0; i < s.tables * s.lookups; ++i)
      row[s.dense_features + i] = static_cast<double>((b + 2 * i) % s.rows);
  }
  return x;
}

double loss_of(Dlrm<double>& model, const std::vector<double>& params, const std::vector<double>& x,
               const std::vector<std::int32_t>& labels) {
  std::vector<double> logits(labels.size() * 2);
  model.forward(params.data(), x.data(), labels.size(), logits.data());
  return cpu::softmax_cross_entropy(logits.data(), labels.data(), labels.size(), 2, static_cast<double*>(nullptr), 1.0);
}

TEST(Dlrm, GradientMatchesCentralFiniteDifferencesTablesIncluded) {
  MemoryTracker tracker;  // declared first: the model frees its buffers into it
  const DlrmShape shape = small_shape();
  Dlrm<double> model(shape);
  const std::size_t batch = 4;
  model.reserve(batch, tracker);
  std::vector<double> params(model.num_params());
  model.init_params(params.data(), 11);
  for (std::size_t i = 0; i < shape.embedding_params(); ++i) params[i] *= 4;  // tables away from ~0
  const std::vector<double> x = small_batch(shape, batch);
  const std::vector<std::int32_t> labels = {0, 1, 1, 0};
  std::vector<double> logits(batch * 2), dlogits(batch * 2), grads(model.num_params(), -1.0);
  model.forward(params.data(), x.data(), batch, logits.data());
  cpu::softmax_cross_entropy(logits.data(), labels.data(), batch, 2, dlogits.data(), 1.0);
  model.backward(params.data(), x.data(), dlogits.data(), batch, grads.data(), nullptr);
  double max_err = 0, max_grad = 0;
  std::vector<double> p = params;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double keep = p[i];
    p[i] = keep + 1e-6;
    const double up = loss_of(model, p, x, labels);
    p[i] = keep - 1e-6;
    const double down = loss_of(model, p, x, labels);
    p[i] = keep;
    max_err = std::max(max_err, std::abs((up - down) / 2e-6 - grads[i]));
    max_grad = std::max(max_grad, std::abs(grads[i]));
  }
  EXPECT_LT(max_err, 1e-6 * std::max(1.0, max_grad)) << "largest gradient " << max_grad;
  EXPECT_GT(max_grad, 1e-3);
  // A row no sample looks up has a zero gradient; every table has some looked-up row.
  std::size_t touched = 0;
  for (std::size_t i = 0; i < shape.embedding_params(); ++i) touched += grads[i] != 0.0;
  EXPECT_GT(touched, 0u);
}

TEST(Dlrm, ParametersInDlrmOrderAndGradientsReadyInReverse) {
  MemoryTracker tracker;
  Dlrm<double> model(small_shape());
  model.reserve(2, tracker);
  std::vector<std::string> names;
  for (const ParamView& v : model.params()) names.push_back(v.name);
  EXPECT_EQ(names, (std::vector<std::string>{"emb_l.0.weight", "emb_l.1.weight", "emb_l.2.weight", "bot_l.0.weight",
                                             "bot_l.0.bias", "bot_l.2.weight", "bot_l.2.bias", "top_l.0.weight",
                                             "top_l.0.bias", "top_l.2.weight", "top_l.2.bias"}));
  EXPECT_EQ(model.params()[7].shape, (std::vector<std::size_t>{5, 3 + 6}));  // top's input: dim + K(K+1)/2
  EXPECT_EQ(model.params().back().shape, (std::vector<std::size_t>{2}));
  std::vector<double> params(model.num_params()), logits(4), dlogits = {0.1, -0.1, 0.2, -0.2}, grads(params.size());
  model.init_params(params.data(), 1);
  const std::vector<double> x = small_batch(small_shape(), 2);
  model.forward(params.data(), x.data(), 2, logits.data());
  std::vector<std::size_t> ready;
  model.backward(params.data(), x.data(), dlogits.data(), 2, grads.data(), [&](std::size_t i) { ready.push_back(i); });
  std::vector<std::size_t> reverse(names.size());
  for (std::size_t i = 0; i < reverse.size(); ++i) reverse[i] = reverse.size() - 1 - i;
  EXPECT_EQ(ready, reverse);
}

TEST(Dlrm, RefusesEmptySizesNamingTheOption) {
  const auto refused = [](DlrmShape s, const std::string& needle) {
    try {
      check_dlrm_shape(s);
      ADD_FAILURE() << needle << " accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DlrmShape s = small_shape();
  s.rows = 0;
  refused(s, "--rows 0");
  s = small_shape();
  s.dim = 0;
  refused(s, "--embedding-dim 0");
  s = small_shape();
  s.lookups = 0;
  refused(s, "--lookups 0");
  s = small_shape();
  s.rows = kDlrmMaxRows + 1;
  refused(s, "--rows 16777217");
}

// The law's probabilities on {1..n}: k^-alpha / H(n, alpha).
std::vector<double> zipf_law(std::size_t n, double alpha) {
  std::vector<double> p(n + 1, 0.0);
  double h = 0;
  for (std::size_t k = 1; k <= n; ++k) h += std::pow(static_cast<double>(k), -alpha);
  for (std::size_t k = 1; k <= n; ++k) p[k] = std::pow(static_cast<double>(k), -alpha) / h;
  return p;
}

TEST(ZipfSampler, FrequenciesFollowThePowerLaw) {
  for (double alpha : {0.5, 1.0, 1.05, 2.0}) {
    const std::size_t n = 1000, draws = 400000;
    const ZipfSampler zipf(n, alpha);
    std::mt19937_64 rng(static_cast<std::uint64_t>(alpha * 100));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    std::vector<double> count(n + 1, 0.0);
    for (std::size_t i = 0; i < draws; ++i) {
      const std::uint64_t k = zipf([&] { return u(rng); });
      ASSERT_GE(k, 1u);
      ASSERT_LE(k, n);
      count[k] += 1;
    }
    const std::vector<double> p = zipf_law(n, alpha);
    for (std::size_t k : {1, 2, 3, 10}) {
      const double expected = p[k] * draws, sd = std::sqrt(expected);
      EXPECT_NEAR(count[k], expected, 5 * sd) << "alpha " << alpha << " k " << k;
    }
    double tail = 0, tail_p = 0;  // the ranks above 100 together
    for (std::size_t k = 101; k <= n; ++k) tail += count[k], tail_p += p[k];
    EXPECT_NEAR(tail, tail_p * draws, 5 * std::sqrt(tail_p * draws)) << "alpha " << alpha;
  }
  EXPECT_THROW(ZipfSampler(10, 0.0), InputError);
  EXPECT_THROW(ZipfSampler(10, -1.0), InputError);
}

TEST(ClickLogs, SamplesAreDeterministicInRangeAndBothLabelsOccur) {
  DlrmShape s = small_shape();
  s.rows = 1000;
  s.lookups = 10;
  const auto logs = make_click_logs(s, {1.05}, 4000, 9);
  ASSERT_EQ(logs->shape().features(), s.input_features());
  std::vector<float> a(s.input_features()), b(s.input_features());
  std::map<float, int> table0;
  int ones = 0;
  for (std::int64_t i = 0; i < logs->size(); ++i) {
    const int label = logs->load(i, a.data());
    ones += label;
    for (std::size_t j = 0; j < s.tables * s.lookups; ++j) {
      const float r = a[s.dense_features + j];
      ASSERT_TRUE(r >= 0 && r < 1000 && std::floor(r) == r) << r;
    }
    for (std::size_t l = 0; l < s.lookups; ++l) ++table0[a[s.dense_features + l]];
  }
  EXPECT_GT(ones, 0.3 * 4000);
  EXPECT_LT(ones, 0.7 * 4000);
  EXPECT_EQ(logs->load(17, a.data()), logs->load(17, b.data()));
  EXPECT_EQ(a, b);
  // Zipf(1.05) over 1000 rows: the hottest row takes P(1) = 1 / H(1000, 1.05) of the lookups.
  int hottest = 0;
  for (const auto& [row, n] : table0) hottest = std::max(hottest, n);
  const double expected = zipf_law(1000, 1.05)[1] * 4000 * 10;
  EXPECT_NEAR(hottest, expected, 5 * std::sqrt(expected));
  EXPECT_THROW(make_click_logs(s, {-1.0}, 10, 1), InputError);
}

// sharded_ps --sparse-grad on three thread ranks (rows 100 per server), allreduce --sparse-grad
// (the all-gather of every rank's rows) and ps --sparse-grad (the root's gather and scatter of the
// rows), against dense allreduce, all SGD without momentum: the same step losses and the same final
// model, the tables gathered from their servers onto rank 0. In-process, so the sanitizer stages
// run its threads.
TEST(DlrmSparse, ThreadRanksOfEverySparsePathTrainAsDenseAllreduce) {
  DlrmShape shape = testing::small_dlrm_shape(3, 300);
  const auto logs = make_click_logs(shape, {1.05}, 2048, 5);
  TrainConfig c = testing::small_dlrm_config(shape, 3, 96, 12);
  const TrainData data{logs.get(), nullptr};
  c.mode = Mode::allreduce;
  const RunResult dense = train_allreduce(c, data);
  c.mode = Mode::sharded_ps;
  c.model.dlrm.sparse_grad = true;
  const RunResult sparse = train_sharded_ps(c, data);
  c.mode = Mode::allreduce;
  const RunResult gathered = train_allreduce(c, data);  // the sparse all-reduce
  c.mode = Mode::ps;
  const RunResult rooted = train_data_parallel(c, data);  // the root's gather and scatter
  ASSERT_EQ(gathered.step_train_loss.size(), 12u);
  ASSERT_EQ(rooted.step_train_loss.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(gathered.step_train_loss[i], dense.step_train_loss[i], 1e-5 * dense.step_train_loss[i]) << i;
    EXPECT_NEAR(rooted.step_train_loss[i], dense.step_train_loss[i], 1e-5 * dense.step_train_loss[i]) << i;
  }
  ASSERT_EQ(rooted.final_params.size(), dense.final_params.size());
  ASSERT_EQ(sparse.step_train_loss.size(), 12u);
  ASSERT_EQ(dense.step_train_loss.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(sparse.step_train_loss[i], dense.step_train_loss[i], 1e-5 * dense.step_train_loss[i]) << i;
  }
  ASSERT_EQ(sparse.final_params.size(), dense.final_params.size());
  double diff = 0, rooted_diff = 0, norm = 0;
  for (std::size_t i = 0; i < dense.final_params.size(); ++i) {
    diff += std::pow(static_cast<double>(sparse.final_params[i]) - dense.final_params[i], 2);
    rooted_diff += std::pow(static_cast<double>(rooted.final_params[i]) - dense.final_params[i], 2);
    norm += std::pow(static_cast<double>(dense.final_params[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-5);
  EXPECT_LT(std::sqrt(rooted_diff / norm), 1e-5);
  // The tables moved: the final model is not the initial one.
  std::vector<float> initial(dense.final_params.size());
  Dlrm<float>(shape).init_params(initial.data(), 3);
  double moved = 0;
  for (std::size_t i = 0; i < shape.embedding_params(); ++i) moved += std::abs(initial[i] - sparse.final_params[i]);
  EXPECT_GT(moved, 1e-3);
  // Adagrad on the tables: both sparse paths step the same rows the same way, unlike SGD's.
  c.model.dlrm.embedding_optimizer = "adagrad";
  const RunResult adagrad_gathered = train_allreduce(c, data);
  c.mode = Mode::sharded_ps;
  const RunResult adagrad_pushed = train_sharded_ps(c, data);
  c.mode = Mode::ps;
  const RunResult adagrad_rooted = train_data_parallel(c, data);
  ASSERT_EQ(adagrad_pushed.step_train_loss.size(), 12u);
  ASSERT_EQ(adagrad_rooted.step_train_loss.size(), 12u);
  for (std::size_t i = 0; i < 12; ++i) {
    EXPECT_NEAR(adagrad_pushed.step_train_loss[i], adagrad_gathered.step_train_loss[i],
                1e-4 * adagrad_gathered.step_train_loss[i])
        << i;
    EXPECT_NEAR(adagrad_rooted.step_train_loss[i], adagrad_gathered.step_train_loss[i],
                1e-4 * adagrad_gathered.step_train_loss[i])
        << i;
  }
  EXPECT_GT(std::abs(adagrad_pushed.step_train_loss[11] - sparse.step_train_loss[11]), 1e-4)
      << "Adagrad's steps are not SGD's";
}

// The sparse paths' host work inside their exchanges (compact_lookups, the rows copied between
// the pull's messages, the push's sums) is moved out of comm_exposed into forward and optimizer:
// every step's phases still add up to its time, none is negative, and the exposed communication
// stays within the whole of it.
TEST(DlrmSparse, HostWorkInsideTheExchangesIsComputeAndThePhasesStillAddUp) {
  DlrmShape shape = testing::small_dlrm_shape(3, 3000);
  shape.lookups = 40;
  const auto logs = make_click_logs(shape, {}, 4096, 5);  // uniform: many distinct rows to copy and sum
  const TrainData data{logs.get(), nullptr};
  for (const Mode mode : {Mode::sharded_ps, Mode::allreduce, Mode::ps}) {
    TrainConfig c = testing::small_dlrm_config(shape, 2, 512, 8);
    c.mode = mode;
    c.model.dlrm.sparse_grad = true;
    const RunResult r = find_strategy(mode).train(c, data);
    for (const RankResult& rank : r.ranks) {
      ASSERT_EQ(rank.steps.size(), 7u);
      for (const StepRecord& st : rank.steps) {
        const PhaseTimes& t = st.phases;
        for (const double v : {t.data_wait, t.h2d, t.forward, t.backward, t.comm_exposed, t.optimizer})
          EXPECT_GE(v, 0.0);
        EXPECT_NEAR(t.data_wait + t.h2d + t.forward + t.backward + t.comm_exposed + t.optimizer, st.step_time,
                    1e-6 + 1e-6 * st.step_time)
            << mode;
        EXPECT_LE(t.comm_exposed, t.comm + 1e-12) << mode;
      }
    }
  }
}

// allreduce --sparse-grad times its step's collectives for the in-run simulation's calibration
// (StepRecord::collectives): the dense layers' all-reduce, then the all-gathers of the counts, the
// ids (2 a row) and the rows (dim a row), each rank's own floats, in order and inside the step; the
// rank's record carries them across processes (rank_to_json) as they were. The other sparse paths
// time none.
TEST(DlrmSparse, SparseAllreduceTimesItsStepsCollectivesAndItsRecordCarriesThem) {
  const DlrmShape shape = testing::small_dlrm_shape(3, 3000);
  const auto logs = make_click_logs(shape, {}, 4096, 5);
  const TrainData data{logs.get(), nullptr};
  for (const Mode mode : {Mode::allreduce, Mode::sharded_ps, Mode::ps}) {
    TrainConfig c = testing::small_dlrm_config(shape, 2, 512, 6);
    c.mode = mode;
    c.model.dlrm.sparse_grad = true;
    const RunResult r = find_strategy(mode).train(c, data);
    for (const RankResult& rank : r.ranks) {
      ASSERT_EQ(rank.steps.size(), 5u);
      for (const StepRecord& st : rank.steps) {
        if (mode != Mode::allreduce) {
          EXPECT_TRUE(st.collectives.empty()) << mode;
          continue;
        }
        const std::vector<CollectiveTiming>& t = st.collectives;
        ASSERT_EQ(t.size(), 4u);
        EXPECT_EQ(t[0].kind, CollectiveKind::allreduce);
        EXPECT_EQ(t[0].floats, r.num_params - shape.embedding_params());
        for (std::size_t i = 1; i < 4; ++i) EXPECT_EQ(t[i].kind, CollectiveKind::allgather);
        EXPECT_EQ(t[1].floats, 1u);
        EXPECT_GT(t[2].floats, 0u);
        EXPECT_EQ(t[2].floats % 2, 0u);
        EXPECT_EQ(t[3].floats, t[2].floats / 2 * shape.dim);  // dim floats for each row's two ids
        double inside = 0;
        for (std::size_t i = 0; i < 4; ++i) {
          EXPECT_LE(t[i].enter_s, t[i].exit_s);
          if (i > 0) EXPECT_LE(t[i - 1].exit_s, t[i].enter_s);
          inside += t[i].exit_s - t[i].enter_s;
        }
        EXPECT_LE(inside, st.step_time);
      }
      const RankResult back = rank_from_json(rank_to_json(rank));
      ASSERT_EQ(back.steps.size(), rank.steps.size());
      for (std::size_t s = 0; s < rank.steps.size(); ++s) {
        ASSERT_EQ(back.steps[s].collectives.size(), rank.steps[s].collectives.size());
        for (std::size_t i = 0; i < rank.steps[s].collectives.size(); ++i) {
          const CollectiveTiming &a = rank.steps[s].collectives[i], &b = back.steps[s].collectives[i];
          EXPECT_EQ(a.kind, b.kind);
          EXPECT_EQ(a.floats, b.floats);
          EXPECT_EQ(a.enter_s, b.enter_s);
          EXPECT_EQ(a.exit_s, b.exit_s);
        }
      }
    }
  }
}

// in_step_collectives: each collective's mean cost from its last rank's entry to its last exit
// (not from the first entry), its end from the step's first collective's last entry, an
// all-gather's segments each rank's mean; a step that timed other kinds is no calibration.
TEST(InStepCalibration, EachCollectiveCostsFromItsLastEntryToItsLastExit) {
  RunResult r;
  r.ranks.resize(2);
  const auto step = [](double t0, double late, std::size_t rows) {
    StepRecord s;
    s.collectives = {{CollectiveKind::allreduce, 100, t0, t0 + 0.010},
                     {CollectiveKind::allgather, rows, t0 + 0.011 + late, t0 + 0.015 + late}};
    return s;
  };
  // rank 1 enters the all-reduce 4 ms after rank 0 and leaves it 1 ms after it.
  for (int k = 0; k < 2; ++k) {
    const double t0 = 10.0 * k;
    r.ranks[0].steps.push_back(step(t0, 0.0, 10 + 10 * k));
    StepRecord one = step(t0 + 0.004, 0.001, 30);
    one.collectives[0].exit_s = t0 + 0.011;
    r.ranks[1].steps.push_back(one);
  }
  const auto probes = in_step_collectives(r);
  ASSERT_TRUE(probes.has_value());
  ASSERT_EQ(probes->size(), 2u);
  const CollectiveProbe &ar = (*probes)[0], &ag = (*probes)[1];
  EXPECT_EQ(ar.kind, CollectiveKind::allreduce);
  EXPECT_EQ(ar.floats, 100u);
  EXPECT_NEAR(ar.seconds, 0.011 - 0.004, 1e-9);  // from rank 1's entry, not rank 0's
  EXPECT_NEAR(ar.end_s, ar.seconds, 1e-9);
  EXPECT_EQ(ag.kind, CollectiveKind::allgather);
  // rank 1's all-gather: entered at t0 + 0.016, left at t0 + 0.020; rank 0's within it.
  EXPECT_NEAR(ag.seconds, 0.020 - 0.016, 1e-9);
  EXPECT_NEAR(ag.end_s, 0.020 - 0.004, 1e-9);
  EXPECT_EQ(ag.counts, (std::vector<std::size_t>{15, 30}));  // rank 0: (10 + 20) / 2
  EXPECT_EQ(ag.floats, 45u);
  r.ranks[1].steps[1].collectives[1].kind = CollectiveKind::reduce;
  EXPECT_FALSE(in_step_collectives(r).has_value());
  r.ranks[1].steps[1].collectives.pop_back();
  EXPECT_FALSE(in_step_collectives(r).has_value());
  r.ranks.resize(1);
  EXPECT_FALSE(in_step_collectives(r).has_value());
}

// overhead_line: the least-squares constant and cost per byte through a message kind's costs at
// its sizes, neither below 0.
TEST(InStepCalibration, OverheadLineIsTheLeastSquaresLineKeptAtZeroOrAbove) {
  const auto [fixed, per_byte] = overhead_line(
      {{4, 1e-3 + 4 * 2e-9}, {43e3, 1e-3 + 43e3 * 2e-9}, {347e3, 1e-3 + 347e3 * 2e-9}});
  EXPECT_NEAR(fixed, 1e-3, 1e-12);
  EXPECT_NEAR(per_byte, 2e-9, 1e-15);
  const auto [mean, flat] = overhead_line({{4, 3e-3}, {1e5, 1e-3}});  // falling: flat at the mean
  EXPECT_NEAR(mean, 2e-3, 1e-12);
  EXPECT_EQ(flat, 0.0);
  const auto [origin, slope] = overhead_line({{1e3, 0.0}, {2e3, 0.0}, {3e3, 4e-3}});  // intercept < 0
  EXPECT_EQ(origin, 0.0);
  EXPECT_NEAR(slope, 12.0 / 14e6, 1e-15);  // sum(x y) / sum(x x)
  EXPECT_EQ(overhead_line({}), std::make_pair(0.0, 0.0));
}

// --test-freq 4 over 12 steps: rank 0 evaluates the test set after steps 4, 8 and 12, between
// steps. The evaluations change nothing of the training or its figures: the step losses are the
// same bits and every rank's bytes per step the same count as without them, though the sparse
// push's evaluation gathers the tables from their servers (bytes the run leaves out). The last
// evaluation is of the final model: the run's test metrics, exactly. Each point's seconds are its
// step's end in step_end_s. Dense allreduce, sharded_ps --sparse-grad and ps --sparse-grad.
TEST(DlrmTestFreq, EvaluationsBetweenStepsLeaveTheTrainingAndItsBytesAlone) {
  DlrmShape shape = testing::small_dlrm_shape(3, 300);
  const auto logs = make_click_logs(shape, {1.05}, 2048, 5);
  const auto test = make_click_logs(shape, {1.05}, 400, 6);
  const TrainData data{logs.get(), test.get()};
  for (const std::string mode : {"allreduce", "sharded_ps sparse", "ps sparse"}) {
    TrainConfig c = testing::small_dlrm_config(shape, 3, 96, 12);
    c.mode = parse_mode(mode.substr(0, mode.find(' ')));
    c.model.dlrm.sparse_grad = mode.find("sparse") != std::string::npos;
    c.evaluate = true;
    const RunResult plain = find_strategy(c.mode).train(c, data);
    c.run.test_freq = 4;
    c.run.target_auc = 0.5;
    const RunResult tested = find_strategy(c.mode).train(c, data);
    EXPECT_TRUE(plain.test_curve.empty()) << mode;
    ASSERT_EQ(tested.test_curve.size(), 3u) << mode;
    ASSERT_EQ(tested.step_end_s.size(), 12u) << mode;
    for (std::size_t k = 0; k < 3; ++k) {
      const TestPoint& p = tested.test_curve[k];
      EXPECT_EQ(p.step, 4 * static_cast<long>(k + 1)) << mode;
      EXPECT_EQ(p.seconds, tested.step_end_s[static_cast<std::size_t>(p.step - 1)]) << mode;
      EXPECT_GT(p.auc, 0.0) << mode;
    }
    EXPECT_EQ(tested.test_curve.back().accuracy, tested.test_accuracy) << mode;
    EXPECT_EQ(tested.test_curve.back().auc, tested.test_auc) << mode;
    EXPECT_NE(tested.test_curve.front().auc, tested.test_curve.back().auc) << mode << ": the model did not change";
    EXPECT_EQ(tested.step_train_loss, plain.step_train_loss) << mode;
    EXPECT_EQ(tested.test_auc, plain.test_auc) << mode;
    for (int r = 0; r < 3; ++r) {
      const auto ru = static_cast<std::size_t>(r);
      EXPECT_EQ(tested.ranks[ru].comm_per_step.bytes_sent, plain.ranks[ru].comm_per_step.bytes_sent) << mode << r;
      EXPECT_EQ(tested.ranks[ru].comm_per_step.bytes_received, plain.ranks[ru].comm_per_step.bytes_received)
          << mode << r;
    }
    long first = -1;  // the first evaluation at or above 0.5
    for (auto it = tested.test_curve.rbegin(); it != tested.test_curve.rend(); ++it)
      first = it->auc >= 0.5 ? it->step : first;
    EXPECT_EQ(time_to_target_auc(tested.test_curve, 0.5).step, first) << mode;
  }
}

// The memory model of every sparse path equals the allocator's peak of every category of every
// rank to the byte: the compact replica, a server's block of rows and their sums (sharded_ps; 300
// rows over 3 servers), every table in every replica (allreduce), every table, their sums and the
// dense layers' optimizer state on the root alone (ps), Adagrad's sums of squares.
TEST(DlrmSparse, MemoryModelEqualsTheAllocatorsPeakToTheByte) {
  DlrmShape shape = testing::small_dlrm_shape(3, 301);  // the last server one row more
  shape.sparse_grad = true;
  const auto logs = make_click_logs(shape, {1.05}, 1024, 5);
  int checked = 0;
  for (const char* tables : {"sgd", "adagrad"}) {
    for (const Mode mode : {Mode::sharded_ps, Mode::allreduce, Mode::ps}) {
      TrainConfig c = testing::small_dlrm_config(shape, 3, 96, 3);
      c.model.dlrm.embedding_optimizer = tables;
      c.optimizer.momentum = 0.9f;  // the dense layers' state
      c.mode = mode;
      const RunResult run = testing::train_mode(c, *logs);
      const std::vector<RankMemory> model = find_strategy(mode).memory(builtin_memory_inputs(c, logs->shape(), 2));
      ASSERT_EQ(model.size(), run.ranks.size());
      for (std::size_t r = 0; r < model.size(); ++r) {
        for (int cat = 0; cat < kNumMemoryCategories; ++cat) {
          const auto name = std::string(category_name(static_cast<MemoryCategory>(cat)));
          EXPECT_EQ(static_cast<std::int64_t>(model[r].bytes[static_cast<std::size_t>(cat)]),
                    run.ranks[r].memory.peak_by_category.at(name))
              << mode << " " << tables << ", rank " << r << ", " << name;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 2 * 3 * 3 * kNumMemoryCategories);
}

// The tables' Adagrad step (torch.optim.Adagrad on a sparse gradient): the sum of squares grows by
// g^2 and the row moves by lr g / (sqrt(sum) + 1e-10); SGD moves it by lr g and keeps no state.
TEST(DlrmSparse, TableRowStepsAsTorchAdagradAndSgd) {
  std::vector<float> w = {1.0f, 1.0f}, state = {0.0f, 5.0f};
  const std::vector<float> g = {2.0f, -4.0f};
  step_table_row(true, 0.5f, w.data(), g.data(), state.data(), 2);
  EXPECT_FLOAT_EQ(state[0], 4.0f);
  EXPECT_FLOAT_EQ(state[1], 21.0f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.5f * 2.0f / 2.0f);
  EXPECT_FLOAT_EQ(w[1], 1.0f + 0.5f * 4.0f / std::sqrt(21.0f));
  step_table_row(false, 0.5f, w.data(), g.data(), nullptr, 2);
  EXPECT_FLOAT_EQ(w[0], 0.5f - 1.0f);
}

// The ROC AUC as the rank statistic: separated scores 1, reversed 0, all tied one half, and a
// hand-counted case: positives {0.8, 0.4}, negatives {0.6, 0.4, 0.1}: of the 6 pairs the 0.8
// wins 3, the 0.4 beats 0.1 and ties 0.4 (3 + 1 + 0.5 = 4.5 of 6 = 0.75).
TEST(RocAuc, IsTheShareOfPositiveNegativePairsRankedRight) {
  EXPECT_DOUBLE_EQ(roc_auc({0.1f, 0.2f, 0.9f, 0.8f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(roc_auc({0.9f, 0.8f, 0.1f, 0.2f}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(roc_auc({0.5f, 0.5f, 0.5f}, {0, 1, 0}), 0.5);
  EXPECT_DOUBLE_EQ(roc_auc({0.8f, 0.6f, 0.4f, 0.4f, 0.1f}, {1, 0, 1, 0, 0}), 0.75);
  EXPECT_EQ(roc_auc({0.3f, 0.7f}, {1, 1}), -1.0);
  EXPECT_EQ(roc_auc({0.3f, std::nanf(""), 0.7f}, {1, 0, 1}), -1.0);  // a diverged model's: no order
  EXPECT_THROW(roc_auc({0.3f}, {1, 0}), Error);
  EXPECT_THROW(roc_auc({0.3f, 0.1f}, {2, 0}), Error);
}

// --init-params (and the reference's perturbed starts) reach the tables' servers, the replicas'
// own tables and the dense layers of both sparse paths: each trains as dense allreduce from the
// same given start, which is not the seed's.
TEST(DlrmSparse, GivenInitialParametersStartBothSparsePaths) {
  DlrmShape shape;
  shape.dense_features = 4;
  shape.tables = 2;
  shape.rows = 200;
  shape.dim = 4;
  shape.lookups = 2;
  shape.bottom = {6};
  shape.top = {6};
  const auto logs = make_click_logs(shape, {}, 512, 7);
  TrainConfig c = testing::small_dlrm_config(shape, 2, 64, 4);
  c.optimizer.momentum = 0.9f;  // the dense layers' (the tables step without)
  const TrainData data{logs.get(), nullptr};
  c.mode = Mode::allreduce;
  const RunResult seeded = train_allreduce(c, data);
  auto given = std::make_shared<std::vector<float>>(Dlrm<float>(shape).num_params());
  Dlrm<float>(shape).init_params(given->data(), 11);
  c.initial_params = given;
  const RunResult dense = train_allreduce(c, data);
  c.model.dlrm.sparse_grad = true;
  const RunResult gathered = train_allreduce(c, data);
  c.mode = Mode::sharded_ps;
  const RunResult pushed = train_sharded_ps(c, data);
  ASSERT_EQ(dense.step_train_loss.size(), 4u);
  EXPECT_GT(std::abs(dense.step_train_loss[0] - seeded.step_train_loss[0]), 1e-3) << "the given start was used";
  for (const RunResult* r : {&gathered, &pushed}) {
    ASSERT_EQ(r->step_train_loss.size(), 4u);
    for (std::size_t i = 0; i < 4; ++i) {
      // Reduction order alone (the rows summed in another order) drifts 1e-5 by step 3 here; a
      // start that is not the given one is 1e-3 off from step 0.
      EXPECT_NEAR(r->step_train_loss[i], dense.step_train_loss[i], 1e-4 * dense.step_train_loss[i]) << i;
    }
  }
  c.initial_params = std::make_shared<std::vector<float>>(given->size() - 1);
  EXPECT_THROW(train_sharded_ps(c, data), InputError);
}

// Criteo's raw lines (workloads/criteo.hpp): the label, log(1 + max(x, 0)) of each integer
// feature, each hexadecimal id modulo the rows, a missing field 0; a slice of the lines by number.
std::string criteo_line(const std::string& label, const std::string& i1, const std::string& i2, const std::string& c1,
                        const std::string& c3) {
  std::string line = label + "\t" + i1 + "\t" + i2;
  for (int j = 3; j <= 13; ++j) line += "\t" + std::to_string(j);
  line += "\t" + c1 + "\t\t" + c3;  // C2 missing
  for (int t = 4; t <= 26; ++t) line += "\tb";
  return line + "\n";
}

DlrmShape criteo_shape() {
  DlrmShape shape;
  shape.tables = 26;
  shape.lookups = 1;
  shape.rows = 1000;
  return shape;
}

TEST(CriteoData, ReadsLabelsLogDenseFeaturesAndIdsModuloTheRows) {
  testing::TempDir tmp;
  const std::string path = (tmp.path() / "day_0").string();
  std::ofstream(path) << criteo_line("1", "3", "-1", "a", "ffffffff") << criteo_line("0", "", "0", "", "3e8");
  const auto all = read_criteo(path, criteo_shape(), 0, -1, "sample");
  ASSERT_EQ(all->size(), 2);
  ASSERT_EQ(all->shape().features(), 39u);
  std::vector<float> x(39);
  EXPECT_EQ(all->load(0, x.data()), 1);
  EXPECT_FLOAT_EQ(x[0], std::log1p(3.0f));
  EXPECT_FLOAT_EQ(x[1], 0.0f);  // a negative count clipped to 0, as DLRM does
  EXPECT_FLOAT_EQ(x[12], std::log1p(13.0f));
  EXPECT_FLOAT_EQ(x[13], 10.0f);   // C1 "a"
  EXPECT_FLOAT_EQ(x[14], 0.0f);    // C2 missing
  EXPECT_FLOAT_EQ(x[15], 295.0f);  // C3 0xffffffff mod 1000
  EXPECT_FLOAT_EQ(x[16], 11.0f);   // C4 "b"
  EXPECT_EQ(all->load(1, x.data()), 0);
  EXPECT_FLOAT_EQ(x[0], 0.0f);   // I1 missing
  EXPECT_FLOAT_EQ(x[15], 0.0f);  // C3 0x3e8 = 1000 mod 1000
  const auto second = read_criteo(path, criteo_shape(), 1, 1, "held out");
  ASSERT_EQ(second->size(), 1);
  EXPECT_EQ(second->load(0, x.data()), 0);
  EXPECT_EQ(second->name(), "held out");
}

// The split reads the file once: the last seventh of 8 lines (1) held out, the rest trained on,
// each sample where read_criteo's ranges put it; fewer than 2 lines are refused.
TEST(CriteoData, TheSplitHoldsOutTheLastSeventh) {
  testing::TempDir tmp;
  const std::string path = (tmp.path() / "day_0").string();
  {
    std::ofstream f(path);
    for (int i = 0; i < 8; ++i) f << criteo_line(i % 2 ? "1" : "0", std::to_string(i), "4", "a", "b");
  }
  const CriteoSplit split = read_criteo_split(path, criteo_shape(), "c");
  ASSERT_EQ(split.train->size(), 7);
  ASSERT_EQ(split.test->size(), 1);
  EXPECT_EQ(split.train->name(), "c/train");
  EXPECT_EQ(split.test->name(), "c/test");
  std::vector<float> x(39), y(39);
  EXPECT_EQ(split.test->load(0, x.data()), 1);
  EXPECT_FLOAT_EQ(x[0], std::log1p(7.0f));
  const auto last = read_criteo(path, criteo_shape(), 7, 1, "last");
  (void)last->load(0, y.data());
  EXPECT_EQ(x, y);
  EXPECT_EQ(split.train->load(6, x.data()), 0);
  EXPECT_FLOAT_EQ(x[0], std::log1p(6.0f));
  std::ofstream((tmp.path() / "one").string()) << criteo_line("1", "3", "4", "a", "b");
  try {
    (void)read_criteo_split((tmp.path() / "one").string(), criteo_shape(), "c");
    ADD_FAILURE() << "one line accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("1 line(s); training and held-out samples need at least 2"), std::string::npos)
        << e.what();
  }
}

TEST(CriteoData, NamesTheFileAndLineOfWhatIsNotCriteo) {
  testing::TempDir tmp;
  const std::string good = criteo_line("1", "3", "4", "a", "b");
  const auto refuses = [&](const std::string& second_line, const std::string& needle) {
    const std::string path = (tmp.path() / "bad").string();
    std::ofstream(path) << good << second_line << good;
    try {
      (void)read_criteo(path, criteo_shape(), 0, -1, "bad");
      ADD_FAILURE() << "accepted: " << second_line;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(path + ":2: " + needle), std::string::npos) << e.what();
    }
  };
  refuses("1\t2\t3\n", "3 tab-separated fields, a Criteo line has 40");
  refuses(criteo_line("2", "3", "4", "a", "b"), "label '2' is not 0 or 1");
  refuses(criteo_line("1", "3.5", "4", "a", "b"), "integer feature I1 '3.5' is not an integer");
  refuses(criteo_line("1", "3", "4", "xyz", "b"), "categorical feature C1 'xyz' is not a hexadecimal id");
  refuses(criteo_line("1", "3", "4", "a", "12345678901234567"), "categorical feature C3");
  DlrmShape eight = criteo_shape();
  eight.tables = 8;
  std::ofstream((tmp.path() / "one").string()) << good;
  EXPECT_THROW((void)read_criteo((tmp.path() / "one").string(), eight, 0, -1, "x"), InputError);
  EXPECT_THROW((void)read_criteo((tmp.path() / "one").string(), criteo_shape(), 1, -1, "x"), InputError);  // no line
  EXPECT_THROW((void)read_criteo((tmp.path() / "missing").string(), criteo_shape(), 0, -1, "x"), InputError);
}

}  // namespace
}  // namespace dpbench
