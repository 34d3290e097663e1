// Tests of bench/micro/dpbench_collectives across processes: under mpirun it measures Open MPI's
// and gloo's all-reduces (ring, ring-chunked, halving-doubling) at the job's process count, each
// checked on exact inputs (counter `wrong`), with nccl-tests' algbw/busbw; rank 0 alone writes the
// output file; without mpirun the thread-level benchmarks are listed and the process ones are not.
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/gloo_comm.hpp"
#include "core/mpi_comm.hpp"
#include "tests/fixtures.hpp"

namespace dpbench {
namespace {

using namespace dpbench::testing;  // NOLINT: test fixtures

#ifdef DPBENCH_COLLECTIVES_BINARY
constexpr const char* kCollectives = DPBENCH_COLLECTIVES_BINARY;
#else
constexpr const char* kCollectives = nullptr;
#endif

int run(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(CollectivesBench, ProcessAllReducesAreCheckedAndCounted) {
  if (kCollectives == nullptr) GTEST_SKIP() << "built without the benchmarks (DPBENCH_BUILD_BENCHMARKS=OFF)";
  if (!mpi_built()) GTEST_SKIP() << "built without MPI (apt-get install libopenmpi-dev openmpi-bin)";
  ASSERT_EQ(std::system("command -v mpirun >/dev/null"), 0) << "built with MPI but mpirun is not on PATH";
  TempDir tmp;
  const std::string out = (tmp.path() / "collectives.json").string();
  // 3 processes: a world size that is not a power of two (halving-doubling's binary blocks) and
  // a busbw factor 2(p-1)/p that is not 1.
  const int p = 3;
  ASSERT_EQ(
      run("OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --bind-to none --oversubscribe -np 3 " +
          std::string(kCollectives) + " --benchmark_filter='/bytes:(4|2048|1048576)/' --benchmark_out=" + out +
          " --benchmark_out_format=json >/dev/null 2>&1"),
      0);
  const nlohmann::json doc = nlohmann::json::parse(slurp(out));  // one writer: whole JSON
  EXPECT_EQ(doc["context"]["processes"], "3");
  std::set<std::string> expected_names = {"BM_AllReduceMpi"};
  if (gloo_built()) {
    expected_names.insert({"BM_AllReduceGlooRing", "BM_AllReduceGlooRingChunked", "BM_AllReduceGlooHalvingDoubling"});
  }
  std::map<std::string, std::set<long>> seen;
  for (const auto& b : doc["benchmarks"]) {
    const std::string name = b["name"];
    SCOPED_TRACE(name);
    ASSERT_FALSE(b.value("error_occurred", false)) << b.value("error_message", "");
    const std::string base = name.substr(0, name.find('/'));
    EXPECT_NE(name.find("/ranks:3/"), std::string::npos);
    const auto at = name.find("/bytes:") + 7;
    const long bytes = std::stol(name.substr(at, name.find('/', at) - at));
    seen[base].insert(bytes);
    EXPECT_EQ(b["wrong"].get<double>(), 0.0);
    const double algbw = b["algbw"];
    ASSERT_GT(algbw, 0.0);
    EXPECT_NEAR(b["busbw"].get<double>(), algbw * 2.0 * (p - 1) / p, 1e-9 * algbw);
    // algbw is bytes over the mean manual time (microseconds here).
    const double seconds = b["real_time"].get<double>() * 1e-6;
    EXPECT_NEAR(algbw, static_cast<double>(bytes) / seconds / 1e9, 1e-3 * algbw);
  }
  std::set<std::string> names;
  for (const auto& [base, sizes] : seen) {
    names.insert(base);
    EXPECT_EQ(sizes, (std::set<long>{4, 2048, 1048576})) << base;
  }
  EXPECT_EQ(names, expected_names);
}

TEST(CollectivesBench, WithoutMpirunTheThreadLevelBenchmarksRun) {
  if (kCollectives == nullptr) GTEST_SKIP() << "built without the benchmarks (DPBENCH_BUILD_BENCHMARKS=OFF)";
  TempDir tmp;
  const std::string list = (tmp.path() / "list.txt").string();
  ASSERT_EQ(run(std::string(kCollectives) + " --benchmark_list_tests > " + list + " 2>&1"), 0);
  const std::string names = slurp(list);
  EXPECT_NE(names.find("BM_AllReduce/ranks:2/bytes:4/"), std::string::npos);
  EXPECT_NE(names.find("BM_RootPush/ranks:8/"), std::string::npos);
  EXPECT_EQ(names.find("BM_AllReduceMpi"), std::string::npos);
  EXPECT_EQ(names.find("BM_AllReduceGloo"), std::string::npos);
}

}  // namespace
}  // namespace dpbench
