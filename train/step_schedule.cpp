#include "train/step_schedule.hpp"

namespace dpbench {

std::vector<int> backward_with_bucket_events(StepSchedule& s, const ScheduleInputs& in, int rank, int stream) {
  const RankCompute& c = in.compute.at(static_cast<std::size_t>(rank));
  std::size_t total = 0;
  for (const ScheduleBucket& b : in.buckets) total += b.size;
  std::vector<int> events;
  for (const ScheduleBucket& b : in.buckets) {
    const double share = total > 0 ? static_cast<double>(b.size) / static_cast<double>(total) : 0.0;
    s.compute(rank, stream, c.backward * share, "backward");
    events.push_back(s.new_event(rank));
    s.record(rank, stream, events.back());
  }
  return events;
}

}  // namespace dpbench
