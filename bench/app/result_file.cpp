#include "bench/app/result_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

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

// Closes fd on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

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
  const fs::path target(check_result_path(path, option));
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / fmt::format(".{}.XXXXXX", target.filename().string())).string();
  Fd file{::mkstemp(tmp.data())};
  if (file.fd < 0) throw IoError(fmt::format("{} {}: cannot create a temporary file: {}", option, path, os_reason(errno)));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{} {}: {}: {}", option, path, what, os_reason(err)));
  };
  // mkstemp creates 0600; a result file is as readable as any other file the user writes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(file.fd, 0666 & ~mask) != 0) fail("cannot set permissions");
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(file.fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    data += n;
    left -= static_cast<std::size_t>(n);
  }
  if (::fsync(file.fd) != 0) fail("fsync failed");
  const int fd = file.fd;
  file.fd = -1;
  if (::close(fd) != 0) fail("close failed");
  if (::rename(tmp.c_str(), target.c_str()) != 0) fail("cannot rename into place");
  Fd directory{::open(dir.c_str(), O_RDONLY | O_DIRECTORY)};
  if (directory.fd >= 0) ::fsync(directory.fd);  // best effort: the file itself is complete
}

}  // namespace dpbench
