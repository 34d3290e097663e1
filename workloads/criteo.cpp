#include "workloads/criteo.hpp"

#include <charconv>
#include <cmath>
#include <fstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {

// Criteo's samples held in memory: features [size, 39] and labels [size].
class CriteoDataset final : public Dataset {
 public:
  CriteoDataset(std::vector<float> features, std::vector<int> labels, std::string name)
      : features_(std::move(features)), labels_(std::move(labels)), name_(std::move(name)) {}
  std::int64_t size() const override { return static_cast<std::int64_t>(labels_.size()); }
  SampleShape shape() const override { return SampleShape{1, 1, static_cast<int>(kStride)}; }
  int num_classes() const override { return 2; }
  int load(std::int64_t index, float* out) const override {
    const auto i = static_cast<std::size_t>(index);
    std::copy_n(features_.begin() + static_cast<std::ptrdiff_t>(i * kStride), kStride, out);
    return labels_[i];
  }
  std::string name() const override { return name_; }

  static constexpr std::size_t kStride = kCriteoDenseFeatures + kCriteoTables;

 private:
  std::vector<float> features_;
  std::vector<int> labels_;
  std::string name_;
};

// Parses one line into out[kStride] and its label, rows per table `rows`; returns the label.
// Throws InputError naming `where` (file:line).
int parse_line(std::string_view line, std::size_t rows, float* out, const std::string& where) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const std::size_t tab = line.find('\t', start);
    fields.push_back(line.substr(start, tab == std::string_view::npos ? std::string_view::npos : tab - start));
    if (tab == std::string_view::npos) break;
    start = tab + 1;
  }
  constexpr std::size_t kFields = 1 + kCriteoDenseFeatures + kCriteoTables;
  if (fields.size() != kFields) {
    throw InputError(fmt::format("{}: {} tab-separated fields, a Criteo line has {} (label, 13 integer, 26 "
                                 "categorical)",
                                 where, fields.size(), kFields));
  }
  if (fields[0] != "0" && fields[0] != "1") {
    throw InputError(fmt::format("{}: label '{}' is not 0 or 1", where, fields[0]));
  }
  for (std::size_t j = 0; j < kCriteoDenseFeatures; ++j) {
    const std::string_view f = fields[1 + j];
    long long x = 0;
    if (!f.empty()) {
      const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), x);
      if (ec != std::errc() || end != f.data() + f.size()) {
        throw InputError(fmt::format("{}: integer feature I{} '{}' is not an integer", where, j + 1, f));
      }
    }
    out[j] = static_cast<float>(std::log1p(static_cast<double>(std::max(x, 0LL))));
  }
  for (std::size_t t = 0; t < kCriteoTables; ++t) {
    const std::string_view f = fields[1 + kCriteoDenseFeatures + t];
    unsigned long long v = 0;
    if (!f.empty()) {
      const auto [end, ec] = std::from_chars(f.data(), f.data() + f.size(), v, 16);
      if (ec != std::errc() || end != f.data() + f.size() || f.size() > 16) {
        throw InputError(fmt::format("{}: categorical feature C{} '{}' is not a hexadecimal id of up to 16 digits",
                                     where, t + 1, f));
      }
    }
    out[kCriteoDenseFeatures + t] = static_cast<float>(v % rows);  // rows <= 2^24: exact as a float
  }
  return fields[0] == "1" ? 1 : 0;
}

}  // namespace

namespace {
struct Samples {
  std::vector<float> features;  // [labels.size(), kStride]
  std::vector<int> labels;
  std::int64_t lines = 0;  // lines read
};

// The lines [first, first + count) of `path` (count -1: to the end), parsed. Throws as read_criteo.
Samples read_lines(const std::string& path, const DlrmShape& shape, std::int64_t first, std::int64_t count) {
  if (shape.dense_features != kCriteoDenseFeatures || shape.tables != kCriteoTables || shape.lookups != 1) {
    throw InputError(fmt::format("--raw-data-file {}: Criteo's lines have 13 integer and 26 categorical features, "
                                 "one id each; the model has --dense-features {}, --tables {}, --lookups {}",
                                 path, shape.dense_features, shape.tables, shape.lookups));
  }
  check_dlrm_shape(shape);
  std::ifstream f(path);
  if (!f) throw InputError(fmt::format("--raw-data-file {}: cannot open", path));
  Samples out;
  for (std::string line; std::getline(f, line);) {
    ++out.lines;
    if (out.lines <= first) continue;
    if (count >= 0 && out.lines > first + count) break;
    out.features.resize(out.features.size() + CriteoDataset::kStride);
    out.labels.push_back(parse_line(line, shape.rows,
                                    out.features.data() + out.features.size() - CriteoDataset::kStride,
                                    fmt::format("{}:{}", path, out.lines)));
  }
  if (f.bad()) throw InputError(fmt::format("--raw-data-file {}: read failed", path));
  return out;
}
}  // namespace

std::unique_ptr<Dataset> read_criteo(const std::string& path, const DlrmShape& shape, std::int64_t first,
                                     std::int64_t count, const std::string& name) {
  Samples s = read_lines(path, shape, first, count);
  if (s.labels.empty()) {
    throw InputError(
        fmt::format("--raw-data-file {}: no line from line {} on ({} lines in the file)", path, first + 1, s.lines));
  }
  return std::make_unique<CriteoDataset>(std::move(s.features), std::move(s.labels), name);
}

CriteoSplit read_criteo_split(const std::string& path, const DlrmShape& shape, const std::string& name) {
  Samples s = read_lines(path, shape, 0, -1);
  const auto n = static_cast<std::int64_t>(s.labels.size());
  if (n < 2) {
    throw InputError(
        fmt::format("--raw-data-file {}: {} line(s); training and held-out samples need at least 2", path, n));
  }
  const std::int64_t train_n = n - std::max<std::int64_t>(1, n / 7);
  const auto cut = static_cast<std::ptrdiff_t>(train_n);
  const auto stride = static_cast<std::ptrdiff_t>(CriteoDataset::kStride);
  std::vector<float> test_features(s.features.begin() + cut * stride, s.features.end());
  std::vector<int> test_labels(s.labels.begin() + cut, s.labels.end());
  s.features.resize(static_cast<std::size_t>(cut * stride));
  s.labels.resize(static_cast<std::size_t>(cut));
  return {std::make_unique<CriteoDataset>(std::move(s.features), std::move(s.labels), name + "/train"),
          std::make_unique<CriteoDataset>(std::move(test_features), std::move(test_labels), name + "/test")};
}

}  // namespace dpbench
