#include "train/sparse_grad.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

void validate_sparse_grad(const TrainConfig& config) {
  if (!config.model.dlrm.sparse_grad) return;
  const auto refuse = [](const std::string& why) { throw InputError("--sparse-grad: " + why); };
  if (config.model.workload != "dlrm") refuse("applies to --workload dlrm");
  if (config.device != DeviceKind::cpu) refuse("runs on --device cpu");
  if (config.optimizer.name != "sgd" || config.optimizer.weight_decay != 0) {
    refuse("the tables step with SGD without momentum or weight decay (PyTorch's SGD on a sparse gradient); "
           "give --optimizer sgd and no --weight-decay");
  }
  if (config.hierarchy != "none") refuse(fmt::format("not with --hierarchy {}", config.hierarchy));
  if (!config.rank_batches.empty()) refuse("not with --rank-batch");
  if (!config.checkpoint.dir.empty()) refuse("no checkpoints yet");
  if (config.initial_params != nullptr) refuse("not with --init-params");
  if (config.allreduce.comm_hook != "allreduce")
    refuse(fmt::format("not with --comm-hook {}", config.allreduce.comm_hook));
  const std::size_t rows = config.global_batch / static_cast<std::size_t>(std::max(1, config.world_size)) *
                           config.model.dlrm.lookups * config.model.dlrm.tables;
  if (rows > kDlrmMaxRows) {
    refuse(fmt::format("up to {} rows per step, more than {} (counts travel as exact floats)", rows, kDlrmMaxRows));
  }
}

CompactTables compact_lookups(const float* inputs, float* x_out, std::size_t batch, const cpu::BagShape& s) {
  const std::size_t stride = s.row_stride(), D = s.dense, L = s.lookups;
  std::memcpy(x_out, inputs, batch * stride * sizeof(float));
  CompactTables out;
  out.rows.resize(s.tables);
  for (std::size_t t = 0; t < s.tables; ++t) {
    std::vector<std::size_t>& rows = out.rows[t];
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t l = 0; l < L; ++l) rows.push_back(static_cast<std::size_t>(inputs[b * stride + D + t * L + l]));
    }
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t l = 0; l < L; ++l) {
        float& v = x_out[b * stride + D + t * L + l];
        v = static_cast<float>(std::lower_bound(rows.begin(), rows.end(), static_cast<std::size_t>(v)) - rows.begin());
      }
    }
  }
  return out;
}

}  // namespace dpbench
