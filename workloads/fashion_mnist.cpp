// Fashion-MNIST reader: streams the gzip-compressed IDX files through zlib's inflate, validates
// every header field, the size cap and the image/label counts before inflating any payload, then
// inflates exactly the promised bytes (rejecting truncated or trailing data), checks the label
// range, and keeps the raw bytes in memory; samples are normalised only when a worker loads
// them. Not for: downloading the dataset or reading uncompressed IDX files.
#include "workloads/fashion_mnist.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
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
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | std::uint32_t{p[3]};
}

// Upper bound on one decompressed IDX file (header + payload), checked against the header
// before any payload is inflated. The largest Fashion-MNIST file (train images) is 47,040,016
// bytes; 1 GiB leaves room for larger IDX sets in the same format (EMNIST ByClass images are
// about 638 MB) while refusing a header that asks for several GiB. The payload buffer is
// reserved at the promised size but only grows (and becomes resident) as bytes arrive, so a
// header that lies costs address space, not memory.
constexpr std::uint64_t kMaxIdxBytes = std::uint64_t{1} << 30;

// Compressed bytes read from the file per refill; the only input buffer.
constexpr std::size_t kInChunk = std::size_t{1} << 18;
// Payload bytes made resident per inflate call while filling the final buffer.
constexpr std::size_t kOutChunk = std::size_t{1} << 22;

// Streams the decompressed bytes of a gzip file (or of gzip bytes in memory) through a kInChunk
// input buffer; never inflates more than the caller asks for. Accepts concatenated gzip members
// as gzip(1) does.
class GzStream {
 public:
  // Reads from `in` (a file opened in binary mode, or bytes in memory), `size` bytes long; `path`
  // names it in errors. Throws InputError naming it: cannot open (`in` failed), read error, not
  // gzip (no magic 1f 8b).
  GzStream(std::unique_ptr<std::istream> in, const std::string& path, std::uintmax_t size)
      : path_(path), file_(std::move(in)), in_(kInChunk) {
    if (!*file_) throw InputError(fmt::format("{}: cannot open file", path));
    if (!refill() || strm_.avail_in < 2 || in_[0] != 0x1f || in_[1] != 0x8b) {
      throw InputError(fmt::format("{}: not a gzip file ({} bytes, no gzip magic 1f 8b)", path, size));
    }
    if (inflateInit2(&strm_, 16 + MAX_WBITS) != Z_OK) {
      throw Error(fmt::format("{}: zlib inflateInit2 failed", path));
    }
  }
  GzStream(const GzStream&) = delete;
  GzStream& operator=(const GzStream&) = delete;
  ~GzStream() { inflateEnd(&strm_); }

  // Inflates into dst[0, n) and returns n, or fewer only where the last gzip member ends
  // cleanly. Throws InputError naming the file: corrupt deflate data or bad checksum, the
  // file ends inside a member ("truncated gzip file"), non-gzip bytes after a member.
  std::size_t read(std::uint8_t* dst, std::size_t n) {
    std::size_t got = 0;
    while (got < n && !finished_) {
      if (strm_.avail_in == 0 && !refill()) {
        throw InputError(fmt::format(
            "{}: truncated gzip file (compressed stream ends early after {} decompressed bytes)", path_, total_out_));
      }
      if (member_ended_) {  // input continues after a complete member: must be another one
        if (strm_.next_in[0] != 0x1f) {
          throw InputError(fmt::format(
              "{}: trailing data: non-gzip bytes after the gzip stream ({} decompressed bytes)", path_, total_out_));
        }
        inflateReset(&strm_);
        member_ended_ = false;
      }
      const std::size_t want = std::min<std::size_t>(n - got, std::numeric_limits<uInt>::max());
      strm_.next_out = dst + got;
      strm_.avail_out = static_cast<uInt>(want);
      const int ret = inflate(&strm_, Z_NO_FLUSH);
      const std::size_t produced = want - strm_.avail_out;
      got += produced;
      total_out_ += produced;
      if (ret == Z_STREAM_END) {
        member_ended_ = true;
        if (strm_.avail_in == 0 && !refill()) finished_ = true;
      } else if (ret == Z_MEM_ERROR) {
        throw Error(fmt::format("{}: zlib out of memory", path_));
      } else if (ret != Z_OK && ret != Z_BUF_ERROR) {
        const std::string msg = strm_.msg != nullptr ? strm_.msg : fmt::format("zlib error {}", ret);
        throw InputError(fmt::format("{}: corrupt gzip data ({})", path_, msg));
      }
    }
    return got;
  }

