// Writing a file so that readers see either the old file or the whole new one, never a part:
// a temporary file in the target's directory is written, fsync'ed and renamed over the target,
// then the directory is fsync'ed. Used for result files (record/result_file.hpp) and
// checkpoints (train/checkpoint.hpp). Not for: checking where a file may go (the callers do).
#pragma once

#include <cstddef>
#include <string>

namespace dpbench {

// Writes `size` bytes at `data` to `target` atomically as described above. The target's directory
// must exist. On any failure the temporary file is removed, the target is left as it was, and
// IoError is thrown as "<label>: <what failed>: <the operating system's reason>".
void write_file_atomic(const std::string& target, const void* data, std::size_t size, const std::string& label);

}  // namespace dpbench
