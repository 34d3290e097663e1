// Fashion-MNIST reader: inflates the gzip-compressed IDX files with zlib, validates every header
// field, counts and label range, and keeps the raw bytes in memory; samples are normalised only
// when a worker loads them. Not for: downloading the dataset or reading uncompressed IDX files.
#include "workloads/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {
namespace {

constexpr std::uint32_t kIdxUnsignedByte = 0x08;
constexpr int kImageSide = 28;
constexpr int kNumClasses = 10;
constexpr float kMean = 0.2860f;  // mean of the training pixels scaled to [0, 1]
constexpr float kStd = 0.3530f;   // their standard deviation

std::uint32_t read_be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

std::uint32_t read_le32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | (std::uint32_t{p[1]} << 8) | (std::uint32_t{p[2]} << 16) |
         (std::uint32_t{p[3]} << 24);
}

// Reads the whole file at `path` (which must exist) into memory.
std::vector<std::uint8_t> read_file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open file", path));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(fmt::format("{}: read error", path));
  return bytes;
}

// Inflates one gzip member. Throws InputError naming `path` if the bytes are not gzip, are
// corrupt, or end before the compressed stream does.
std::vector<std::uint8_t> gunzip(const std::string& path, const std::vector<std::uint8_t>& gz) {
  if (gz.size() < 2 || gz[0] != 0x1f || gz[1] != 0x8b) {
    throw InputError(fmt::format("{}: not a gzip file ({} bytes, no gzip magic 1f 8b)", path,
                                 gz.size()));
  }
  z_stream strm{};
  if (inflateInit2(&strm, 16 + MAX_WBITS) != Z_OK) {
    throw Error(fmt::format("{}: zlib inflateInit2 failed", path));
  }
  std::vector<std::uint8_t> out;
  // The gzip trailer ends with the uncompressed size modulo 2^32 (little-endian): a first guess.
  // Capped by deflate's best ratio (about 1032:1) so a corrupt trailer cannot ask for 4 GiB.
  if (gz.size() >= 18) {
    out.reserve(std::min<std::size_t>(read_le32(gz.data() + gz.size() - 4), gz.size() * 1032));
  }
  strm.next_in = const_cast<Bytef*>(gz.data());
  std::size_t in_left = gz.size();
  constexpr std::size_t kChunk = 1 << 20;
  int ret = Z_OK;
  while (ret != Z_STREAM_END) {
    if (strm.avail_in == 0) {
      if (in_left == 0) break;
      const std::size_t n = std::min<std::size_t>(in_left, std::numeric_limits<uInt>::max());
      strm.avail_in = static_cast<uInt>(n);
      in_left -= n;
    }
    const std::size_t before = out.size();
    out.resize(before + kChunk);
    strm.next_out = out.data() + before;
    strm.avail_out = static_cast<uInt>(kChunk);
    ret = inflate(&strm, Z_NO_FLUSH);
    out.resize(before + (kChunk - strm.avail_out));
    if (ret == Z_BUF_ERROR && strm.avail_in == 0 && in_left == 0) break;  // input ran out
    if (ret != Z_OK && ret != Z_STREAM_END && ret != Z_BUF_ERROR) {
      const std::string msg = strm.msg != nullptr ? strm.msg : fmt::format("zlib error {}", ret);
      inflateEnd(&strm);
      throw InputError(fmt::format("{}: corrupt gzip data ({})", path, msg));
    }
  }
  inflateEnd(&strm);
  if (ret != Z_STREAM_END) {
    throw InputError(fmt::format(
        "{}: truncated gzip file (compressed stream ends early after {} decompressed bytes)",
        path, out.size()));
  }
  return out;
}

const char* idx_kind(int ndims) {
  switch (ndims) {
    case 1: return "1-D";
    case 3: return "3-D";
    default: return "N-D";
  }
}

class FashionMnistDataset final : public Dataset {
 public:
  FashionMnistDataset(std::vector<std::uint8_t> images, std::vector<std::uint8_t> labels,
                      bool train)
      : images_(std::move(images)), labels_(std::move(labels)), train_(train) {
    for (int v = 0; v < 256; ++v) {
      lut_[v] = (static_cast<float>(v) / 255.0f - kMean) / kStd;
    }
  }

  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  SampleShape shape() const override { return SampleShape{1, kImageSide, kImageSide}; }
  int num_classes() const override { return kNumClasses; }
  int load(std::int64_t index, float* out) const override {
    constexpr std::size_t kPixels = kImageSide * kImageSide;
    const std::uint8_t* px = images_.data() + static_cast<std::size_t>(index) * kPixels;
    for (std::size_t i = 0; i < kPixels; ++i) out[i] = lut_[px[i]];
    return labels_[static_cast<std::size_t>(index)];
  }
  std::string name() const override {
    return train_ ? "fashion-mnist/train" : "fashion-mnist/test";
  }

