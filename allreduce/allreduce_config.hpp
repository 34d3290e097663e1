// The `allreduce` mode's own options (--bucket-cap-mb, --first-bucket-mb, --comm-hook,
// --start-powersgd-iter), TrainConfig's `allreduce` section. A leaf header (standard headers
// only): the train layer holds it in TrainConfig.
#pragma once

#include <string>

namespace dpbench {

// DDP's gradient buckets and communication hook, with PyTorch's names.
struct AllreduceConfig {
  double bucket_cap_mb = 25.0;   // DDP bucket_cap_mb, in MiB
  double first_bucket_mb = 1.0;  // DDP's first bucket (1 MiB)
  // DDP's communication hook, PyTorch's names: "allreduce" (allreduce_hook, the default), "fp16"
  // (fp16_compress_hook) or "bf16" (bf16_compress_hook): the bucket crosses the wire in 16 bits
  // (core/hierarchical.hpp's WireFormat).
  // "powersgd:R" (powerSGD_hook, allreduce/powersgd.hpp): rank-R PowerSGD with error feedback and
  // warm start, from step start_powersgd_iter on (PyTorch's start_powerSGD_iter; its default, 1000,
  // is a training-accuracy choice: a benchmark measures the compressed step, so 2, the least
  // PyTorch allows with error feedback).
  std::string comm_hook = "allreduce";
  long start_powersgd_iter = 2;
};

}  // namespace dpbench
