// Checkpoints of a training run and resuming from them (`dpbench run --checkpoint-dir D
// --checkpoint-every N --resume`), written once for every strategy and device: the step loop (train/step_loop.cpp) calls
// Checkpointer::restore() before the first step and maybe_save() after each step.
//
// What a checkpoint after S steps holds, as PyTorch's seeds save on rank 0 (barrier, then save):
//   rank 0's file:  the parameters (the root's master copy in `ps`, rank 0's replica
//                   otherwise), the BatchNorm running buffers (cnn), every rank's per-step loss
//                   sums of steps 0..S-1 (so that a resumed run reports the same per-step and
//                   per-epoch losses), and rank 0's optimizer state (SGD's momentum, or Adam's
//                   exp_avg and exp_avg_sq; Adam's step count is the checkpoint's step S);
//   rank k's file:  (sharded_ps, k < servers) the optimizer state of server k's parameter range,
//                   which no other rank holds: one shard per server, written by that server.
// The data position is the step count S alone: epoch S / steps_per_epoch and step S %
// steps_per_epoch within it. No RNG state needs saving: dpbench's sample order is a pure
// function of (seed, epoch) (workloads/distributed_sampler.cpp, shuffled_indices) and its
// augmentation of (seed, epoch, dataset index) (workloads/dataloader.hpp), so seed, epoch and
// step reproduce the rest of the run exactly.
//
// One file per writing rank and checkpoint, D/ckpt-<S, 9 digits>-rank<r>.dpbc:
//   "DPBCKPT\n" | header length, u64 little-endian | header (JSON) | payload | CRC-32 (u32 LE)
// The header names the format and version, the config fingerprint (workload, widths,
// num_params, world_size, mode, transport, servers, global_batch, seed, steps_per_epoch), the
// step and the payload's blobs (raw little-endian float32, or float64 for the losses). The
// CRC-32 (zlib) covers everything before it, header and payload. Files are written atomically
// (core/atomic_file.hpp). After writing step S a rank removes its own files of later steps (left
// by an earlier run that went further) and keeps its newest kKeepCheckpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/comm.hpp"
#include "train/training.hpp"

namespace dpbench {

class RankContext;

inline constexpr int kKeepCheckpoints = 3;

// The optimizer state one rank holds, in rank-device memory, for the flat parameters
// [offset, offset + count): `slots` arrays of count floats, contiguous (SGD: the momentum; Adam
// and AdamW: exp_avg, then exp_avg_sq); count 0 when the rank holds none.
struct OptimizerShard {
  float* state = nullptr;
  std::size_t offset = 0;
  std::size_t count = 0;
  int slots = 1;
};

// What identifies the run a checkpoint belongs to: the fields above, as JSON.
nlohmann::json checkpoint_fingerprint(const TrainConfig& config, std::size_t num_params, long steps_per_epoch);

// The path of rank `rank`'s file of the checkpoint after `step` steps in `dir`.
std::string checkpoint_path(const std::string& dir, long step, int rank);

// One checkpoint file's contents (host memory).
struct CheckpointFile {
  nlohmann::json fingerprint;
  long step = 0;
  int rank = 0;
  int writers = 1;
  std::size_t velocity_offset = 0;  // the first parameter whose optimizer state the file holds
  int optimizer_slots = 1;          // state arrays per parameter (header "optimizer_slots")
  std::vector<float> params;        // [num_params] in rank 0's file, else empty
  std::vector<float> buffers;       // [num_buffers] in rank 0's file, else empty
  // The optimizer state of [velocity_offset, + size() / optimizer_slots): optimizer_slots arrays
  // one after the other (blob "velocity", its name from when it held SGD's momentum alone).
  std::vector<float> velocity;
  std::vector<double> step_losses;  // rank 0's file: [world_size][step] loss sums, row-major
};

// The bytes of `file` in the format above.
std::string encode_checkpoint(const CheckpointFile& file);
// Parses the bytes of a checkpoint file. Throws Error saying what is wrong (truncated, checksum
// mismatch, not a checkpoint, unknown version, malformed header) without looking at the config.
CheckpointFile decode_checkpoint(const std::string& bytes);

// One rank's checkpointing in a run. Ranks 0..writers-1 write a file per checkpoint (1 for
// `ps` and `allreduce`, the servers for `sharded_ps`). Every call below is made by every rank of
// the run at the same point (maybe_save's barrier and gather are collectives).
class Checkpointer {
 public:
  // The context must outlive the checkpointer. Nothing happens unless config.checkpoint.dir is set.
  Checkpointer(const TrainConfig& config, RankContext& ctx, std::size_t num_params, long steps_per_epoch, int writers);

  // With config.checkpoint.resume: the newest valid checkpoint in the directory is loaded into this rank's
  // memory (`params` [num_params] and `buffers` [num_buffers] on rank 0 only, may be null
  // elsewhere; `optimizer`'s range from this rank's file, or from rank 0's when this rank writes
  // none, as `allreduce` replicas share rank 0's momentum). A checkpoint whose files are
  // missing, truncated or fail their checksum is skipped with a one-line warning on rank 0.
  // Returns the steps it holds: the run continues at that step; 0 when there is nothing to resume
  // (no resume, or no checkpoint in the directory). Throws InputError when the directory holds
  // checkpoints but none is valid (naming the directory), or when the newest valid one was
  // written by a different config (naming the field).
  long restore(float* params, float* buffers, std::size_t num_buffers, const OptimizerShard& optimizer);

  // Replaces the first resumed-step entries of this rank's per-step loss sums (what
  // ctx.step_losses() returns; the steps before the resume were not run here) by the
  // checkpoint's. Does nothing when the run did not resume.
  void merge_losses(std::vector<double>& local_step_sums) const;

  // After `steps_done` steps: when a checkpoint is due (every config.checkpoint.every steps), all
  // ranks meet at a barrier, every rank's loss sums are gathered to rank 0, and the writers
  // write their files (same arguments as restore()). Records the seconds and bytes in `me`, and
  // moves `timed_start` by the bytes the checkpoint's collectives moved, so that the run's
  // per-step traffic leaves them out. Throws IoError when a file cannot be written.
  void maybe_save(long steps_done, const float* params, const float* buffers, std::size_t num_buffers,
                  const OptimizerShard& optimizer, RankResult& me, CommStats& timed_start);

  long resumed_from() const { return resumed_; }

 private:
  const TrainConfig& config_;
  RankContext& ctx_;
  std::size_t num_params_;
  long spe_;
  int writers_;
  long resumed_ = 0;
  // Uploads `optimizer`'s range of the state in `own` (a checkpoint file of this run). Throws
  // InputError when the file holds another number of state arrays or not the whole range.
  void restore_optimizer(const CheckpointFile& own, const OptimizerShard& optimizer);
  std::vector<double> resumed_losses_;  // this rank's loss sums of steps 0..resumed_-1
};

}  // namespace dpbench
