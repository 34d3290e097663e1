#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace fs = std::filesystem;

namespace {

std::string os_reason(int err) { return std::error_code(err, std::generic_category()).message(); }

// Closes fd on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

void write_file_atomic(const std::string& target_path, const void* bytes, std::size_t size, const std::string& label) {
  const fs::path target(target_path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmp = (dir / fmt::format(".{}.XXXXXX", target.filename().string())).string();
  Fd file{::mkstemp(tmp.data())};
  if (file.fd < 0) throw IoError(fmt::format("{}: cannot create a temporary file: {}", label, os_reason(errno)));
  auto fail = [&](const char* what) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("{}: {}: {}", label, what, os_reason(err)));
  };
  // mkstemp creates 0600; the file is as readable as any other file the user writes.
  const mode_t mask = ::umask(0);
  ::umask(mask);
  if (::fchmod(file.fd, 0666 & ~mask) != 0) fail("cannot set permissions");
  const char* data = static_cast<const char*>(bytes);
  std::size_t left = size;
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
