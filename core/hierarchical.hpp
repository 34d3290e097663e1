// The hierarchical all-reduce for nodes of several ranks, as NCCL runs its rings over a node's
// GPUs and Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE reduces inside the node first, so that only
// 2(N-1)/N of the vector crosses each node's link per all-reduce (N nodes) instead of the flat
// ring's 2(p-1)/p from the rank at the node's edge. Ranks r = node * K + local (K ranks per node,
// world_size = N * K, the emulated cluster's and mpirun's by-slot placement):
//   1. inside each node, a ring reduce-scatter over K chunks (ring_chunk(n, K, l)): local rank
//      l ends with its node's sum of chunk l;
//   2. K rings across the nodes, one per local rank: local rank l of every node all-reduces
//      chunk l (ring reduce-scatter + all-gather over ring_chunk(chunk, N, i), shift 1);
//   3. inside each node, a ring all-gather of the K chunks.
// Every step is one Communicator::sendrecv to the next rank of its ring and from the previous
// one, adding on the host. Core/schedule.hpp's Collectives::hierarchical_allreduce writes the
// same messages.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/comm.hpp"

namespace dpbench {

// The ranks of rank's node-local ring (its node's K ranks) and of its cross-node ring (local
// rank l of every node), in ring order. Throws InputError unless 1 <= ranks_per_node and
// world_size is a multiple of it.
std::vector<int> node_ring(int world_size, int ranks_per_node, int rank);
std::vector<int> cross_node_ring(int world_size, int ranks_per_node, int rank);

// How the floats travel: as they are, or rounded (to nearest even) to IEEE half or bfloat16 and
// packed two to a float slot, each sum of the reduce-scatter rounded back to 16 bits as gloo sums
// float16 tensors (PyTorch's fp16_compress_hook and bf16_compress_hook,
// torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py: half the bytes).
enum class WireFormat { fp32, fp16, bf16 };
// The float slots n floats take on the wire: n, or ceil(n / 2) packed.
std::size_t wire_slots(std::size_t n, WireFormat format);

// IEEE half <-> float: fp16_bits rounds to nearest even (overflow to infinity, NaN to a quiet
// NaN), fp16_value is exact. What the fp16 hook uses where the CPU has no F16C instructions.
std::uint16_t fp16_bits(float f);
float fp16_value(std::uint16_t bits);
// Whether this CPU has the F16C conversions (and the OS the AVX state they use); the fp16 hook
// packs, unpacks and adds eight at a time with them, with the same results.
bool cpu_has_f16c();

// In-place sum over all ranks of buf: [n] host floats, by the three phases above on
// wire_slots(n, format) slots; scratch holds one received chunk (resized as needed). Every rank
// calls it with the same n, ranks_per_node and format; ranks_per_node = world_size is one flat
// ring (reduce-scatter then all-gather). Throws InputError as node_ring does, and what the
// communicator throws.
void hierarchical_allreduce_sum(Communicator& comm, float* buf, std::size_t n, int ranks_per_node,
                                std::vector<float>& scratch, WireFormat format = WireFormat::fp32);

// sharded_ps --hierarchy node (BytePS's reduction inside the machine before the push and
// broadcast after the pull, Jiang et al., OSDI 2020): every rank serves one segment, and the
// segments lie in the buffer in node-local-major order, local rank 0 of nodes 0..N-1 first, then
// local rank 1 of every node, ..., so that the segments of a node's local rank l form one span.
// The ranks in that order: position l * N + i holds rank i * K + l. Throws as node_ring does.
std::vector<int> hierarchical_segment_order(int world_size, int ranks_per_node);

// Reduce-scatter over per-rank segments: buf holds the segments of every rank in
// hierarchical_segment_order, counts[r] floats for rank r (counts indexed by rank, a count may be
// 0), on every rank. Afterwards rank r's segment of buf holds the sum over ranks of that segment;
// the rest of buf is left as scratch. Phases: inside each node a ring reduce-scatter over the K
// spans (local rank l ends with its node's sum of span l), then one ring per local rank l across
// the nodes over span l's N segments, so (N-1)/N of the vector crosses each node's link.
// scratch holds one received chunk. Throws InputError on a bad layout or counts.size() !=
// world_size, and what the communicator throws.
void hierarchical_reduce_scatterv_sum(Communicator& comm, float* buf, const std::vector<std::size_t>& counts,
                                      int ranks_per_node, std::vector<float>& scratch);
// All-gather over the same segments: rank r's segment of buf reaches every rank's buf, across
// the nodes first (one ring per local rank), then inside each node. Throws as above.
void hierarchical_allgatherv(Communicator& comm, float* buf, const std::vector<std::size_t>& counts,
                             int ranks_per_node);

// The per-rank counts of n floats cut into world_size balanced segments in
// hierarchical_segment_order: rank order[q] gets ring_chunk(n, world_size, q).length. [world_size]
// entries, indexed by rank. Throws as node_ring does.
std::vector<std::size_t> hierarchical_segment_counts(std::size_t n, int world_size, int ranks_per_node);

// ps --hierarchy node (a per-node pre-reduction before the gradients cross to the root, and the
// parameters crossing once per node on their way back): the sum of every rank's buf: [n] lands
// in rank 0's buf by hierarchical_reduce_scatterv_sum over hierarchical_segment_counts, then every
// other rank sending its summed segment to rank 0 (gloo's reduce, per node and across nodes); the
// other ranks' buf is left as scratch. Broadcast: rank 0 sends every other rank its segment, then
// hierarchical_allgatherv (a scatter then an all-gather, van de Geijn's broadcast). Every rank
// calls them with the same n and ranks_per_node. Throws as hierarchical_reduce_scatterv_sum does.
void hierarchical_reduce_sum(Communicator& comm, float* buf, std::size_t n, int ranks_per_node,
                             std::vector<float>& scratch);
void hierarchical_broadcast(Communicator& comm, float* buf, std::size_t n, int ranks_per_node);

}  // namespace dpbench
