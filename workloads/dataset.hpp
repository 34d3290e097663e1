// A dataset is random access to (features, label) pairs: Fashion-MNIST read from disk, or
// synthetic samples of any shape generated on demand. Loading a sample "decodes" it into
// normalised floats; the DataLoader's workers call load() concurrently, so it must be
// thread-safe (const and free of shared mutable state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace dpbench {

// Shape of one sample, channels x height x width (an MLP sees features() = C*H*W floats).
struct SampleShape {
  int channels = 1;
  int height = 28;
  int width = 28;
  std::size_t features() const {
    return static_cast<std::size_t>(channels) * static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual std::int64_t size() const = 0;
  virtual SampleShape shape() const = 0;
  virtual int num_classes() const = 0;
  // Writes sample `index` (0 <= index < size()) as shape().features() floats to out and
  // returns its label in [0, num_classes()). Thread-safe.
  virtual int load(std::int64_t index, float* out) const = 0;
  // Short description for results, e.g. "fashion-mnist/train" or "synthetic 3x224x224".
  virtual std::string name() const = 0;
};

}  // namespace dpbench
