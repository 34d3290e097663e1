// Synthetic classification data of any shape, generated on demand from (seed, index) so that
// no memory or disk is needed however large the samples: for scaling studies
// (--data synthetic --input 3x224x224 --classes 1000). Each class has a fixed random prototype;
// a sample is its class prototype plus Gaussian-like noise, so a model can learn it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "workloads/dataset.hpp"

namespace dpbench {

// Parses "CxHxW" (e.g. "3x224x224") or "HxW" (one channel) or "N" (1x1xN). Throws InputError
// naming the text when it is malformed or a dimension is not positive.
SampleShape parse_sample_shape(const std::string& text);

// size samples of `shape`, labels in [0, num_classes). Same (seed, index) -> same sample.
// Throws InputError if size < 1 or num_classes < 2.
std::unique_ptr<Dataset> make_synthetic_dataset(SampleShape shape, int num_classes, std::int64_t size,
                                                std::uint64_t seed);

}  // namespace dpbench
