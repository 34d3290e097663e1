// A link rate in tc(8)'s units, as the emulated cluster's --link and the simulated topology's
// --node-link and --intra-link take it.
#pragma once

#include <string>

namespace dpbench {

// A link rate as tc(8) writes it: "200mbit", "1gbit", "10gbit", "500kbit", "100mbps" (bytes).
struct LinkRate {
  std::string text;  // as the user gave it
  double bits_per_s = 0;
};

// Parses a rate in tc's units: bit, kbit, mbit, gbit, tbit (bits per second, powers of 1000) and
// bps, kbps, mbps, gbps, tbps (bytes per second). Throws InputError naming `option` when the text
// is not a positive rate in one of those units, or is above max_bits_per_s (tc's shaping: 100 gbit;
// a simulated link may be faster).
LinkRate parse_rate(const std::string& text, const std::string& option, double max_bits_per_s = 100e9);

}  // namespace dpbench
