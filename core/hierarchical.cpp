#include "core/hierarchical.hpp"

#include <fmt/format.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

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
// buf: reduce-scatter (add(own, received, length) folds in what it receives) or all-gather
// (copies it), core/ring.hpp's steps.
template <typename ChunkOf, typename Add>
void ring_half(Communicator& comm, float* buf, const std::vector<int>& members, int pos, int shift, bool reduce,
               ChunkOf chunk_of, std::vector<float>& scratch, Add add) {
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
    add(buf + in.offset, scratch.data(), in.length);
  }
}

// The three phases on `slots` floats of buf, summing with add.
template <typename Add>
void three_phases(Communicator& comm, float* buf, std::size_t slots, int k, std::vector<float>& scratch, Add add) {
  const int p = comm.world_size();
  const int rank = comm.rank();
  const std::vector<int> local = node_ring(p, k, rank);
  const std::vector<int> across = cross_node_ring(p, k, rank);
  const int l = rank % k;
  const auto node_chunk = [slots, k](int i) { return ring_chunk(slots, k, i); };
  ring_half(comm, buf, local, l, 0, true, node_chunk, scratch, add);
  const Chunk mine = node_chunk(l);
  const int nodes = static_cast<int>(across.size());
  const auto sub_chunk = [&mine, nodes](int i) {
    const Chunk c = ring_chunk(mine.length, nodes, i);
    return Chunk{mine.offset + c.offset, c.length};
  };
  const int node = rank / k;
  ring_half(comm, buf, across, node, 1, true, sub_chunk, scratch, add);
  ring_half(comm, buf, across, node, 1, false, sub_chunk, scratch, add);
  ring_half(comm, buf, local, l, 0, false, node_chunk, scratch, add);
}

// bfloat16 <-> float, round to nearest even (c10::BFloat16); fp16's are public (fp16_bits).
std::uint16_t to_bf16(float f) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  if (std::isnan(f)) return 0x7FC0;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
float from_bf16(std::uint16_t b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b) << 16;
  float f = 0;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The 16-bit values of n floats, element i at 16-bit position i of the slots' bytes (two to a
// float slot, the last half slot zero when n is odd).
std::uint16_t half_at(const float* slots, std::size_t i) {
  std::uint16_t h = 0;
  std::memcpy(&h, reinterpret_cast<const unsigned char*>(slots) + 2 * i, sizeof h);
  return h;
}
void set_half(float* slots, std::size_t i, std::uint16_t h) {
  std::memcpy(reinterpret_cast<unsigned char*>(slots) + 2 * i, &h, sizeof h);
}

template <std::uint16_t (*To)(float), float (*From)(std::uint16_t)>
struct Scalar16 {
  static void pack(const float* in, std::size_t n, float* slots) {
    for (std::size_t i = 0; i < n; ++i) set_half(slots, i, To(in[i]));
  }
  static void unpack(const float* slots, std::size_t n, float* out) {
    for (std::size_t i = 0; i < n; ++i) out[i] = From(half_at(slots, i));
  }
  // own += in over `halves` 16-bit values, each sum rounded back to 16 bits (gloo's float16 sum).
  static void add(float* own, const float* in, std::size_t halves) {
    for (std::size_t i = 0; i < halves; ++i) set_half(own, i, To(From(half_at(in, i)) + From(half_at(own, i))));
  }
};
using ScalarFp16 = Scalar16<fp16_bits, fp16_value>;
using Bf16 = Scalar16<to_bf16, from_bf16>;

