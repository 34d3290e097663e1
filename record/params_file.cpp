#include "record/params_file.hpp"

#include <fstream>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

std::shared_ptr<const std::vector<float>> read_params_file(const std::string& path, const std::string& option) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw InputError(fmt::format("{} {}: cannot open", option, path));
  const auto bytes = static_cast<std::size_t>(f.tellg());
  if (bytes == 0 || bytes % sizeof(float) != 0) {
    throw InputError(fmt::format("{} {}: {} bytes is not a whole number of float32 values", option, path, bytes));
  }
  auto params = std::make_shared<std::vector<float>>(bytes / sizeof(float));
  f.seekg(0);
  f.read(reinterpret_cast<char*>(params->data()), static_cast<std::streamsize>(bytes));
  if (!f) throw InputError(fmt::format("{} {}: read failed", option, path));
  return params;
}

void write_params_file(const std::string& path, const std::vector<float>& params, const std::string& option) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(params.data()), static_cast<std::streamsize>(params.size() * sizeof(float)));
  if (!f) throw InputError(fmt::format("{}: cannot write {}", option, path));
}

}  // namespace dpbench
