// Counter-based random values for data generated on demand: every value is a pure function of
// its key, so samples cost no memory, loading is thread-safe and any worker count yields the same
// bytes (workloads/synthetic.cpp, workloads/click_logs.cpp).
#pragma once

#include <cstdint>

namespace dpbench {

// splitmix64's finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mix.
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A key from three words (seed, domain tag, index).
inline std::uint64_t hash3(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  return splitmix64(splitmix64(splitmix64(a) ^ b) ^ c);
}

// Top 24 bits of h as a float in [0, 1).
inline float unit(std::uint64_t h) { return static_cast<float>(h >> 40) * (1.0f / 16777216.0f); }

// Top 53 bits of h as a double in [0, 1).
inline double unit53(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace dpbench
