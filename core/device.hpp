// Which device a run uses, and what CUDA this machine offers. `--device auto` picks CUDA when a
// device is usable and the build can train on it, otherwise CPU, and says which and why.
// A machine without a driver gets a one-line reason, never a raw CUDA error code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/names.hpp"

namespace dpbench {

struct GpuInfo {
  int index = 0;
  std::string name;
  std::int64_t total_memory_bytes = 0;
  std::string pci_bus_id;
};

struct CudaProbe {
  bool built_with_cuda = false;
  bool usable = false;      // every device answered and can run this build's kernels
  std::string reason;       // why not usable, in words
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // 0 when no driver
  std::vector<GpuInfo> gpus;
  int nccl_version_code = 0;  // NCCL_VERSION_CODE of the NCCL built in; 0 without NCCL
};

// Asks the CUDA runtime what is there, through the probe the CUDA target registers at start-up
// (cuda/register.hpp); without one, says that this build has no CUDA. Never throws.
CudaProbe probe_cuda();

using CudaProbeFn = CudaProbe (*)();
void register_cuda_probe(CudaProbeFn probe);

struct DeviceChoice {
  DeviceKind device = DeviceKind::cpu;
  std::string note;  // what was chosen and why, for the log and the result's warnings
};

// requested: cpu or cuda, or nullopt for auto (parse_device_request). host_comm: the run uses a
// backend that moves host buffers (--comm mpi or gloo), so auto means the CPU. Throws InputError
// for cuda when no CUDA device can be used ("--device cuda: no CUDA device: <reason>").
DeviceChoice choose_device(std::optional<DeviceKind> requested, bool host_comm = false);

// Placement of ranks on devices (rank r on device r % devices): how many of `ranks` run on
// `device`. More than one makes them virtual ranks. E.g. ranks_on_device(5, 2, 0) == 3.
int ranks_on_device(int ranks, int devices, int device);

// Whether NCCL `version` ("2.28.9", as nccl_version() gives it) lets two ranks of one
// communicator share a GPU: NCCL before 2.30 refuses it ("Duplicate GPU detected"). True when
// the version cannot be read (no NCCL: creating the communicator says so).
bool nccl_allows_shared_gpu(const std::string& version);

// Whether code built for CMake's CUDA_ARCHITECTURES list `built` ("90", "80;90-real" or "80,90-real",
// "90a-real", "86-virtual") runs on a GPU of compute capability major.minor, from the rules of
// the CUDA compatibility guide: machine code for sm_XY runs on X.Y' with Y' >= Y (an
// architecture-specific "a" target only on X.Y itself); PTX for compute_XY is compiled by the
// driver for any capability >= X.Y. An entry "NN" carries both, "-real" machine code only,
// "-virtual" PTX only. A list it cannot read ("native", "all", empty) counts as runnable: the
// first kernel launch tells. Decided from device properties, so probing creates no CUDA context.
bool cuda_build_runs_on(const std::string& built, int major, int minor);

// "X.Y.Z" of an NCCL_VERSION_CODE as ncclGetVersion reports it: X*10000 + Y*100 + Z since 2.9,
// X*1000 + Y*100 + Z before (22809 -> "2.28.9", 2708 -> "2.7.8"); "" when code <= 0.
std::string nccl_version_text(int code);

}  // namespace dpbench
