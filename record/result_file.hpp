// Where a result file goes, checked before any training starts, and how it is written. Not for:
// what goes into it (result_json.hpp).
//
// The target (--out) may be absent or a regular file, which is replaced. A symbolic link is
// followed: its final target must be absent or a regular file, and that file is replaced while
// the link stays. Anything else (a directory, a device such as /dev/full, a FIFO, a socket) is
// refused. A missing parent directory is created. The write is atomic: a temporary file in the
// target's directory is written, fsync'ed and renamed over the target, then the directory is
// fsync'ed; on any failure the temporary file is removed and the target is left as it was.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace dpbench {

// Checks `path` (the value of `option`) before a run: creates its parent directory, refuses a
// non-regular target and an unwritable directory. Returns the file that will be written (the
// link's target for a symbolic link). Throws InputError naming the option, the path and why.
std::string check_result_path(const std::string& path, const std::string& option = "--out");

// Writes `text` to `path` as described above, after check_result_path(path). Throws InputError
// as check_result_path does, and IoError naming the path and the operating system's reason when
// the write, fsync or rename fails (a full disk, say).
void write_result_file(const std::string& path, const std::string& text, const std::string& option = "--out");

// Writes the JSON document `doc` to `path` as write_result_file does, indented by 2 with a final
// newline. Throws as write_result_file.
void write_json_atomic(const std::string& path, const nlohmann::json& doc);

}  // namespace dpbench
