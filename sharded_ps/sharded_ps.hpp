// The `sharded_ps` mode: a sharded parameter server in the manner of BytePS (Jiang et al., OSDI
// 2020) and of the parameter server of Li et al. (OSDI 2014). Every rank is a worker with a full
// model replica, reading its DistributedSampler shard as in `allreduce`; ranks 0..K-1
// (--servers K, default every rank) are also servers, server k owning the contiguous parameter
// range ring_chunk(n, K, k) (balanced by bytes) together with its gradient sum and its momentum
// buffer, which no other rank holds. Each step:
//   push:  every worker's gradients go to the servers owning them. collective transport: each
//          DDP bucket is reduce-scattered over the servers' ranges as soon as it is ready, so the
//          push overlaps backward; p2p: after backward, each worker sends every server its range
//          (send/recv, so K < p shows incast on the servers' links);
//   step:  each server applies SGD with momentum to its range (gradients scaled by
//          local_batch / global_batch, as in `allreduce`, so the update is the same);
//   pull:  every worker gets every updated range back (in-place all-gather over the ranges, or
//          a send from each server to each worker), blocking, before the next step.
// --hierarchy node (collective, every rank a server): BytePS's reduction inside the machine. The
// ranges follow core/hierarchical.hpp's segment order; each bucket's push is reduced inside the
// node first, then across the nodes by one ring per local rank, and the pull gathers across the
// nodes, then inside them: (N-1)/N of the gradient crosses each node's link per push and per pull
// (N nodes), where the flat ring's edge rank sends (p-1)/p of it.
// Per rank and step, with n parameters, s_r the range of rank r (0 off the servers):
//   collective: sends 2n - s_r - s_{r+1}, receives 2n - s_{r-1} - s_r elements (indices mod p;
//               with K = p, 2(p-1)/p n each way up to rounding: ring all-reduce's traffic);
//   p2p:        sends and receives n + (p-2) s_r elements (n on a worker that is no server).
#pragma once

#include <cstddef>
#include <vector>

#include "core/comm.hpp"
#include "train/strategy.hpp"
#include "train/training.hpp"

namespace dpbench {

// The servers' ranges over n parameters: rank k < servers owns [offsets[k], offsets[k] +
// counts[k]) = ring_chunk(n, servers, k); ranks >= servers own nothing. counts and offsets have
// world_size entries. Throws InputError unless 1 <= servers <= world_size.
struct ShardLayout {
  std::vector<std::size_t> counts;
  std::vector<std::size_t> offsets;
};
ShardLayout shard_layout(std::size_t n, int world_size, int servers);

// The servers' ranges of a run: shard_layout(n, world_size, server_count(config)); under
// --hierarchy node (every rank a server), rank hierarchical_segment_order[q] owns ring_chunk(n,
// world_size, q) (core/hierarchical.hpp), so that each local rank's ranges over the nodes are one
// span. Throws as shard_layout does.
ShardLayout shard_layout_for(const TrainConfig& config, std::size_t n);

// The part of the range [offset, offset + size) each rank serves: world_size counts that add up
// to size.
std::vector<std::size_t> shard_counts_within(const ShardLayout& layout, std::size_t offset, std::size_t size);

// Elements rank `rank` sends and receives in one step's push and pull under `transport`
// ("collective" or "p2p"): the formulas above. The BatchNorm buffers' broadcast is not included.
ElementCounts sharded_ps_step_counts(const ShardLayout& layout, int rank, Transport transport);

// The number of servers a config asks for: config.sharded_ps.servers, or world_size when it is 0.
int server_count(const TrainConfig& config);

// Throws InputError on a config this mode cannot run with this data: allreduce's checks, an
// unknown --transport, --servers outside 0..world_size; under --hierarchy node, the p2p
// transport, fewer servers than ranks, and validate_node_hierarchy's checks.
void validate_sharded_ps(const TrainConfig& config, const Dataset& train);

// The collectives of a sharded_ps step (Strategy::probed_collectives): reduce-scatter and
// all-gather over the collective transport (--staleness too), none over p2p (transfers at the
// link's rate); with --sparse-grad kSparseProbeRounds rounds of pairwise sendrecv (the rows
// pulled and pushed) and an all-reduce (the dense layers).
std::vector<CollectiveKind> sharded_ps_probed_collectives(const TrainConfig& config);

// Trains on config.device. Throws as validate_sharded_ps does, and Error if a rank fails.
RunResult train_sharded_ps(const TrainConfig& config, const TrainData& data);

// The strategy's registry entry: trainer and traits (sharded_ps/sharded_ps_strategy.cpp).
const Strategy& sharded_ps_strategy();

}  // namespace dpbench
