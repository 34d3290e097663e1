#include "train/step_schedule.hpp"

#include <algorithm>
#include <numeric>

#include "train/buckets.hpp"

namespace dpbench {

std::vector<ScheduleBucket> model_schedule_buckets(const Model& model, const TrainConfig& config) {
  const std::vector<double> ready = model.grad_ready_times();
  std::vector<ScheduleBucket> out;
  double previous = 0;
  for (const Bucket& b : assign_buckets(model.params(), sizeof(float), config.allreduce.first_bucket_mb,
                                        config.allreduce.bucket_cap_mb, model.grad_ready_order())) {
    out.push_back({b.offset, b.size, {}});
    if (!ready.empty()) {  // ready when its last gradient is
      double at = 0;
      for (std::size_t p : b.params) at = std::max(at, ready[p]);
      out.back().backward_share = std::max(0.0, at - previous);
      previous = std::max(previous, at);
    }
  }
  return out;
}

std::vector<int> backward_with_bucket_events(StepSchedule& s, const ScheduleInputs& in, int rank, int stream) {
  const RankCompute& c = in.compute.at(static_cast<std::size_t>(rank));
  std::size_t total = 0;
  for (const ScheduleBucket& b : in.buckets) total += b.size;
  std::vector<int> events;
  double done = 0;
  for (const ScheduleBucket& b : in.buckets) {
    double share = total > 0 ? static_cast<double>(b.size) / static_cast<double>(total) : 0.0;
    if (b.backward_share >= 0) {  // described ready points; the last bucket takes the rest of backward
      share = &b == &in.buckets.back() ? std::max(0.0, 1.0 - done) : b.backward_share;
    }
    done += share;
    s.compute(rank, stream, c.backward * share, "backward");
    events.push_back(s.new_event(rank));
    s.record(rank, stream, events.back());
  }
  return events;
}

std::vector<BucketEvents> replica_forward_backward(StepSchedule& s, const ScheduleInputs& in) {
  std::vector<BucketEvents> events(static_cast<std::size_t>(s.world_size()));
  for (int r = 0; r < s.world_size(); ++r) {
    const RankCompute& c = in.compute.at(static_cast<std::size_t>(r));
    s.compute(r, 0, c.data, "data");
    s.compute(r, 0, c.forward, "forward");
    auto& e = events[static_cast<std::size_t>(r)];
    e.ready = backward_with_bucket_events(s, in, r, 0);
    e.done = s.new_event(r);
  }
  return events;
}

void replica_optimizer_after_buckets(StepSchedule& s, const ScheduleInputs& in,
                                     const std::vector<BucketEvents>& events) {
  for (int r = 0; r < s.world_size(); ++r) {
    s.record(r, 1, events[static_cast<std::size_t>(r)].done);
    s.wait_event(r, 0, events[static_cast<std::size_t>(r)].done);
    s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).optimizer, "optimizer");
  }
}

std::size_t sparse_dense_floats(const ScheduleInputs& in) {
  return in.num_params - std::min(in.num_params, in.config.model.dlrm.embedding_params());
}

double sparse_rows_per_peer(const ScheduleInputs& in, double fixed, double per_row) {
  const int p = in.config.world_size;
  if (p < 2 || !(in.measured_bytes_sent > 0) || !(per_row > 0)) return 0.0;
  StepSchedule dense(p);
  Collectives(dense, in.engine).allreduce(sparse_dense_floats(in));
  double dense_bytes = 0;
  for (int r = 0; r < p; ++r) dense_bytes += dense.bytes_sent(r) / p;
  const double per_peer = (in.measured_bytes_sent - dense_bytes) / (p - 1);
  return std::max(0.0, (per_peer - fixed) / per_row);
}

double sparse_rows_from_bytes(const ScheduleInputs& in,
                              const std::function<void(Collectives& comm, double rows)>& messages) {
  const int p = in.config.world_size;
  if (p < 2 || !(in.measured_bytes_sent > 0)) return 0.0;
  const auto mean_sent = [&](double rows) {
    StepSchedule s(p);
    Collectives comm(s, in.engine);
    messages(comm, rows);
    double sent = 0;
    for (int r = 0; r < p; ++r) sent += s.bytes_sent(r) / p;
    return sent;
  };
  constexpr double kProbeRows = 1024;  // whole rows, so the slope is exact
  const double none = mean_sent(0), slope = (mean_sent(kProbeRows) - none) / kProbeRows;
  return slope > 0 ? std::max(0.0, (in.measured_bytes_sent - none) / slope) : 0.0;
}

void sparse_before_forward(StepSchedule& s, const ScheduleInputs& in) {
  for (int r = 0; r < s.world_size(); ++r) s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).data, "data");
}

void sparse_forward_backward(StepSchedule& s, const ScheduleInputs& in) {
  for (int r = 0; r < s.world_size(); ++r) {
    const RankCompute& c = in.compute.at(static_cast<std::size_t>(r));
    s.compute(r, 0, c.forward, "forward");
    s.compute(r, 0, c.backward, "backward");
  }
}

void sparse_optimizer(StepSchedule& s, const ScheduleInputs& in) {
  for (int r = 0; r < s.world_size(); ++r) {
    s.compute(r, 0, in.compute.at(static_cast<std::size_t>(r)).optimizer, "optimizer");
  }
}

}  // namespace dpbench
