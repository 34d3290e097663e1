#include "core/rate.hpp"

#include <algorithm>
#include <cctype>
#include <regex>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

LinkRate parse_rate(const std::string& text, const std::string& option, double max_bits_per_s) {
  static const std::regex form(R"(^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$)",
                               std::regex::icase);
  std::smatch m;
  if (!std::regex_match(text, m, form)) {
    throw InputError(fmt::format("{} {}: not a rate (e.g. 100mbit, 1gbit, 10gbit; tc's units bit, kbit, mbit, "
                                 "gbit or bps, kbps, mbps, gbps for bytes per second)",
                                 option, text));
  }
  std::string unit = m[3].str();
  std::transform(unit.begin(), unit.end(), unit.begin(), [](unsigned char c) { return std::tolower(c); });
  const bool bytes = unit.size() >= 3 && unit.compare(unit.size() - 3, 3, "bps") == 0;
  const char scale = unit.front();
  double factor = 1;
  if (scale == 'k') factor = 1e3;
  if (scale == 'm') factor = 1e6;
  if (scale == 'g') factor = 1e9;
  if (scale == 't') factor = 1e12;
  LinkRate rate{text, std::stod(m[1].str()) * factor * (bytes ? 8.0 : 1.0)};
  if (!(rate.bits_per_s >= 1e3)) throw InputError(fmt::format("{} {}: below 1 kbit/s", option, text));
  if (rate.bits_per_s > max_bits_per_s) {
    throw InputError(fmt::format("{} {}: above {:g} gbit/s", option, text, max_bits_per_s / 1e9));
  }
  return rate;
}

}  // namespace dpbench
