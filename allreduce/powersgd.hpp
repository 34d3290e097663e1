// PowerSGD gradient compression (Vogels, Karimireddy and Jaggi, "PowerSGD: Practical Low-Rank
// Gradient Compression for Distributed Optimization", NeurIPS 2019) as PyTorch 1.13's DDP
// communication hook runs it (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py,
// powerSGD_hook with PowerSGDState's defaults: min_compression_rate 2, use_error_feedback,
// warm_start, orthogonalization_epsilon 0). Per bucket, from step start_powersgd_iter on:
//   1. error feedback: the bucket's local gradient plus the error this rank kept last step;
//   2. each parameter viewed as a matrix M [rows = shape[0], cols = the rest] is compressed when
//      (rows + cols) * r * 2 < rows * cols (r = min(rows, cols, rank)); the others (biases, small
//      layers) are all-reduced as they are and averaged;
//   3. Q [cols, r] (warm start: last step's; at the first compressed step the initial Q) is
//      orthogonalised, P = M Q is all-reduced (summed) and orthogonalised, Q = M^T P is all-reduced
//      and divided by the world size, and M becomes P Q^T;
//   4. the rank keeps as its error what it put in minus what came out (the whole bucket).
// Orthogonalisation is Gram-Schmidt on the columns; PyTorch uses Householder QR for r > 2, whose Q
// differs from it only in the sign of columns, which the product P Q^T does not see.
// Before start_powersgd_iter the bucket is all-reduced as the allreduce hook does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/comm.hpp"
#include "core/schedule.hpp"
#include "train/buckets.hpp"
#include "workloads/model.hpp"

namespace dpbench {

// How PowerSGD treats one parameter of a bucket: the matrix it sees and whether it compresses it.
struct PowerSgdTensor {
  std::size_t param = 0;   // index in the model's parameters
  std::size_t offset = 0;  // in the flat gradient buffer
  std::size_t rows = 0, cols = 0;
  std::size_t rank = 0;  // min(rows, cols, matrix_approximation_rank)
  bool compressed = false;
};

// The floats of the three all-reduces one compressed step runs for a bucket: its uncompressed
// tensors, then the Ps, then the Qs.
struct PowerSgdMessages {
  std::size_t uncompressed = 0, p = 0, q = 0;
};

// The tensors of `bucket` in its parameter order, as powerSGD_hook divides them (step 2 above).
std::vector<PowerSgdTensor> powersgd_tensors(const std::vector<ParamView>& params, const Bucket& bucket, int rank);
PowerSgdMessages powersgd_messages(const std::vector<PowerSgdTensor>& tensors);

// The initial Q [cols, r] of parameter `param` (row-major), standard normal from `seed`: the same
// on every rank, and what --reference pytorch hands PyTorch's hook through the start bundle.
std::vector<float> powersgd_initial_q(const PowerSgdTensor& t, std::uint64_t seed);

// Orthonormalises the columns of m [rows, cols] (row-major, cols <= rows) in place by Gram-Schmidt,
// as powerSGD_hook's _orthogonalize_gram_schmidt with epsilon 0 (a zero column stays zero).
void orthogonalize_columns(float* m, std::size_t rows, std::size_t cols);

// One rank's PowerSGD state over the buckets of its model: error feedback and warm-start P and Q
// per bucket. Not thread-safe: reduce() runs on one thread (the communication thread).
class PowerSgdHook {
 public:
  // params: the model's parameters; buckets: DDP's buckets over them; rank: matrix_approximation_rank
  // (>= 1); seed: the initial Qs'; ranks_per_node: how the three all-reduces run
  // (hierarchical_allreduce_sum: world_size for one flat ring).
  PowerSgdHook(const std::vector<ParamView>& params, const std::vector<Bucket>& buckets, int rank, std::uint64_t seed,
               int ranks_per_node);

  // Sums bucket b's gradients grads [bucket size] over all ranks, compressed: grads holds this
  // rank's share of the global batch's mean gradient (scaled by local / global batch) and ends
  // holding the compressed average. The hook sees grads * world_size, the rank's own mean
  // gradient when batches are equal, as PyTorch's hook sees it. Throws what comm throws.
  void reduce(Communicator& comm, std::size_t b, float* grads);

  const std::vector<PowerSgdTensor>& tensors(std::size_t b) const { return buckets_[b].tensors; }

  // Seconds reduce() spent on this rank's own work (error feedback, the matrix products, the
  // orthogonalisation, the copies) rather than in its three all-reduces, since the last call;
  // the call resets it. Read by the thread that ran reduce() or after a join with it.
  double take_compute_s() { return std::exchange(compute_s_, 0.0); }
  // Its all-reduces since the last call, in order, each timed by the host's monotonic clock
  // (CollectiveTiming: kind allreduce, floats, entry, exit); the call clears them. Read as
  // take_compute_s().
  std::vector<CollectiveTiming> take_timings() { return std::exchange(timings_, {}); }

 private:
  struct BucketState {
    std::vector<PowerSgdTensor> tensors;
    std::size_t size = 0;
    std::vector<float> error, input, uncompressed, p, q;  // p, q: every compressed tensor's, in order
    bool started = false;
  };
  void orthogonalize_all(const BucketState& s, float* memory, bool p_side) const;
  // Zero error, the initial Qs, the buffers (the bucket's first compressed step).
  void start(BucketState& s) const;
  // The uncompressed tensors, gathered, summed over the ranks and written back averaged.
  void average_uncompressed(Communicator& comm, BucketState& s, float* grads);
  // P = M Q summed and orthogonalised; Q = M^T P summed and averaged; M = P Q^T.
  void power_step(Communicator& comm, BucketState& s, float* grads);
  // In-place sum over the ranks (nothing for an empty vector).
  void sum(Communicator& comm, std::vector<float>& v);
  std::vector<BucketState> buckets_;
  std::uint64_t seed_;
  int ranks_per_node_;
  std::vector<float> scratch_;
  double in_sum_s_ = 0;                    // seconds inside sum(), ever
  double compute_s_ = 0;                   // take_compute_s()'s
  std::vector<CollectiveTiming> timings_;  // take_timings()'s
};

}  // namespace dpbench