// fp16 with the F16C conversions, eight at a time (the same rounding, to nearest even); the
// scalar tail and CPUs without F16C take ScalarFp16's.
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void f16c_pack(const float* in, std::size_t n, float* slots) {
  auto* out = reinterpret_cast<unsigned char*>(slots);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) set_half(slots, i, fp16_bits(in[i]));
}
__attribute__((target("avx,f16c"))) void f16c_unpack(const float* slots, std::size_t n, float* out) {
  const auto* in = reinterpret_cast<const unsigned char*>(slots);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i))));
  }
  for (; i < n; ++i) out[i] = fp16_value(half_at(slots, i));
}
__attribute__((target("avx,f16c"))) void f16c_add(float* own, const float* in, std::size_t halves) {
  auto* o = reinterpret_cast<unsigned char*>(own);
  const auto* r = reinterpret_cast<const unsigned char*>(in);
  std::size_t i = 0;
  for (; i + 8 <= halves; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(o + 2 * i)));
    const __m256 b = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + 2 * i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * i),
                     _mm256_cvtps_ph(_mm256_add_ps(b, a), _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < halves; ++i) set_half(own, i, fp16_bits(fp16_value(half_at(in, i)) + fp16_value(half_at(own, i))));
}
#else
void f16c_pack(const float* in, std::size_t n, float* slots) { ScalarFp16::pack(in, n, slots); }
void f16c_unpack(const float* slots, std::size_t n, float* out) { ScalarFp16::unpack(slots, n, out); }
void f16c_add(float* own, const float* in, std::size_t halves) { ScalarFp16::add(own, in, halves); }
#endif

struct Fp16 {
  static void pack(const float* in, std::size_t n, float* slots) {
    return cpu_has_f16c() ? f16c_pack(in, n, slots) : ScalarFp16::pack(in, n, slots);
  }
  static void unpack(const float* slots, std::size_t n, float* out) {
    return cpu_has_f16c() ? f16c_unpack(slots, n, out) : ScalarFp16::unpack(slots, n, out);
  }
  static void add(float* own, const float* in, std::size_t halves) {
    return cpu_has_f16c() ? f16c_add(own, in, halves) : ScalarFp16::add(own, in, halves);
  }
};

template <typename Format>
void compressed(Communicator& comm, float* buf, std::size_t n, int k, std::vector<float>& scratch) {
  std::vector<float> slots(wire_slots(n, WireFormat::fp16), 0.0f);
  Format::pack(buf, n, slots.data());
  three_phases(comm, slots.data(), slots.size(), k, scratch,
               [](float* own, const float* in, std::size_t len) { Format::add(own, in, 2 * len); });
  Format::unpack(slots.data(), n, buf);
}

// Where the segments of hierarchical_segment_order lie: spans[l] is local rank l's span over
// the nodes, segments[l][i] the segment of node i's local rank l inside buf.
struct SegmentSpans {
  std::vector<Chunk> spans;
  std::vector<std::vector<Chunk>> segments;
};
SegmentSpans segment_spans(const std::vector<std::size_t>& counts, int p, int k) {
  check_layout(p, k);
  if (counts.size() != static_cast<std::size_t>(p)) {
    throw InputError(fmt::format("hierarchy: {} counts for {} ranks", counts.size(), p));
  }
  const int nodes = p / k;
  SegmentSpans out{std::vector<Chunk>(static_cast<std::size_t>(k)),
                   std::vector<std::vector<Chunk>>(static_cast<std::size_t>(k))};
  std::size_t offset = 0;
  for (int l = 0; l < k; ++l) {
    const std::size_t start = offset;
    for (int i = 0; i < nodes; ++i) {
      const std::size_t n = counts[static_cast<std::size_t>(i * k + l)];
      out.segments[static_cast<std::size_t>(l)].push_back(Chunk{offset, n});
      offset += n;
    }
    out.spans[static_cast<std::size_t>(l)] = Chunk{start, offset - start};
  }
  return out;
}

void add_floats(float* own, const float* in, std::size_t len) {
  for (std::size_t i = 0; i < len; ++i) own[i] = in[i] + own[i];
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
  for (int node = 0; node < world_size / ranks_per_node; ++node)
    out.push_back(node * ranks_per_node + rank % ranks_per_node);
  return out;
}

