// Test fixtures shared by the suites: temporary directories and small fake Fashion-MNIST IDX
// files written with zlib, valid or broken on purpose.
#pragma once

#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace dpbench::testing {

namespace fs = std::filesystem;

// The whole of a text file ("" when it cannot be read).
// A TCP port on 127.0.0.1 that the kernel reported free just now (bound to port 0, then
// released), for a job started by hand with MASTER_PORT; another process may still take it
// first. Throws std::runtime_error when no socket can be bound.
inline int free_tcp_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (fd >= 0) close(fd);
  if (!ok) throw std::runtime_error("free_tcp_port: cannot bind a socket on 127.0.0.1");
  return ntohs(addr.sin_port);
}

// A shell command that starts `commands` in the background together, waits for all of them and
// exits with the first non-zero exit code in their order (0 when all succeed): the ranks or
// agents of one job started by hand.
inline std::string in_background(const std::vector<std::string>& commands) {
  std::string line = "(";
  for (std::size_t i = 0; i < commands.size(); ++i) line += commands[i] + " & p" + std::to_string(i) + "=$!; ";
  line += "rc=0; ";
  for (std::size_t i = 0; i < commands.size(); ++i) {
    line += "wait $p" + std::to_string(i) + "; r=$?; [ $rc -eq 0 ] && rc=$r; ";
  }
  return line + "exit $rc)";
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs a shell command line, capturing stdout and stderr separately.
inline Outcome shell(const std::string& command, const fs::path& scratch) {
  const fs::path out = scratch / "stdout.txt", err = scratch / "stderr.txt";
  const std::string line = command + " >" + out.string() + " 2>" + err.string();
  const int status = std::system(line.c_str());
  Outcome o;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  o.out = slurp(out);
  o.err = slurp(err);
  return o;
}

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dpbench-test-data-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline void append_be32(std::vector<std::uint8_t>& v, std::uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8) v.push_back(static_cast<std::uint8_t>(x >> shift));
}

inline std::vector<std::uint8_t> idx_file(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                          const std::vector<std::uint8_t>& payload) {
  std::vector<std::uint8_t> v;
  append_be32(v, magic);
  for (std::uint32_t d : dims) append_be32(v, d);
  v.insert(v.end(), payload.begin(), payload.end());
  return v;
}

inline void write_gz(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  if (f == nullptr) throw std::runtime_error("cannot create " + path.string());
  const int written = gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  if (gzclose(f) != Z_OK || written != static_cast<int>(bytes.size())) {
    throw std::runtime_error("cannot write " + path.string());
  }
}

// Pixel k of image i in the fake files.
inline std::uint8_t fake_pixel(std::size_t i, std::size_t k) {
  return static_cast<std::uint8_t>((i * 37 + k * 7) % 256);
}

// Writes a complete fake Fashion-MNIST directory: n_train and n_test 28x28 images with labels
// i % 10.
inline void write_fake_fashion_mnist(const fs::path& dir, std::uint32_t n_train, std::uint32_t n_test) {
  for (const auto& [split, n] : {std::pair<std::string, std::uint32_t>{"train", n_train},
                                 std::pair<std::string, std::uint32_t>{"t10k", n_test}}) {
    std::vector<std::uint8_t> px(static_cast<std::size_t>(n) * 28 * 28), labels(n);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t k = 0; k < 28 * 28; ++k) px[i * 28 * 28 + k] = fake_pixel(i, k);
      labels[i] = static_cast<std::uint8_t>(i % 10);
    }
    write_gz(dir / (split + "-images-idx3-ubyte.gz"), idx_file(0x803, {n, 28, 28}, px));
    write_gz(dir / (split + "-labels-idx1-ubyte.gz"), idx_file(0x801, {n}, labels));
  }
}

}  // namespace dpbench::testing
