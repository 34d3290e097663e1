#include "core/hierarchical.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.hpp"
#include "core/ring.hpp"

namespace dpbench {

namespace {

void check_layout(int world_size, int ranks_per_node) {
  if (ranks_per_node < 1 || world_size % ranks_per_node != 0) {
    throw InputError(fmt::format("hierarchy: {} ranks do not make nodes of {} ranks each", world_size, ranks_per_node));
  }
}

// One half of a ring among `members` (this rank at position pos) over chunks chunk_of(i) of
// buf: reduce-scatter (adds what it receives) or all-gather (copies it), core/ring.hpp's steps.
template <typename ChunkOf>
void ring_half(Communicator& comm, float* buf, const std::vector<int>& members, int pos, int shift, bool reduce,
               ChunkOf chunk_of, std::vector<float>& scratch) {
  const int p = static_cast<int>(members.size());
  const int next = members[static_cast<std::size_t>(ring_mod(pos + 1, p))];
  const int prev = members[static_cast<std::size_t>(ring_mod(pos - 1, p))];
  for (int s = 0; s + 1 < p; ++s) {
    const RingStep st = reduce ? ring_reduce_scatter_step(pos, p, shift, s) : ring_all_gather_step(pos, p, shift, s);
    const Chunk out = chunk_of(st.send);
    const Chunk in = chunk_of(st.recv);
    if (!reduce) {
      comm.sendrecv(buf + out.offset, out.length, next, buf + in.offset, in.length, prev);
      continue;
    }
    if (scratch.size() < in.length) scratch.resize(in.length);
    comm.sendrecv(buf + out.offset, out.length, next, scratch.data(), in.length, prev);
    float* own = buf + in.offset;
    for (std::size_t i = 0; i < in.length; ++i) own[i] = scratch[i] + own[i];
  }
}

}  // namespace

std::vector<int> node_ring(int world_size, int ranks_per_node, int rank) {
  check_layout(world_size, ranks_per_node);
  std::vector<int> out;
  const int first = rank / ranks_per_node * ranks_per_node;
  for (int l = 0; l < ranks_per_node; ++l) out.push_back(first + l);
  return out;
}

std::vector<int> cross_node_ring(int world_size, int ranks_per_node, int rank) {
  check_layout(world_size, ranks_per_node);
  std::vector<int> out;
  for (int node = 0; node < world_size / ranks_per_node; ++node) out.push_back(node * ranks_per_node + rank % ranks_per_node);
  return out;
}

void hierarchical_allreduce_sum(Communicator& comm, float* buf, std::size_t n, int ranks_per_node,
                                std::vector<float>& scratch) {
  const int p = comm.world_size();
  const int rank = comm.rank();
  const std::vector<int> local = node_ring(p, ranks_per_node, rank);
  const std::vector<int> across = cross_node_ring(p, ranks_per_node, rank);
  if (p < 2 || n == 0) return;
  const int k = ranks_per_node;
  const int l = rank % k;
  const auto node_chunk = [n, k](int i) { return ring_chunk(n, k, i); };
  ring_half(comm, buf, local, l, 0, true, node_chunk, scratch);
  const Chunk mine = node_chunk(l);
  const int nodes = static_cast<int>(across.size());
  const auto sub_chunk = [&mine, nodes](int i) {
    const Chunk c = ring_chunk(mine.length, nodes, i);
    return Chunk{mine.offset + c.offset, c.length};
  };
  const int node = rank / k;
  ring_half(comm, buf, across, node, 1, true, sub_chunk, scratch);
  ring_half(comm, buf, across, node, 1, false, sub_chunk, scratch);
  ring_half(comm, buf, local, l, 0, false, node_chunk, scratch);
}

}  // namespace dpbench
