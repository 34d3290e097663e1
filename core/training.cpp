#include "core/training.hpp"

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/local_comm.hpp"
#include "workloads/cpu_kernels.hpp"
#include "workloads/mlp.hpp"

namespace dpbench {

void run_ranks(const TrainConfig& config,
               const std::function<void(int, Communicator&, MemoryTracker&)>& body) {
  if (config.comm != "local") {
    throw InputError(fmt::format("--comm {}: backend not available in this build (available: local)",
                                 config.comm));
  }
  auto group = std::make_shared<LocalGroup>(config.world_size, config.timeout);
  std::mutex mutex;
  std::exception_ptr first_error;
  int first_rank = -1;
  std::string first_message;

  auto rank_main = [&](int rank) {
    try {
      MemoryTracker tracker;
      LocalCommunicator comm(group, rank, &tracker);
      body(rank, comm, tracker);
    } catch (const Aborted&) {
      // A peer failed first; its error is the one reported.
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first_error) {
          first_error = std::current_exception();
          first_rank = rank;
          first_message = e.what();
        }
      }
      group->abort(fmt::format("rank {}: {}", rank, e.what()));
    }
  };

  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(config.world_size));
  for (int r = 1; r < config.world_size; ++r) threads.emplace_back(rank_main, r);
  rank_main(0);
  for (auto& t : threads) t.join();

  if (first_error) {
    try {
      std::rethrow_exception(first_error);
    } catch (const InputError&) {
      throw;  // user input: the message already names the input
    } catch (const std::exception&) {
      throw Error(fmt::format("rank {}: {}", first_rank, first_message));
    }
  }
  if (group->aborted()) throw Error("run aborted (a rank timed out)");
}

MemoryReport memory_report(const MemoryTracker& tracker) {
  MemoryReport report;
  report.peak_bytes = tracker.peak_bytes();
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const auto cat = static_cast<MemoryCategory>(c);
    report.peak_by_category[std::string(category_name(cat))] = tracker.peak_bytes(cat);
  }
  return report;
}

double evaluate_accuracy(const TrainConfig& config, const Dataset& test, const float* params) {
  const std::size_t features = test.shape().features();
  auto model = make_model(config.workload, features, config.hidden,
                          static_cast<std::size_t>(test.num_classes()));
  MemoryTracker untracked;
  constexpr std::size_t kEvalBatch = 1000;
  model->reserve(kEvalBatch, untracked);
  std::vector<float> x(kEvalBatch * features);
  std::vector<std::int32_t> y(kEvalBatch);
  std::vector<float> logits(kEvalBatch * model->num_classes());
  std::size_t correct = 0;
  const std::int64_t n = test.size();
  for (std::int64_t start = 0; start < n; start += static_cast<std::int64_t>(kEvalBatch)) {
    const auto b = static_cast<std::size_t>(std::min<std::int64_t>(kEvalBatch, n - start));
    for (std::size_t i = 0; i < b; ++i) {
      y[i] = test.load(start + static_cast<std::int64_t>(i), x.data() + i * features);
    }
    model->forward(params, x.data(), b, logits.data());
    correct += cpu::count_correct(logits.data(), y.data(), b, model->num_classes());
  }
  return n > 0 ? static_cast<double>(correct) / static_cast<double>(n) : 0.0;
}

long steps_per_epoch(const TrainConfig& config, const Dataset& train) {
  return static_cast<long>(static_cast<std::size_t>(train.size()) / config.global_batch);
}

void validate_config(const TrainConfig& config, const Dataset& train) {
  if (config.world_size < 1) {
    throw InputError(fmt::format("--ranks {}: must be at least 1", config.world_size));
  }
  if (config.global_batch < 1) throw InputError("--batch-size 0: must be at least 1");
  if (static_cast<std::int64_t>(config.world_size) > train.size()) {
    throw InputError(fmt::format("--ranks {}: more ranks than the {} training samples of {}",
                                 config.world_size, train.size(), train.name()));
  }
  if (static_cast<std::int64_t>(config.global_batch) > train.size()) {
    throw InputError(fmt::format("--batch-size {}: larger than the {} training samples of {}",
                                 config.global_batch, train.size(), train.name()));
  }
  if (config.epochs < 1) throw InputError(fmt::format("--epochs {}: must be at least 1", config.epochs));
  if (!(config.lr > 0.0f)) throw InputError(fmt::format("--lr {}: must be positive", config.lr));
  if (config.momentum < 0.0f || config.momentum >= 1.0f) {
    throw InputError(fmt::format("--momentum {}: must be in [0, 1)", config.momentum));
  }
  if (config.warmup_steps < 0) {
    throw InputError(fmt::format("--warmup-steps {}: must be >= 0", config.warmup_steps));
  }
  if (config.device != "cpu") {
    throw InputError(fmt::format("--device {}: training runs on cpu in this build", config.device));
  }
}

long total_steps(const TrainConfig& config, const Dataset& train) {
  const long all = steps_per_epoch(config, train) * config.epochs;
  return config.max_steps >= 0 ? std::min(all, config.max_steps) : all;
}

void finish_result(RunResult& result, const TrainData& data, const std::vector<double>& loss_sums,
                   const std::vector<long>& steps_in_epoch, const float* params, std::size_t n) {
  const TrainConfig& cfg = result.config;
  for (std::size_t e = 0; e < loss_sums.size() && e < steps_in_epoch.size(); ++e) {
    if (steps_in_epoch[e] == 0) continue;
    result.epoch_train_loss.push_back(
        loss_sums[e] / static_cast<double>(steps_in_epoch[e] * static_cast<long>(cfg.global_batch)));
  }
  result.final_train_loss = result.epoch_train_loss.empty() ? 0 : result.epoch_train_loss.back();
  result.num_params = n;
  result.input_features = data.train->shape().features();
  result.num_classes = static_cast<std::size_t>(data.train->num_classes());
  if (cfg.keep_final_params) result.final_params.assign(params, params + n);
  if (cfg.evaluate && data.test != nullptr) result.test_accuracy = evaluate_accuracy(cfg, *data.test, params);
}

void finish_rank(RankResult& rank, const CommStats& timed_bytes, long timed_steps,
                 const MemoryTracker& tracker) {
  if (timed_steps > 0) {
    rank.comm_per_step.bytes_sent = timed_bytes.bytes_sent / timed_steps;
    rank.comm_per_step.bytes_received = timed_bytes.bytes_received / timed_steps;
  }
  rank.memory = memory_report(tracker);
}

}  // namespace dpbench
