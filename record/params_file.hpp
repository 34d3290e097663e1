// A model's parameters as a file: raw little-endian float32 values in the model's parameter
// order (ParamView order), no header. `run --save-params PREFIX` writes PREFIX-<mode>.f32 and
// `run --init-params FILE` starts every mode from one; the PyTorch reference's start bundle uses
// the same layout (bench/reference/README.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace dpbench {

// Reads `path` (the value of `option`). Throws InputError naming the option and the path when it
// cannot be opened or read, or when its size is not a positive whole number of float32 values.
std::shared_ptr<const std::vector<float>> read_params_file(const std::string& path, const std::string& option);

// Writes `params` to `path` (the file `option` asked for). Throws InputError naming the option
// and the path when it cannot be written.
void write_params_file(const std::string& path, const std::vector<float>& params, const std::string& option);

}  // namespace dpbench
