// Criteo's click logs as the DLRM workload reads them (the Kaggle Display Advertising Challenge's
// train.txt and the Terabyte logs' day_N files, as facebookresearch/dlrm's
// dlrm_data_pytorch.py reads raw text): one sample per line, 40 tab-separated fields: the label
// (0 or 1), 13 integer features, 26 categorical features of up to 16 hexadecimal digits (hashed
// ids). A field may be empty (missing). As DLRM with --max-ind-range: an integer feature x enters
// the bottom MLP as log(1 + max(x, 0)), a missing one as 0; a categorical feature's value v is
// the row v mod rows of its table, a missing one row 0. The shape must be Criteo's: 13 dense
// features, 26 tables, 1 lookup each.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "workloads/dataset.hpp"
#include "workloads/dlrm.hpp"

namespace dpbench {

inline constexpr std::size_t kCriteoDenseFeatures = 13;
inline constexpr std::size_t kCriteoTables = 26;

// The lines [first, first + count) of the Criteo file `path` (count -1: to the end) as a data set
// of `shape`'s samples (features() = 13 dense + 26 indices, labels 0/1), held in memory, named
// `name`. Throws InputError naming the file and the line (1-based) for a line that is not
// Criteo's (a field count other than 40, a label other than 0 or 1, an integer or a hexadecimal
// field that is not one), or naming the file when it cannot be read or holds no line in range;
// InputError naming the option when `shape` is not Criteo's.
std::unique_ptr<Dataset> read_criteo(const std::string& path, const DlrmShape& shape, std::int64_t first,
                                     std::int64_t count, const std::string& name);

// The whole file read once: its last seventh of lines (at least one; the Kaggle set's last day)
// held out as `test`, the rest `train`, named name + "/train" and "/test". Throws as read_criteo,
// and InputError naming the file when it holds fewer than 2 lines.
struct CriteoSplit {
  std::unique_ptr<Dataset> train, test;
};
CriteoSplit read_criteo_split(const std::string& path, const DlrmShape& shape, const std::string& name);

}  // namespace dpbench
