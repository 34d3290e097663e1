// The `allreduce` mode's own options (--bucket-cap-mb, --first-bucket-mb, --comm-hook,
// --start-powersgd-iter), TrainConfig's `allreduce` section. A leaf header (standard headers
// only): the train layer holds it in TrainConfig.
#pragma once

#include <charconv>
#include <optional>
#include <string>
#include <string_view>

namespace dpbench {

// DDP's communication hook (torch/distributed/algorithms/ddp_comm_hooks/), by PyTorch's names:
// allreduce (allreduce_hook, the default); fp16 (fp16_compress_hook) and bf16 (bf16_compress_hook):
// the bucket crosses the wire in 16 bits (core/hierarchical.hpp's WireFormat); powersgd:R
// (powerSGD_hook, allreduce/powersgd.hpp): rank-R PowerSGD with error feedback and warm start.
struct CommHook {
  enum class Kind { allreduce, fp16, bf16, powersgd };
  Kind kind = Kind::allreduce;
  int powersgd_rank = 0;  // powersgd's matrix_approximation_rank R >= 1; 0 for the others

  bool operator==(const CommHook&) const = default;
  // True for fp16 and bf16 (the bucket packed to 16 bits, summed in fp32).
  bool packs_16_bits() const { return kind == Kind::fp16 || kind == Kind::bf16; }
};

// The hook spelled `text`: "allreduce", "fp16", "bf16" or "powersgd:R" with R a positive integer
// (at most 6 digits); nullopt when it is none of them. The one parser of a hook's spelling.
inline std::optional<CommHook> comm_hook_from(std::string_view text) {
  if (text == "allreduce") return CommHook{};
  if (text == "fp16") return CommHook{CommHook::Kind::fp16, 0};
  if (text == "bf16") return CommHook{CommHook::Kind::bf16, 0};
  constexpr std::string_view kPowerSgd = "powersgd:";
  if (!text.starts_with(kPowerSgd)) return std::nullopt;
  const std::string_view digits = text.substr(kPowerSgd.size());
  int rank = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), rank);
  if (ec != std::errc() || end != digits.data() + digits.size() || digits.size() > 6 || rank < 1) return std::nullopt;
  return CommHook{CommHook::Kind::powersgd, rank};
}

// The spelling comm_hook_from reads: "allreduce", "fp16", "bf16", "powersgd:4".
inline std::string hook_name(const CommHook& hook) {
  switch (hook.kind) {
    case CommHook::Kind::fp16: return "fp16";
    case CommHook::Kind::bf16: return "bf16";
    case CommHook::Kind::powersgd: return "powersgd:" + std::to_string(hook.powersgd_rank);
    case CommHook::Kind::allreduce: break;
  }
  return "allreduce";
}

// DDP's gradient buckets and communication hook, with PyTorch's names.
struct AllreduceConfig {
  double bucket_cap_mb = 25.0;   // DDP bucket_cap_mb, in MiB
  double first_bucket_mb = 1.0;  // DDP's first bucket (1 MiB)
  CommHook comm_hook;            // --comm-hook
  // PowerSGD compresses from this step on (PyTorch's start_powerSGD_iter; its default, 1000, is a
  // training-accuracy choice: a benchmark measures the compressed step, so 2, the least PyTorch
  // allows with error feedback).
  long start_powersgd_iter = 2;
};

}  // namespace dpbench