// Giesen's float_to_half_fast3_rtne and half_to_float (public domain): round to nearest even,
// overflow to infinity, NaN kept NaN, subnormals by a float addition of a magic number.
std::uint16_t fp16_bits(float f) {
  constexpr std::uint32_t f32_infinity = 255u << 23;
  constexpr std::uint32_t f16_max = (127u + 16u) << 23;  // 65536: everything above rounds to inf
  constexpr std::uint32_t denorm_magic_bits = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  const std::uint32_t sign = u & 0x80000000u;
  u ^= sign;
  std::uint16_t out = 0;
  if (u >= f16_max) {
    out = u > f32_infinity ? 0x7E00 : 0x7C00;
  } else if (u < (113u << 23)) {  // below 2^-14: a subnormal half (or zero)
    float magic = 0, v = 0;
    std::memcpy(&magic, &denorm_magic_bits, sizeof magic);
    std::memcpy(&v, &u, sizeof v);
    v += magic;
    std::memcpy(&u, &v, sizeof u);
    out = static_cast<std::uint16_t>(u - denorm_magic_bits);
  } else {
    const std::uint32_t odd = (u >> 13) & 1u;
    u += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xFFFu + odd;
    out = static_cast<std::uint16_t>(u >> 13);
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

float fp16_value(std::uint16_t h) {
  constexpr std::uint32_t shifted_exp = 0x7C00u << 13;
  std::uint32_t o = (static_cast<std::uint32_t>(h) & 0x7FFFu) << 13;
  const std::uint32_t exp = shifted_exp & o;
  o += (127u - 15u) << 23;
  if (exp == shifted_exp) {
    o += (128u - 16u) << 23;  // infinity or NaN
  } else if (exp == 0) {      // zero or subnormal: renormalise
    o += 1u << 23;
    constexpr std::uint32_t magic_bits = 113u << 23;
    float v = 0, magic = 0;
    std::memcpy(&v, &o, sizeof v);
    std::memcpy(&magic, &magic_bits, sizeof magic);
    v -= magic;
    std::memcpy(&o, &v, sizeof o);
  }
  o |= (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  float f = 0;
  std::memcpy(&f, &o, sizeof f);
  return f;
}

bool cpu_has_f16c() {
#if defined(__x86_64__)
  static const bool has = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
    const bool avx = (c & bit_AVX) != 0, f16c = (c & bit_F16C) != 0, osxsave = (c & bit_OSXSAVE) != 0;
    if (!(avx && f16c && osxsave)) return false;
    unsigned lo = 0, hi = 0;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (lo & 6u) == 6u;  // the OS saves the SSE and AVX registers
  }();
  return has;
#else
  return false;
#endif
}

std::size_t wire_slots(std::size_t n, WireFormat format) { return format == WireFormat::fp32 ? n : (n + 1) / 2; }

void hierarchical_allreduce_sum(Communicator& comm, float* buf, std::size_t n, int ranks_per_node,
                                std::vector<float>& scratch, WireFormat format) {
  const int p = comm.world_size();
  check_layout(p, ranks_per_node);
  if (p < 2 || n == 0) return;
  switch (format) {
    case WireFormat::fp32: return three_phases(comm, buf, n, ranks_per_node, scratch, add_floats);
    case WireFormat::fp16: return compressed<Fp16>(comm, buf, n, ranks_per_node, scratch);
    case WireFormat::bf16: return compressed<Bf16>(comm, buf, n, ranks_per_node, scratch);
  }
}

std::vector<int> hierarchical_segment_order(int world_size, int ranks_per_node) {
  check_layout(world_size, ranks_per_node);
  std::vector<int> out;
  for (int l = 0; l < ranks_per_node; ++l) {
    for (int i = 0; i < world_size / ranks_per_node; ++i) out.push_back(i * ranks_per_node + l);
  }
  return out;
}

namespace {
// The two rings of the segment collectives: inside the node over the K spans, and across the
// nodes over the N segments of this local rank's span; the reduce-scatter runs inside first, the
// all-gather across first.
void segment_rings(Communicator& comm, float* buf, const std::vector<std::size_t>& counts, int k, bool reduce,
                   std::vector<float>& scratch) {
  const int p = comm.world_size(), rank = comm.rank();
  const SegmentSpans at = segment_spans(counts, p, k);
  if (p < 2) return;
  const int l = rank % k;
  const auto span = [&at](int j) { return at.spans[static_cast<std::size_t>(j)]; };
  const auto segment = [&at, l](int i) {
    return at.segments[static_cast<std::size_t>(l)][static_cast<std::size_t>(i)];
  };
  const auto inside = [&] { ring_half(comm, buf, node_ring(p, k, rank), l, 0, reduce, span, scratch, add_floats); };
  const auto across = [&] {
    ring_half(comm, buf, cross_node_ring(p, k, rank), rank / k, 0, reduce, segment, scratch, add_floats);
  };
  if (reduce) {
    inside();
    across();
  } else {
    across();
    inside();
  }
}
}  // namespace

void hierarchical_reduce_scatterv_sum(Communicator& comm, float* buf, const std::vector<std::size_t>& counts,
                                      int ranks_per_node, std::vector<float>& scratch) {
  segment_rings(comm, buf, counts, ranks_per_node, true, scratch);
}

void hierarchical_allgatherv(Communicator& comm, float* buf, const std::vector<std::size_t>& counts,
                             int ranks_per_node) {
  std::vector<float> unused;
  segment_rings(comm, buf, counts, ranks_per_node, false, unused);
}

std::vector<std::size_t> hierarchical_segment_counts(std::size_t n, int world_size, int ranks_per_node) {
  const std::vector<int> order = hierarchical_segment_order(world_size, ranks_per_node);
  std::vector<std::size_t> counts(order.size(), 0);
  for (std::size_t q = 0; q < order.size(); ++q) {
    counts[static_cast<std::size_t>(order[q])] = ring_chunk(n, world_size, static_cast<int>(q)).length;
  }
  return counts;
}

namespace {
// Rank 0 and every other rank's segment of buf (hierarchical_segment_counts' layout): each rank
// sends its own to rank 0 (gather) or receives it from rank 0 (scatter), rank 0 taking them in
// rank order.
void root_segments(Communicator& comm, float* buf, const std::vector<std::size_t>& counts, int k, bool gather) {
  const int p = comm.world_size(), rank = comm.rank();
  std::vector<std::size_t> offset(counts.size(), 0);
  std::size_t at = 0;
  for (const int r : hierarchical_segment_order(p, k)) {
    offset[static_cast<std::size_t>(r)] = at;
    at += counts[static_cast<std::size_t>(r)];
  }
  for (int r = 1; r < p; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (counts[ur] == 0 || (rank != 0 && rank != r)) continue;
    float* segment = buf + offset[ur];
    if (rank == 0) {
      gather ? comm.recv(segment, counts[ur], r) : comm.send(segment, counts[ur], r);
    } else {
      gather ? comm.send(segment, counts[ur], 0) : comm.recv(segment, counts[ur], 0);
    }
  }
}
}  // namespace

void hierarchical_reduce_sum(Communicator& comm, float* buf, std::size_t n, int ranks_per_node,
                             std::vector<float>& scratch) {
  const std::vector<std::size_t> counts = hierarchical_segment_counts(n, comm.world_size(), ranks_per_node);
  hierarchical_reduce_scatterv_sum(comm, buf, counts, ranks_per_node, scratch);
  root_segments(comm, buf, counts, ranks_per_node, true);
}

void hierarchical_broadcast(Communicator& comm, float* buf, std::size_t n, int ranks_per_node) {
  const std::vector<std::size_t> counts = hierarchical_segment_counts(n, comm.world_size(), ranks_per_node);
  root_segments(comm, buf, counts, ranks_per_node, false);
  hierarchical_allgatherv(comm, buf, counts, ranks_per_node);
}

}  // namespace dpbench