 private:
  // Reads the next compressed chunk; false at end of file. Throws InputError on a read error.
  bool refill() {
    file_->read(reinterpret_cast<char*>(in_.data()), static_cast<std::streamsize>(in_.size()));
    const auto n = static_cast<std::size_t>(file_->gcount());
    if (file_->bad()) throw InputError(fmt::format("{}: read error", path_));
    strm_.next_in = in_.data();
    strm_.avail_in = static_cast<uInt>(n);
    return n > 0;
  }

  std::string path_;
  std::unique_ptr<std::istream> file_;
  std::vector<std::uint8_t> in_;
  z_stream strm_{};
  std::uint64_t total_out_ = 0;  // decompressed bytes so far, over all members
  bool member_ended_ = false;    // the last inflate call ended a gzip member
  bool finished_ = false;        // ... and the file has no bytes after it
};

const char* idx_kind(int ndims) {
  switch (ndims) {
    case 1: return "1-D";
    case 3: return "3-D";
    default: return "N-D";
  }
}

// Where an IDX file's gzip bytes come from: a file or memory.
struct IdxSource {
  std::unique_ptr<std::istream> in;
  std::string path;     // names it in errors
  std::uintmax_t size;  // compressed bytes
};

// One gzip-compressed IDX file of unsigned bytes, read in two steps so that a caller can check
// the headers of a pair of files against each other before inflating either payload.
class IdxGzReader {
 public:
  // Inflates and validates only the header of the gzip stream `in` (4-byte magic, then
  // expected_ndims big-endian uint32 dimensions); `path` names it in errors, `size` is its
  // compressed size. Throws InputError naming the file: not gzip, corrupt or truncated header,
  // wrong magic, size above kMaxIdxBytes.
  IdxGzReader(IdxSource source, int expected_ndims)
      : path_(source.path), stream_(std::move(source.in), source.path, source.size) {
    const std::string& path = path_;
    std::uint8_t buf[4];
    const std::size_t got = stream_.read(buf, 4);
    if (got < 4) {
      throw InputError(fmt::format("{}: truncated IDX data ({} bytes, shorter than the 4-byte magic)", path, got));
    }
    const std::uint32_t magic = read_be32(buf);
    const std::uint32_t expected = (kIdxUnsignedByte << 8) | static_cast<std::uint32_t>(expected_ndims);
    if (magic != expected) {
      throw InputError(fmt::format("{}: bad IDX magic 0x{:08x} (expected 0x{:08x} for {} unsigned bytes)", path, magic,
                                   expected, idx_kind(expected_ndims)));
    }
    header_ = 4 + 4 * static_cast<std::size_t>(expected_ndims);
    constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();
    std::uint64_t count = 1;
    for (int d = 0; d < expected_ndims; ++d) {
      const std::size_t dim_got = stream_.read(buf, 4);
      if (dim_got < 4) {
        throw InputError(fmt::format("{}: truncated IDX header ({} bytes, need {})", path,
                                     4 + 4 * static_cast<std::size_t>(d) + dim_got, header_));
      }
      const std::uint32_t dim = read_be32(buf);
      dims_.push_back(dim);
      // Saturate where three 32-bit dimensions overflow 64 bits; rejected by the cap below.
      count = (dim != 0 && count > kSaturated / dim) ? kSaturated : count * dim;
    }
    if (count > kMaxIdxBytes - header_) {
      std::string shape;
      for (std::uint32_t dim : dims_) {
        if (!shape.empty()) shape += 'x';
        shape += std::to_string(dim);
      }
      throw InputError(fmt::format("{}: IDX header promises {} = {} payload bytes, over the {}-byte limit for one IDX "
                                   "file",
                                   path, shape, count == kSaturated ? "more than 2^64" : std::to_string(count),
                                   kMaxIdxBytes));
    }
    payload_ = static_cast<std::size_t>(count);
  }

  const std::vector<std::uint32_t>& dims() const { return dims_; }
  const std::string& path() const { return path_; }

  // Inflates exactly the payload the header promises into the returned array (no other copy)
  // and checks that the stream ends there. Throws InputError naming the file: fewer bytes
  // ("truncated"), more bytes ("trailing data"), corrupt gzip data. Call once.
  IdxArray read_payload() {
    IdxArray out;
    out.dims = dims_;
    out.data.reserve(payload_);  // address space only; pages become resident as they fill
    while (out.data.size() < payload_) {
      const std::size_t have = out.data.size();
      const std::size_t step = std::min(kOutChunk, payload_ - have);
      out.data.resize(have + step);
      const std::size_t got = stream_.read(out.data.data() + have, step);
      if (got < step) {
        throw InputError(
            fmt::format("{}: truncated IDX payload ({} bytes, the dimensions need {})", path_, have + got, payload_));
      }
    }
    std::uint8_t extra = 0;
    if (stream_.read(&extra, 1) != 0) {
      throw InputError(fmt::format("{}: trailing data: the gzip stream holds more than the {} bytes its IDX header "
                                   "promises ({}-byte header + {}-byte payload)",
                                   path_, header_ + payload_, header_, payload_));
    }
    return out;
  }

