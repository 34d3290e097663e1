#include "record/blas_core.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "workloads/cpu_kernels.hpp"

namespace dpbench {

namespace {
constexpr const char* kNoteVariable = "DPBENCH_BLAS_CORE_NOTE";

// The flags line of /proc/cpuinfo.
std::string cpu_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1);
  }
  return "";
}
}  // namespace

std::string preferred_blas_core(const std::string& chosen, const std::string& cpu_flags) {
  std::string core = chosen;
  std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
  if (core != "prescott") return "";
  const std::string flags = " " + cpu_flags + " ";
  auto has = [&](const char* flag) { return flags.find(std::string(" ") + flag + " ") != std::string::npos; };
  if (has("avx512f") && has("avx512bw") && has("avx512vl")) return "SkylakeX";
  if (has("avx2") && has("fma")) return "Haswell";
  return "";
}

void select_blas_core(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr || std::getenv("DPBENCH_KEEP_BLAS_CORE") != nullptr) return;
  const std::string target = preferred_blas_core(cpu::blas_core_name(), cpu_flags());
  if (target.empty()) return;
  setenv("OPENBLAS_CORETYPE", target.c_str(), 1);
  setenv(kNoteVariable,
         fmt::format("OPENBLAS_CORETYPE={} set by dpbench: OpenBLAS chose its Prescott kernels on a "
                     "CPU with {}",
                     target, target == "SkylakeX" ? "AVX-512" : "AVX2")
             .c_str(),
         1);
  execv("/proc/self/exe", argv);  // returns only on failure: then carry on with Prescott
}

std::string blas_core_note() {
  const char* note = std::getenv(kNoteVariable);
  return note != nullptr ? note : "";
}

}  // namespace dpbench