 private:
  std::vector<std::uint8_t> images_;  // [n, 28, 28] raw pixels
  std::vector<std::uint8_t> labels_;  // [n] in [0, 10)
  bool train_;
  float lut_[256];  // normalised value of each pixel byte
};

}  // namespace

IdxArray read_idx_gz(const std::string& path, int expected_ndims) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw InputError(fmt::format("{}: file does not exist", path));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: not a regular file", path));
  }
  const std::vector<std::uint8_t> raw = gunzip(path, read_file_bytes(path));

  if (raw.size() < 4) {
    throw InputError(fmt::format(
        "{}: truncated IDX data ({} bytes, shorter than the 4-byte magic)", path, raw.size()));
  }
  const std::uint32_t magic = read_be32(raw.data());
  const std::uint32_t expected =
      (kIdxUnsignedByte << 8) | static_cast<std::uint32_t>(expected_ndims);
  if (magic != expected) {
    throw InputError(
        fmt::format("{}: bad IDX magic 0x{:08x} (expected 0x{:08x} for {} unsigned bytes)", path,
                    magic, expected, idx_kind(expected_ndims)));
  }
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(expected_ndims);
  if (raw.size() < header) {
    throw InputError(fmt::format("{}: truncated IDX header ({} bytes, need {})", path, raw.size(),
                                 header));
  }
  IdxArray out;
  std::size_t count = 1;
  for (int d = 0; d < expected_ndims; ++d) {
    const std::uint32_t dim = read_be32(raw.data() + 4 + 4 * d);
    out.dims.push_back(dim);
    // Saturate: a product beyond size_t cannot match any payload and reads as truncated.
    count = (dim != 0 && count > std::numeric_limits<std::size_t>::max() / dim)
                ? std::numeric_limits<std::size_t>::max()
                : count * dim;
  }
  const std::size_t payload = raw.size() - header;
  if (payload < count) {
    throw InputError(fmt::format("{}: truncated IDX payload ({} bytes, the dimensions need {})",
                                 path, payload, count));
  }
  if (payload > count) {
    throw InputError(fmt::format("{}: IDX payload has {} bytes but the dimensions need {}", path,
                                 payload, count));
  }
  out.data.assign(raw.begin() + static_cast<std::ptrdiff_t>(header), raw.end());
  return out;
}

std::string resolve_data_dir(const std::string& cli_value) {
  if (!cli_value.empty()) return cli_value;
  if (const char* env = std::getenv("DPBENCH_DATA_DIR"); env != nullptr && env[0] != '\0') {
    return env;
  }
  return kFashionMnistDefaultDir;
}

std::unique_ptr<Dataset> load_fashion_mnist(const std::string& dir, bool train) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw InputError(fmt::format(
        "data directory {} does not exist (install dataset-fashion-mnist or pass --data-dir / "
        "DPBENCH_DATA_DIR)",
        dir));
  }
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path =
      (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path =
      (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();

  IdxArray images = read_idx_gz(images_path, 3);
  if (images.dims[1] != kImageSide || images.dims[2] != kImageSide) {
    throw InputError(fmt::format("{}: images are {}x{}, expected {}x{}", images_path,
                                 images.dims[1], images.dims[2], kImageSide, kImageSide));
  }
  if (images.dims[0] == 0) throw InputError(fmt::format("{}: contains no images", images_path));
  IdxArray labels = read_idx_gz(labels_path, 1);
  if (labels.dims[0] != images.dims[0]) {
    throw InputError(fmt::format("{}: count mismatch: {} labels but {} has {} images",
                                 labels_path, labels.dims[0], images_path, images.dims[0]));
  }
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      throw InputError(fmt::format("{}: label {} at index {} is out of range [0, {})",
                                   labels_path, labels.data[i], i, kNumClasses));
    }
  }
  return std::make_unique<FashionMnistDataset>(std::move(images.data), std::move(labels.data),
                                               train);
}

}  // namespace dpbench
