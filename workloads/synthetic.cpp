// Synthetic classification data generated on demand: every value is a pure function of
// (seed, index, feature) computed with the splitmix64 finaliser, so samples cost no memory or
// disk, loading is thread-safe, and any worker count yields the same bytes. A sample is its
// class prototype (values in [-1, 1)) plus noise of standard deviation 0.5, which a linear model
// separates well. Not for: realistic image statistics.
#include "workloads/synthetic.hpp"

#include <charconv>
#include <limits>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"
#include "workloads/hash_stream.hpp"

namespace dpbench {
namespace {

// Domain tags so that labels, prototypes and noise draw from unrelated hash streams.
constexpr std::uint64_t kLabelTag = 0x6c6162656c5f7461ull;
constexpr std::uint64_t kPrototypeTag = 0x70726f746f747970ull;
constexpr std::uint64_t kNoiseTag = 0x6e6f6973655f7461ull;
constexpr float kNoiseStd = 0.5f;

class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(SampleShape shape, int num_classes, std::int64_t size, std::uint64_t seed)
      : shape_(shape), num_classes_(num_classes), size_(size), seed_(seed) {}

  std::int64_t size() const override { return size_; }
  SampleShape shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }

  int load(std::int64_t index, float* out) const override {
    const auto idx = static_cast<std::uint64_t>(index);
    const int label = static_cast<int>(hash3(seed_, kLabelTag, idx) % static_cast<std::uint64_t>(num_classes_));
    const std::uint64_t proto_key = hash3(seed_, kPrototypeTag, static_cast<std::uint64_t>(label));
    const std::uint64_t noise_key = hash3(seed_, kNoiseTag, idx);
    // Sum of four 16-bit uniforms (Irwin-Hall, variance 4/12) rescaled to std kNoiseStd.
    constexpr float kNoiseScale = kNoiseStd * 1.7320508f / 65536.0f;  // sqrt(3) = 1 / sqrt(1/3)
    const std::size_t n = shape_.features();
    for (std::size_t j = 0; j < n; ++j) {
      const float prototype = 2.0f * unit(splitmix64(proto_key ^ j)) - 1.0f;
      const std::uint64_t r = splitmix64(noise_key + j * 0x9e3779b97f4a7c15ull);
      const float sum = static_cast<float>((r & 0xffff) + ((r >> 16) & 0xffff) + ((r >> 32) & 0xffff) + (r >> 48));
      out[j] = prototype + (sum - 2.0f * 65536.0f) * kNoiseScale;
    }
    return label;
  }

  std::string name() const override {
    return fmt::format("synthetic {}x{}x{}", shape_.channels, shape_.height, shape_.width);
  }

 private:
  SampleShape shape_;
  int num_classes_;
  std::int64_t size_;
  std::uint64_t seed_;
};

}  // namespace

SampleShape parse_sample_shape(const std::string& text) {
  std::vector<int> dims;
  std::string_view rest = text;
  while (true) {
    const std::size_t x = rest.find('x');
    const std::string_view part = rest.substr(0, x);
    int value = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), value);
    if (part.empty() || ec != std::errc() || end != part.data() + part.size()) {
      throw InputError(
          fmt::format("sample shape '{}': expected CxHxW, HxW or N with positive integers (e.g. 3x224x224)", text));
    }
    if (value <= 0) {
      throw InputError(fmt::format("sample shape '{}': dimension {} is not positive", text, value));
    }
    dims.push_back(value);
    if (x == std::string_view::npos) break;
    rest = rest.substr(x + 1);
  }
  if (dims.size() > 3) {
    throw InputError(fmt::format("sample shape '{}': more than 3 dimensions (expected CxHxW)", text));
  }
  // The product is checked one factor at a time: three dimensions below 2^31 can wrap 64 bits
  // (2097152x2097152x4194304 is 2^64, which SampleShape::features() would see as 0).
  constexpr std::uint64_t kMaxFeatures = std::numeric_limits<std::int32_t>::max();
  std::uint64_t features = 1;
  for (int d : dims) {
    if (features > kMaxFeatures / static_cast<std::uint64_t>(d)) {
      throw InputError(fmt::format("sample shape '{}': more than {} features", text, kMaxFeatures));
    }
    features *= static_cast<std::uint64_t>(d);
  }
  SampleShape shape;
  if (dims.size() == 3) shape = SampleShape{dims[0], dims[1], dims[2]};
  if (dims.size() == 2) shape = SampleShape{1, dims[0], dims[1]};
  if (dims.size() == 1) shape = SampleShape{1, 1, dims[0]};
  return shape;
}

std::unique_ptr<Dataset> make_synthetic_dataset(SampleShape shape, int num_classes, std::int64_t size,
                                                std::uint64_t seed) {
  if (size < 1) throw InputError(fmt::format("synthetic dataset size {} must be >= 1", size));
  if (num_classes < 2) {
    throw InputError(fmt::format("synthetic dataset: {} classes, need at least 2", num_classes));
  }
  if (shape.channels < 1 || shape.height < 1 || shape.width < 1) {
    throw InputError(fmt::format("synthetic dataset: shape {}x{}x{} has a non-positive dimension", shape.channels,
                                 shape.height, shape.width));
  }
  return std::make_unique<SyntheticDataset>(shape, num_classes, size, seed);
}

}  // namespace dpbench
