#include "workloads/model_description.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "workloads/builtin_models.hpp"

namespace dpbench {
namespace {

using nlohmann::json;

// The value of `key` in object `j` (which `where` names), checked against `type`.
const json& field(const json& j, const std::string& where, const char* key, json::value_t type) {
  if (!j.is_object()) throw InputError(fmt::format("{}: expected an object", where));
  const auto it = j.find(key);
  if (it == j.end()) throw InputError(fmt::format("{}: missing field \"{}\"", where, key));
  const bool number = type == json::value_t::number_float;
  const bool count = type == json::value_t::number_unsigned;
  const bool ok = number  ? it->is_number()
                  : count ? it->is_number_unsigned() || (it->is_number_integer() && it->get<std::int64_t>() >= 0)
                          : it->type() == type;
  if (!ok) {
    const char* want = number ? "a number" : count ? "a non-negative integer" : json(type).type_name();
    throw InputError(fmt::format("{}.{}: expected {}", where, key, want));
  }
  return *it;
}

std::string text(const json& j, const std::string& where, const char* key) {
  return field(j, where, key, json::value_t::string).get<std::string>();
}
std::size_t count(const json& j, const std::string& where, const char* key) {
  return field(j, where, key, json::value_t::number_unsigned).get<std::size_t>();
}
// A finite, non-negative number.
double amount(const json& j, const std::string& where, const char* key) {
  const double v = field(j, where, key, json::value_t::number_float).get<double>();
  if (!std::isfinite(v) || v < 0) throw InputError(fmt::format("{}.{}: {} is not a finite number >= 0", where, key, v));
  return v;
}

// A shape: positive dimensions whose product fits in 2^62 elements; returns the product.
std::size_t shape_of(const json& j, const std::string& where, const char* key, std::vector<std::size_t>& out) {
  const json& a = field(j, where, key, json::value_t::array);
  std::size_t size = 1;
  for (std::size_t d = 0; d < a.size(); ++d) {
    if (!a[d].is_number_integer() || a[d].get<std::int64_t>() <= 0) {
      throw InputError(fmt::format("{}.{}[{}]: a dimension must be a positive integer", where, key, d));
    }
    const std::size_t dim = a[d].get<std::size_t>();
    if (size > (std::size_t{1} << 62) / dim) {
      throw InputError(fmt::format("{}.{}: the shape's size overflows (more than 2^62 elements)", where, key));
    }
    size *= dim;
    out.push_back(dim);
  }
  return size;
}

void parse_params(const json& j, const std::string& where, ModelDescription& d) {
  const json& params = field(j, where, "params", json::value_t::array);
  if (params.empty()) throw InputError(fmt::format("{}.params: a model needs at least one parameter tensor", where));
  std::size_t total = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::string w = fmt::format("{}.params[{}]", where, i);
    DescribedParam p;
    p.name = text(params[i], w, "name");
    p.size = shape_of(params[i], w, "shape", p.shape);
    if (const auto e = params[i].find("embedding"); e != params[i].end()) {
      if (!e->is_boolean()) throw InputError(fmt::format("{}.embedding: expected a boolean", w));
      p.embedding = e->get<bool>();
    }
    if (total > (std::size_t{1} << 62) - p.size) {
      throw InputError(fmt::format("{}: the parameter count overflows (more than 2^62 elements)", w));
    }
    total += p.size;
    d.params.push_back(std::move(p));
  }
}

void parse_layers(const json& j, const std::string& where, ModelDescription& d) {
  const json& layers = field(j, where, "layers", json::value_t::array);
  if (layers.empty()) throw InputError(fmt::format("{}.layers: a model needs at least one layer", where));
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string w = fmt::format("{}.layers[{}]", where, i);
    DescribedLayer l;
    l.name = text(layers[i], w, "name");
    l.type = text(layers[i], w, "type");
    l.forward_us = amount(layers[i], w, "forward_us_per_sample");
    l.backward_us = amount(layers[i], w, "backward_us_per_sample");
    l.forward_flops = amount(layers[i], w, "forward_flops_per_sample");
    l.backward_flops = amount(layers[i], w, "backward_flops_per_sample");
    d.layers.push_back(std::move(l));
  }
}

// Every parameter finalised exactly once; every layer named exists.
void parse_backward(const json& j, const std::string& where, ModelDescription& d) {
  const json& steps = field(j, where, "backward", json::value_t::array);
  std::vector<int> seen(d.params.size(), 0);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::string w = fmt::format("{}.backward[{}]", where, s);
    BackwardStep step;
    step.layer = count(steps[s], w, "layer");
    if (step.layer >= d.layers.size()) {
      throw InputError(fmt::format("{}.layer: {} is not a layer (the model has {})", w, step.layer, d.layers.size()));
    }
    const json& ready = field(steps[s], w, "grads_ready", json::value_t::array);
    for (const json& p : ready) {
      if (!p.is_number_integer() || p.get<std::int64_t>() < 0 || p.get<std::size_t>() >= d.params.size()) {
        throw InputError(fmt::format("{}.grads_ready: {} is not a parameter index (the model has {})", w, p.dump(),
                                     d.params.size()));
      }
      const std::size_t idx = p.get<std::size_t>();
      if (seen[idx]++) throw InputError(fmt::format("{}.grads_ready: parameter {} is finalised twice", w, idx));
      step.grads_ready.push_back(idx);
    }
    d.backward.push_back(std::move(step));
  }
  const auto missing = std::find(seen.begin(), seen.end(), 0);
  if (missing != seen.end()) {
    throw InputError(fmt::format("{}.backward: parameter {} ({}) never becomes ready", where, missing - seen.begin(),
                                 d.params[missing - seen.begin()].name));
  }
}

}  // namespace