 private:
  std::string path_;
  GzStream stream_;
  std::vector<std::uint32_t> dims_;
  std::size_t header_ = 0;   // bytes of magic + dimensions
  std::size_t payload_ = 0;  // product of the dimensions, <= kMaxIdxBytes - header_
};

// The file `path` for IdxGzReader. Throws InputError naming it: missing, not a regular file.
IdxSource idx_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw InputError(fmt::format("{}: file does not exist", path));
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    throw InputError(fmt::format("{}: not a regular file", path));
  }
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  return {std::make_unique<std::ifstream>(path, std::ios::binary), path, ec ? 0 : size};
}

class FashionMnistDataset final : public Dataset {
 public:
  FashionMnistDataset(std::vector<std::uint8_t> images, std::vector<std::uint8_t> labels, bool train)
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
  std::string name() const override { return train_ ? "fashion-mnist/train" : "fashion-mnist/test"; }

 private:
  std::vector<std::uint8_t> images_;  // [n, 28, 28] raw pixels
  std::vector<std::uint8_t> labels_;  // [n] in [0, 10)
  bool train_;
  float lut_[256];  // normalised value of each pixel byte
};

// The dataset of one split from its images and labels files (opened in that order, each when it
// is needed). Both headers are checked against each other before either payload is inflated.
// Throws InputError as load_fashion_mnist.
std::unique_ptr<Dataset> load_fashion_mnist_pair(const std::function<IdxSource()>& open_images,
                                                 const std::function<IdxSource()>& open_labels, bool train) {
  IdxGzReader image_file(open_images(), 3);
  const std::string& images_path = image_file.path();
  const std::vector<std::uint32_t>& image_dims = image_file.dims();
  if (image_dims[1] != kImageSide || image_dims[2] != kImageSide) {
    throw InputError(fmt::format("{}: images are {}x{}, expected {}x{}", images_path, image_dims[1], image_dims[2],
                                 kImageSide, kImageSide));
  }
  if (image_dims[0] == 0) throw InputError(fmt::format("{}: contains no images", images_path));
  IdxGzReader label_file(open_labels(), 1);
  const std::string& labels_path = label_file.path();
  if (label_file.dims()[0] != image_dims[0]) {
    throw InputError(fmt::format("{}: count mismatch: {} labels but {} has {} images", labels_path,
                                 label_file.dims()[0], images_path, image_dims[0]));
  }
  IdxArray images = image_file.read_payload();
  IdxArray labels = label_file.read_payload();
  for (std::size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= kNumClasses) {
      throw InputError(
          fmt::format("{}: label {} at index {} is out of range [0, {})", labels_path, labels.data[i], i, kNumClasses));
    }
  }
  return std::make_unique<FashionMnistDataset>(std::move(images.data), std::move(labels.data), train);
}

}  // namespace

IdxArray read_idx_gz(const std::string& path, int expected_ndims) {
  return IdxGzReader(idx_file(path), expected_ndims).read_payload();
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
    throw InputError(fmt::format("data directory {} does not exist (install dataset-fashion-mnist or pass --data-dir / "
                                 "DPBENCH_DATA_DIR)",
                                 dir));
  }
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = (std::filesystem::path(dir) / (prefix + "-images-idx3-ubyte.gz")).string();
  const std::string labels_path = (std::filesystem::path(dir) / (prefix + "-labels-idx1-ubyte.gz")).string();

  return load_fashion_mnist_pair([&] { return idx_file(images_path); }, [&] { return idx_file(labels_path); }, train);
}

std::unique_ptr<Dataset> load_fashion_mnist_gz_bytes(const std::string& images_gz, const std::string& labels_gz,
                                                     bool train) {
  auto in_memory = [](const std::string& bytes, const char* name) {
    return [&bytes, name] { return IdxSource{std::make_unique<std::istringstream>(bytes), name, bytes.size()}; };
  };
  return load_fashion_mnist_pair(in_memory(images_gz, "images.gz"), in_memory(labels_gz, "labels.gz"), train);
}

}  // namespace dpbench
