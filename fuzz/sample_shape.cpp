// libFuzzer target: `--input CxHxW` (parse_sample_shape, workloads/synthetic.hpp) on any text.
// InputError is the parser's way to refuse; an accepted shape must have positive dimensions, at
// most 2^31 - 1 features counted exactly (no wrap-around), and print back to a text that parses
// to the same shape.
#include <cstdint>
#include <limits>
#include <string>

#include "core/error.hpp"
#include "fuzz/fuzz_check.hpp"
#include "workloads/synthetic.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  dpbench::SampleShape shape;
  try {
    shape = dpbench::parse_sample_shape(text);
  } catch (const dpbench::InputError&) {
    return 0;
  }
  FUZZ_CHECK(shape.channels >= 1 && shape.height >= 1 && shape.width >= 1);
  const unsigned __int128 exact = static_cast<unsigned __int128>(shape.channels) *
                                  static_cast<unsigned __int128>(shape.height) *
                                  static_cast<unsigned __int128>(shape.width);
  FUZZ_CHECK(exact <= static_cast<unsigned __int128>(std::numeric_limits<std::int32_t>::max()));
  FUZZ_CHECK(shape.features() == static_cast<std::size_t>(exact));
  const std::string again = std::to_string(shape.channels) + "x" + std::to_string(shape.height) + "x" +
                            std::to_string(shape.width);
  const dpbench::SampleShape back = dpbench::parse_sample_shape(again);
  FUZZ_CHECK(back.channels == shape.channels && back.height == shape.height && back.width == shape.width);
  return 0;
}