std::size_t ModelDescription::num_params() const {
  std::size_t n = 0;
  for (const auto& p : params) n += p.size;
  return n;
}

std::size_t ModelDescription::output_features() const {
  std::size_t n = 1;
  for (std::size_t d : output_shape) n *= d;
  return n;
}

std::vector<std::size_t> ModelDescription::grad_ready_order() const {
  std::vector<std::size_t> order;
  for (const auto& s : backward) order.insert(order.end(), s.grads_ready.begin(), s.grads_ready.end());
  return order;
}

double ModelDescription::sum_over_layers(double DescribedLayer::*field) const {
  double total = 0;
  for (const auto& l : layers) total += l.*field;
  return total;
}

ModelDescription parse_model_description(const json& j, const std::string& origin) {
  const std::string& w = origin;
  const json& schema = field(j, w, "schema", json::value_t::object);
  if (text(schema, w + ".schema", "name") != "dpbench-model" || count(schema, w + ".schema", "version") != 1) {
    throw InputError(fmt::format("{}: not a dpbench-model version 1 description (schema {})", w, schema.dump()));
  }
  ModelDescription d;
  d.origin = origin;
  d.name = text(j, w, "name");
  parse_params(j, w, d);
  parse_layers(j, w, d);
  parse_backward(j, w, d);
  const json& input = field(j, w, "input", json::value_t::object);
  shape_of(input, w + ".input", "shape", d.input_shape);
  d.input_bytes = count(input, w + ".input", "bytes_per_sample");
  const json& output = field(j, w, "output", json::value_t::object);
  shape_of(output, w + ".output", "shape", d.output_shape);
  d.output_bytes = count(output, w + ".output", "bytes_per_sample");
  d.label_bytes = count(j, w, "label_bytes_per_sample");
  d.activation_bytes = count(j, w, "activation_bytes_per_sample");
  const json& device = field(j, w, "device", json::value_t::object);
  d.device_name = fmt::format("{} ({}, {} threads)", text(device, w + ".device", "name"),
                              text(device, w + ".device", "kind"), count(device, w + ".device", "threads"));
  const json& source = field(j, w, "source", json::value_t::object);
  d.source_module = text(source, w + ".source", "module");
  d.source_how = text(source, w + ".source", "how");
  if (const auto n = j.find("num_params"); n != j.end() && (!n->is_number_integer() || *n != d.num_params())) {
    throw InputError(fmt::format("{}.num_params: {} but the parameter shapes hold {}", w, n->dump(), d.num_params()));
  }
  return d;
}

const std::vector<DeviceProfile>& all_device_profiles() {
  static const std::vector<DeviceProfile> profiles = {
      {"described", 0, 10e9, "the description's own times; optimizer at an assumed 10 GB/s of host memory bandwidth"},
      {"h100", 160e12, 3.35e12,
       "H100 SXM: 160 TFLOP/s, dpbench_gpu_step's measured TF32 rate on the MLP 784-4096-4096-10 at batch 1024 "
       "(docs/gpu.md, 158.8-162.3); HBM3 3.35 TB/s (datasheet)"},
      {"h100-datasheet", 494.7e12, 3.35e12, "H100 SXM datasheet: dense TF32 494.7 TFLOP/s, HBM3 3.35 TB/s (peaks)"},
      {"a100-datasheet", 156e12, 2.039e12, "A100 80GB SXM datasheet: dense TF32 156 TFLOP/s, HBM2e 2.04 TB/s (peaks)"},
  };
  return profiles;
}

std::vector<std::string> device_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : all_device_profiles()) names.push_back(p.name);
  return names;
}

const DeviceProfile& device_profile(const std::string& name) {
  for (const auto& p : all_device_profiles()) {
    if (p.name == name) return p;
  }
  std::string names;
  for (const auto& n : device_profile_names()) names += (names.empty() ? "" : ", ") + n;
  throw InputError(fmt::format("--device-profile {}: unknown (known: {})", name, names));
}

double profile_time_scale(const ModelDescription& d, const DeviceProfile& profile) {
  if (profile.flops_per_s <= 0) return 1.0;
  double flops = 0, us = 0;
  for (const auto& l : d.layers) {
    if (l.forward_flops + l.backward_flops <= 0) continue;
    flops += l.forward_flops + l.backward_flops;
    us += l.forward_us + l.backward_us;
  }
  if (flops <= 0 || us <= 0) {
    throw InputError(
        fmt::format("--device-profile {}: {} describes no FLOPs to rescale its times by", profile.name, d.origin));
  }
  return flops / profile.flops_per_s / (us * 1e-6);
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& m : builtin_model_texts()) names.emplace_back(m.name);
  std::sort(names.begin(), names.end());
  return names;
}

ModelDescription load_model_description(const std::string& name_or_file) {
  for (const auto& m : builtin_model_texts()) {
    if (name_or_file == m.name) {
      return parse_model_description(json::parse(m.json), fmt::format("built-in model {}", m.name));
    }
  }
  std::ifstream in(name_or_file);
  if (!in) {
    std::string names;
    for (const auto& n : builtin_model_names()) names += (names.empty() ? "" : ", ") + n;
    throw InputError(
        fmt::format("--model {}: neither a built-in model ({}) nor a readable description file", name_or_file, names));
  }
  std::stringstream buf;
  buf << in.rdbuf();
  json j;
  try {
    j = json::parse(buf.str());
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("--model {}: not JSON (byte {})", name_or_file, e.byte));
  }
  return parse_model_description(j, name_or_file);
}

}  // namespace dpbench
