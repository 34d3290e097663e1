// Helpers shared by the CUDA test suites: a fixture that skips without a usable GPU and gives
// each test a stream, random inputs, a device buffer for test data (filled with 0xFF bytes
// when not copied from the host, so that an output a kernel never wrote shows as NaN or -1) and a
// CUDA error check. Built with the CUDA target only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/device.hpp"

#include <cuda_runtime.h>

namespace dpbench::testing {

inline void cuda_ok(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
  }
}

// n elements of T on the device, freed with the object.
template <typename T>
class DeviceBuffer {
 public:
  // Every byte 0xFF: NaN as float and double, -1 as int, so an output never written shows.
  explicit DeviceBuffer(std::size_t n) : n_(n) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()), "cudaMalloc");
    cuda_ok(cudaMemset(ptr_, 0xFF, bytes()), "cudaMemset");
  }
  explicit DeviceBuffer(const std::vector<T>& host) : n_(host.size()) {
    cuda_ok(cudaMalloc(reinterpret_cast<void**>(&ptr_), bytes()), "cudaMalloc");
    cuda_ok(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  // Waits for all work on the device (so a kernel fault is reported here), then copies back.
  std::vector<T> to_host() const {
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> host(n_);
    cuda_ok(cudaMemcpy(host.data(), ptr_, bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return host;
  }
  // Overwrites the buffer with host (host.size() must be n).
  void from_host(const std::vector<T>& host) {
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    cuda_ok(cudaMemcpy(ptr_, host.data(), bytes(), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }

 private:
  std::size_t bytes() const { return std::max<std::size_t>(n_, 1) * sizeof(T); }
  T* ptr_ = nullptr;
  std::size_t n_ = 0;
};

// Every test here needs a usable CUDA device: SetUp skips the test otherwise, with the reason,
// and gives each test its own stream.
class CudaStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const CudaProbe probe = probe_cuda();
    if (!probe.usable) GTEST_SKIP() << "no CUDA device: " << probe.reason;
    cuda_ok(cudaSetDevice(probe.gpus.front().index), "cudaSetDevice");
    cudaStream_t stream = nullptr;
    cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
    stream_ = stream;
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  void* stream() const { return stream_; }

  void* stream_ = nullptr;  // cudaStream_t
};

// n normal floats with the given spread and mean, from seed.
inline std::vector<float> random_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f, float offset = 0.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(offset, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace dpbench::testing
