// Helpers for error messages that name where a failing call was made, as nccl-tests' check macros
// do: "file.cu:42" and the called function's name. Plain C++ (usable from .cu files).
#pragma once

#include <cstring>
#include <string>

#include <fmt/format.h>

namespace dpbench {

// "/src/cuda/device_memory.cu", 42 -> "device_memory.cu:42"
inline std::string source_location(const char* file, int line) {
  const char* slash = std::strrchr(file, '/');
  return fmt::format("{}:{}", slash != nullptr ? slash + 1 : file, line);
}

// "cudaMalloc(&ptr, bytes)" -> "cudaMalloc"
inline std::string call_name(const char* call) {
  const std::string text(call);
  return text.substr(0, text.find('('));
}

}  // namespace dpbench
