// Gradient buckets as DistributedDataParallel builds them (PyTorch
// torch/csrc/distributed/c10d/reducer.cpp, compute_bucket_assignment_by_size): parameters are
// taken in the order backward produces gradients (reverse order unless the model records
// another), and a bucket is closed as soon
// as its size reaches the cap: first_bucket_bytes for the first bucket (1 MiB by default), then
// bucket_cap_bytes (bucket_cap_mb, 25 MiB by default). Because gradients live in one flat buffer
// in parameter order, every bucket is one contiguous range of that buffer.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "workloads/model.hpp"

namespace dpbench {

struct Bucket {
  std::size_t offset = 0;           // first element in the flat gradient buffer
  std::size_t size = 0;             // elements
  std::vector<std::size_t> params;  // parameter indices, in the order they were added
};

// params: the model's views in parameter order; ready_order: the parameter indices in the order
// backward makes their gradients ready (empty: reverse parameter order), which DDP's rebuilt
// buckets follow after the first step (reducer.cpp, rebuild_buckets). Throws InputError when a cap
// is not positive, Error when ready_order is not a permutation of the parameters or a bucket is
// not one contiguous range of the flat buffer.
std::vector<Bucket> assign_buckets(const std::vector<ParamView>& params, std::size_t elem_bytes, double first_bucket_mb,
                                   double bucket_cap_mb, const std::vector<std::size_t>& ready_order = {});

// Counts gradients as they become ready and launches each bucket once all of its gradients are,
// strictly in bucket order (as DDP does, so every rank issues its collectives in the same order).
class BucketLauncher {
 public:
  BucketLauncher(const std::vector<Bucket>& buckets, std::size_t num_params,
                 std::function<void(std::size_t bucket)> launch);
  // Call at the start of every backward.
  void reset();
  // Gradient of parameter `param` is final.
  void mark_ready(std::size_t param);
  // True once every bucket of this backward has been launched.
  bool all_launched() const { return next_ == buckets_.size(); }

 private:
  const std::vector<Bucket>& buckets_;
  std::vector<std::size_t> bucket_of_;
  std::vector<std::size_t> pending_;
  std::size_t next_ = 0;
  std::function<void(std::size_t)> launch_;
};

}  // namespace dpbench
