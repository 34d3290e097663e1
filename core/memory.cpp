#include "core/memory.hpp"

namespace dpbench {

std::string_view category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::parameters: return "parameters";
    case MemoryCategory::gradients: return "gradients";
    case MemoryCategory::optimizer_state: return "optimizer_state";
    case MemoryCategory::activations: return "activations";
    case MemoryCategory::comm_buffers: return "comm_buffers";
    case MemoryCategory::data_staging: return "data_staging";
  }
  return "unknown";
}

void MemoryTracker::raise_peak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t old = peak.load();
  while (value > old && !peak.compare_exchange_weak(old, value)) {
  }
}

void MemoryTracker::on_alloc(MemoryCategory c, std::size_t bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  raise_peak(peak_[idx(c)], current_[idx(c)].fetch_add(b) + b);
  raise_peak(total_peak_, total_.fetch_add(b) + b);
}

void MemoryTracker::on_free(MemoryCategory c, std::size_t bytes) {
  const auto b = static_cast<std::int64_t>(bytes);
  current_[idx(c)].fetch_sub(b);
  total_.fetch_sub(b);
}

double RankMemory::total() const {
  double sum = 0;
  for (double b : bytes) sum += b;
  return sum;
}

}  // namespace dpbench
