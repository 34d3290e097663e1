// Fashion-MNIST (Xiao et al. 2017) read from the gzip-compressed IDX files that Debian's
// dataset-fashion-mnist package installs, with every field validated. Not for: downloading.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "workloads/dataset.hpp"

namespace dpbench {

// Default directory of Debian's dataset-fashion-mnist package.
inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

// A decoded IDX file: its dimensions and its raw unsigned bytes (row-major).
struct IdxArray {
  std::vector<std::uint32_t> dims;
  std::vector<std::uint8_t> data;
};

// Reads a gzip-compressed IDX file of unsigned bytes (type code 0x08) with zlib, streaming: the
// header is inflated and validated first, then exactly the bytes it promises are inflated into
// the returned array. expected_ndims: 3 for images ([n, rows, cols]), 1 for labels ([n]).
// Memory stays within a few MiB of the payload size even for a hostile file. Throws
// InputError naming `path` when the file is missing, not gzip, corrupt or truncated, the magic
// or type code is wrong, the number of dimensions differs, the header promises more than the
// 1 GiB cap (kMaxIdxBytes in the .cpp), or the stream holds fewer ("truncated") or more
// ("trailing data") bytes than the header promises.
IdxArray read_idx_gz(const std::string& path, int expected_ndims);

// The directory to read from: `cli_value` if not empty, else $DPBENCH_DATA_DIR if set, else
// kFashionMnistDefaultDir.
std::string resolve_data_dir(const std::string& cli_value);

// Loads the train (60k) or test (10k) split from dir: {train,t10k}-images-idx3-ubyte.gz and
// {train,t10k}-labels-idx1-ubyte.gz. Images are 28x28 bytes; samples are [1, 28, 28] floats
// normalised as (x/255 - 0.2860) / 0.3530 (the dataset's mean and std). Both headers are
// checked against each other before either payload is inflated. Throws InputError naming the
// file or directory: missing directory or file, bad IDX (see read_idx_gz), images not 28x28,
// image and label counts differing, a label outside [0, 10).
std::unique_ptr<Dataset> load_fashion_mnist(const std::string& dir, bool train);

// load_fashion_mnist from the two gzip files' bytes in memory (images_gz: [n, 28, 28] images,
// labels_gz: [n] labels), with the same checks; errors name them "images.gz" and "labels.gz".
// For the fuzz target (fuzz/fashion_mnist.cpp) and tests. Throws InputError as load_fashion_mnist.
std::unique_ptr<Dataset> load_fashion_mnist_gz_bytes(const std::string& images_gz, const std::string& labels_gz,
                                                     bool train);

}  // namespace dpbench
