// A described model: what dpbench knows of a model it does not train for real (ResNet-50,
// BERT-large, GPT-2, a user's module), as models/describe.py observes it in PyTorch. The JSON
// format is results/schema/dpbench-model.schema.json; ASTRA-sim's workload files and MLCommons
// Chakra traces are its relatives: per layer, forward and backward compute, and the gradients
// backward makes ready, in the order it happens. Replayed by workloads/replay_model.hpp; read by
// the memory model and the projection. Not for: the built-in MLP and CNN, which train for real
// (their descriptions ship too, for the projection and for checking the replay against them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace dpbench {

// One parameter tensor in registration order (named_parameters()).
struct DescribedParam {
  std::string name;                // "layer1.0.conv1.weight"
  std::vector<std::size_t> shape;  // [64, 64, 1, 1]
  std::size_t size = 0;            // elements: the product of shape
  bool embedding = false;          // an embedding table (nn.Embedding / EmbeddingBag weight)
};

// One call of a leaf module in forward order; times and FLOPs per sample on the description's
// device (microseconds; multiply-adds count 2).
struct DescribedLayer {
  std::string name, type;  // "layer1.0.conv1", "Conv2d"
  double forward_us = 0, backward_us = 0;
  double forward_flops = 0, backward_flops = 0;
};

// One step of backward as observed: the layer autograd reached, then the parameters whose
// gradients became final before it reached the next one.
struct BackwardStep {
  std::size_t layer = 0;
  std::vector<std::size_t> grads_ready;  // parameter indices
};

struct ModelDescription {
  std::string name;    // "resnet50"
  std::string origin;  // where it was read: "built-in resnet50" or the file's path
  std::vector<DescribedParam> params;
  std::vector<DescribedLayer> layers;
  std::vector<BackwardStep> backward;
  std::vector<std::size_t> input_shape;   // per sample, e.g. [3, 224, 224] or [1024] tokens
  std::size_t input_bytes = 0;            // per sample
  std::size_t label_bytes = 0;            // per sample
  std::vector<std::size_t> output_shape;  // per sample, e.g. [1000] or [1024, 50257]
  std::size_t output_bytes = 0;           // per sample
  std::size_t activation_bytes = 0;       // saved for backward, per sample
  std::string device_name;                // where the times were measured ("AMD EPYC 7B13", ...)
  std::string source_module;              // the PyTorch module it was made from
  std::string source_how;                 // how: the describer and its passes

  std::size_t num_params() const;
  // Elements of the model's output per sample (the product of output_shape).
  std::size_t output_features() const;
  // The gradient-ready order: every parameter index once, in the order backward finalised it.
  std::vector<std::size_t> grad_ready_order() const;
  // Per sample, all layers: microseconds and FLOPs.
  double forward_us() const { return sum_over_layers(&DescribedLayer::forward_us); }
  double backward_us() const { return sum_over_layers(&DescribedLayer::backward_us); }
  double forward_flops() const { return sum_over_layers(&DescribedLayer::forward_flops); }
  double backward_flops() const { return sum_over_layers(&DescribedLayer::backward_flops); }
  double sum_over_layers(double DescribedLayer::*field) const;
};

// A device a description's times are rescaled to: one FLOP rate for the layers' arithmetic and
// a memory bandwidth for the optimizer's pass over the parameters.
struct DeviceProfile {
  std::string name;
  double flops_per_s = 0;         // achieved on the model's GEMMs and convolutions; 0: keep the described times
  double memory_bytes_per_s = 0;  // for the optimizer step (bytes read and written per parameter)
  std::string source;             // where the figures come from
};

// The built-in profiles: "described" (the times as measured), "h100" (dpbench's own measured
// TF32 GEMM rate on an H100, docs/gpu.md), "h100-datasheet" and "a100-datasheet" (dense TF32
// peaks). Throws InputError naming an unknown profile and listing the known ones.
const DeviceProfile& device_profile(const std::string& name);
std::vector<std::string> device_profile_names();

// The factor every described time is multiplied by on `profile`: the time the description's
// FLOPs take at the profile's rate over the time its FLOP-carrying layers took as described (one
// speed-up for every layer, element-wise ones included); 1 for "described". Throws InputError
// when the description has no FLOPs to scale by.
double profile_time_scale(const ModelDescription& d, const DeviceProfile& profile);

// Reads a description from its JSON. `origin` names it in errors. Throws InputError, in one line
// naming the origin and the field, on: a missing or mistyped field, a schema other than
// dpbench-model version 1, no parameters, a dimension of 0 or a shape whose size overflows, a
// negative or non-finite time or FLOP count, a backward that does not finalise every parameter
// exactly once or names an unknown layer or parameter.
ModelDescription parse_model_description(const nlohmann::json& j, const std::string& origin);

// The built-in descriptions' names (models/*.json, embedded at build time), sorted.
std::vector<std::string> builtin_model_names();

// `name_or_file`: a built-in name (builtin_model_names()) or a path to a description file.
// Throws InputError naming it when it is neither (listing the built-in names), when the file
// cannot be read or is not JSON, or as parse_model_description.
ModelDescription load_model_description(const std::string& name_or_file);

}  // namespace dpbench
