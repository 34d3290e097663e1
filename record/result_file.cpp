#include "record/result_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/atomic_file.hpp"
#include "core/error.hpp"

namespace dpbench {

namespace fs = std::filesystem;

namespace {

std::string os_reason(int err) { return std::error_code(err, std::generic_category()).message(); }

// What a non-regular file is, in words.
std::string kind_of(const struct stat& st) {
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) return "a device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string check_result_path(const std::string& path, const std::string& option) {
  if (path.empty()) throw InputError(fmt::format("{}: empty path", option));
  fs::path target(path);
  std::error_code ec;
  // Follow symbolic links to the file that will be replaced (a dangling link names a new file).
  for (int hops = 0; fs::is_symlink(fs::symlink_status(target, ec)); ++hops) {
    if (hops == 40) throw InputError(fmt::format("{} {}: too many levels of symbolic links", option, path));
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw InputError(fmt::format("{} {}: cannot read the link: {}", option, path, ec.message()));
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      throw InputError(fmt::format("{} {}: is {}; give a file path", option, path, kind_of(st)));
    }
  } else if (errno != ENOENT) {
    throw InputError(fmt::format("{} {}: {}", option, path, os_reason(errno)));
  }
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  fs::create_directories(dir, ec);
  if (ec) throw InputError(fmt::format("{} {}: cannot create {}: {}", option, path, dir.string(), ec.message()));
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    throw InputError(fmt::format("{} {}: cannot write in {}: {}", option, path, dir.string(), os_reason(errno)));
  }
  return target.string();
}

void write_result_file(const std::string& path, const std::string& text, const std::string& option) {
  write_file_atomic(check_result_path(path, option), text.data(), text.size(), fmt::format("{} {}", option, path));
}

void write_json_atomic(const std::string& path, const nlohmann::json& doc) {
  write_result_file(path, doc.dump(2) + "\n");
}

}  // namespace dpbench
