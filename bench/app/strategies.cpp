#include "bench/app/strategies.hpp"

#include <fmt/format.h>

#include "allreduce/ddp_trainer.hpp"
#include "core/error.hpp"
#include "ps/parameter_server.hpp"

namespace dpbench {

const std::vector<Strategy>& strategies() {
  static const std::vector<Strategy> list = {
      {"ps", "DataParallel: rank 0 reduces gradients, steps the optimizer, broadcasts parameters",
       &validate_parameter_server, &train_parameter_server},
      {"allreduce", "DistributedDataParallel: bucketed ring all-reduce overlapping backward",
       &validate_allreduce, &train_allreduce},
  };
  return list;
}

const Strategy& find_strategy(const std::string& name) {
  std::string names;
  for (const auto& s : strategies()) {
    if (s.name == name) return s;
    names += (names.empty() ? "" : ", ") + s.name;
  }
  throw InputError(fmt::format("--mode {}: unknown mode (available: {})", name, names));
}

}  // namespace dpbench
