#include "core/device.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {
std::atomic<CudaProbeFn> registered_probe{nullptr};
}  // namespace

void register_cuda_probe(CudaProbeFn probe) { registered_probe.store(probe); }

CudaProbe probe_cuda() {
  if (CudaProbeFn probe = registered_probe.load()) return probe();
  CudaProbe probe;
  probe.reason = "dpbench was built without CUDA";
  return probe;
}

DeviceChoice choose_device(std::optional<DeviceKind> requested, bool host_comm) {
  if (requested == DeviceKind::cpu) return {DeviceKind::cpu, ""};
  if (!requested && host_comm) {
    return {DeviceKind::cpu, "device auto: using cpu (--comm mpi and gloo move host buffers)"};
  }
  const CudaProbe probe = probe_cuda();
  if (requested == DeviceKind::cuda) {
    if (!probe.usable) throw InputError(fmt::format("--device cuda: no CUDA device: {}", probe.reason));
    return {DeviceKind::cuda, ""};
  }
  if (!probe.usable) return {DeviceKind::cpu, fmt::format("device auto: using cpu (no CUDA device: {})", probe.reason)};
  return {DeviceKind::cuda,
          fmt::format("device auto: using cuda ({} GPU(s), {})", probe.gpus.size(), probe.gpus.front().name)};
}

int ranks_on_device(int ranks, int devices, int device) { return (ranks - device + devices - 1) / devices; }

std::string nccl_version_text(int code) {
  if (code <= 0) return "";
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

bool cuda_build_runs_on(const std::string& built, int major, int minor) {
  const int device = 10 * major + minor;
  bool readable = false;
  std::size_t begin = 0;
  while (begin <= built.size()) {
    const std::size_t end = std::min(built.find_first_of(";,", begin), built.size());
    const std::string entry = built.substr(begin, end - begin);
    begin = end + 1;
    int arch = 0;
    char rest[16] = {0};
    const int fields = std::sscanf(entry.c_str(), "%d%15s", &arch, rest);
    if (fields < 1 || arch < 10) continue;
    const std::string suffix = fields == 2 ? rest : "";
    const bool specific = !suffix.empty() && suffix.front() == 'a';  // "90a", "90a-real"
    const std::string kind = suffix.substr(specific ? 1 : 0);
    if (!kind.empty() && kind != "-real" && kind != "-virtual") continue;
    readable = true;
    const bool sass = kind != "-virtual", ptx = kind != "-real";
    if (sass && (specific ? arch == device : arch / 10 == major && arch % 10 <= minor)) return true;
    if (ptx && !specific && arch <= device) return true;
  }
  return !readable;
}

bool nccl_allows_shared_gpu(const std::string& version) {
  int major = 0, minor = 0;
  if (std::sscanf(version.c_str(), "%d.%d", &major, &minor) != 2) return true;
  return major > 2 || (major == 2 && minor >= 30);
}

}  // namespace dpbench
