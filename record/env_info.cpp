#include "record/env_info.hpp"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include "record/blas_core.hpp"
#include "core/build_info.hpp"
#include "core/device.hpp"
#include "core/mpi_comm.hpp"
#include "workloads/cpu_kernels.hpp"

namespace dpbench {

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown";
}
}  // namespace

nlohmann::json collect_env() {
  nlohmann::json env;
  env["dpbench_version"] = build_info::kVersion;
  env["git_commit"] = build_info::kGitCommit;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  env["host"] = host;
  struct utsname u {};
  if (uname(&u) == 0) env["os"] = std::string(u.sysname) + " " + u.release + " " + u.machine;
  env["cpu_model"] = cpu_model();
  env["cpu_cores"] = std::thread::hardware_concurrency();
  env["compiler"] = build_info::kCompiler;
  env["cxx_flags"] = build_info::kCxxFlags;
  env["build_type"] = build_info::kBuildType;
  env["blas"] = cpu::blas_config();
  env["blas_core"] = cpu::blas_core_name();
  if (!blas_core_note().empty()) env["blas_core_note"] = blas_core_note();

  const CudaProbe cuda = probe_cuda();
  nlohmann::json cj;
  cj["built_with_cuda"] = cuda.built_with_cuda;
  cj["usable"] = cuda.usable;
  if (!cuda.usable) cj["reason"] = cuda.reason;
  cj["runtime_version"] = cuda.runtime_version;
  cj["driver_version"] = cuda.driver_version;
  env["cuda"] = cj;
  env["gpus"] = nlohmann::json::array();
  for (const auto& g : cuda.gpus) {
    env["gpus"].push_back(
        {{"index", g.index}, {"name", g.name}, {"memory_bytes", g.total_memory_bytes}, {"pci_bus_id", g.pci_bus_id}});
  }
  env["nccl_version"] = cuda.nccl_version_code > 0 ? nlohmann::json(cuda.nccl_version_code) : nlohmann::json(nullptr);
  // The library this binary was built with (MPI_Get_library_version may run before MPI_Init).
  env["mpi"] = mpi_built() ? nlohmann::json(MpiRuntime::version()) : nlohmann::json();
  return env;
}

}  // namespace dpbench
