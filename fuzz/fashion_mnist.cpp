// libFuzzer target: the Fashion-MNIST reader (workloads/fashion_mnist.hpp) on hostile bytes, in
// memory (load_fashion_mnist_gz_bytes: the same streaming gzip + IDX code as the files).
// Input: byte 0 holds flags (bit 0: the two parts are raw IDX bytes that this target gzips first,
// so that the fuzzer reaches the IDX checks; else they are gzip bytes as found in a file), bytes
// 1-2 the length of the images part (little-endian, cut to what is there), then the images part,
// then the labels part. InputError is the reader's way to refuse; anything else (another
// exception, a crash, a sanitizer report, a failed FUZZ_CHECK) is a bug.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "fuzz/fuzz_check.hpp"
#include "workloads/fashion_mnist.hpp"

namespace {

// `raw` as one gzip member (zlib deflate, level 1).
std::string gzip(const std::string& raw) {
  z_stream z{};
  FUZZ_CHECK(deflateInit2(&z, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, raw.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const bool compress_here = (data[0] & 1) != 0;
  const std::size_t images_len = std::min<std::size_t>(data[1] | (std::size_t{data[2]} << 8), size - 3);
  const char* rest = reinterpret_cast<const char*>(data + 3);
  std::string images(rest, images_len);
  std::string labels(rest + images_len, size - 3 - images_len);
  if (compress_here) {
    images = gzip(images);
    labels = gzip(labels);
  }
  std::unique_ptr<dpbench::Dataset> ds;
  try {
    ds = dpbench::load_fashion_mnist_gz_bytes(images, labels, true);
  } catch (const dpbench::InputError&) {
    return 0;
  }
  // Accepted: at least one 28x28 sample, every one loadable, labels in [0, 10).
  FUZZ_CHECK(ds->size() >= 1);
  FUZZ_CHECK(ds->shape().features() == 28 * 28);
  FUZZ_CHECK(ds->num_classes() == 10);
  std::vector<float> sample(ds->shape().features());
  for (std::int64_t i : {std::int64_t{0}, ds->size() - 1}) {
    const int label = ds->load(i, sample.data());
    FUZZ_CHECK(label >= 0 && label < 10);
  }
  return 0;
}
