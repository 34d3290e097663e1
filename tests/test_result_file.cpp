// Tests of where `dpbench run --out` may write (record/result_file.hpp): a path that cannot
// take a result file is refused before any training, with exit code 2 and the path left as it
// was; a symbolic link is written through; a write that fails midway is exit code 3, names the
// reason, and leaves the previous file and no temporary file behind.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "tests/fixtures.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

struct ResultFileOutcome {
  int exit_code = -1;
  std::string err;
};

class ResultFile : public ::testing::Test {
 protected:
  // `dpbench run` on a tiny synthetic job writing to `out`, after `prefix` (shell words run
  // first in the same shell, e.g. limits). Not quiet: a training line on stderr shows that
  // training started.
  ResultFileOutcome run(const fs::path& out, const std::string& prefix = "") {
    const fs::path err = tmp_.path() / "stderr.txt";
    const std::string line =
        prefix + std::string(DPBENCH_BINARY) +
        " run --data synthetic --input 16 --synthetic-samples 600 --hidden 8 --epochs 1 --batch-size 32 "
        "--ranks 2 --mode allreduce --out '" +
        out.string() + "' >/dev/null 2>" + err.string();
    const int status = std::system(("bash -c \"" + line + "\"").c_str());
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(err)};
  }
  // Files in `dir` whose name starts with a dot: where a temporary file would be left.
  static int hidden_files(const fs::path& dir) {
    int n = 0;
    for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename().string().rfind('.', 0) == 0;
    return n;
  }
  TempDir tmp_;
};

TEST_F(ResultFile, DirectoryIsRefusedBeforeTraining) {
  const fs::path dir = tmp_.path() / "a-directory";
  fs::create_directories(dir);
  const ResultFileOutcome o = run(dir);
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("is a directory"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("training"), std::string::npos) << "the check came after training:\n" << o.err;
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST_F(ResultFile, FifoIsRefusedAndKept) {
  const fs::path fifo = tmp_.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const ResultFileOutcome o = run(fifo);
  EXPECT_EQ(o.exit_code, 2) << o.err;
  EXPECT_NE(o.err.find("is a FIFO"), std::string::npos) << o.err;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST_F(ResultFile, SymlinkIsWrittenThroughAndStays) {
  const fs::path target = tmp_.path() / "results" / "latest-target.json";
  fs::create_directories(target.parent_path());
  std::ofstream(target) << "old";
  const fs::path link = tmp_.path() / "latest.json";
  fs::create_symlink(target, link);
  const ResultFileOutcome o = run(link);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_NE(slurp(target).find("\"schema\""), std::string::npos);
  EXPECT_EQ(hidden_files(target.parent_path()), 0);
}

TEST_F(ResultFile, DanglingSymlinkCreatesItsTarget) {
  const fs::path target = tmp_.path() / "new-target.json";
  const fs::path link = tmp_.path() / "link.json";
  fs::create_symlink(target, link);
  const ResultFileOutcome o = run(link);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_TRUE(fs::is_regular_file(target));
}

TEST_F(ResultFile, MissingParentDirectoriesAreCreated) {
  const fs::path out = tmp_.path() / "a" / "b" / "result.json";
  const ResultFileOutcome o = run(out);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_TRUE(fs::is_regular_file(out));
  // Created with the user's umask, not mkstemp's 0600.
  struct stat st {};
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);
}

// A file-size limit makes the write fail midway (EFBIG), as a full disk would (ENOSPC).
TEST_F(ResultFile, FailedWriteIsAnIoErrorAndKeepsThePreviousFile) {
  const fs::path out = tmp_.path() / "result.json";
  std::ofstream(out) << "previous result";
  const ResultFileOutcome o = run(out, "trap '' XFSZ; ulimit -f 1; ");
  EXPECT_EQ(o.exit_code, 3) << o.err;
  EXPECT_NE(o.err.find(out.string()), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("File too large"), std::string::npos) << o.err;
  EXPECT_EQ(slurp(out), "previous result");
  EXPECT_EQ(hidden_files(tmp_.path()), 0);
}

}  // namespace
}  // namespace dpbench
