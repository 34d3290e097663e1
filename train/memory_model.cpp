#include "train/memory_model.hpp"

#include <algorithm>
#include <cmath>

#include "core/local_comm.hpp"
#include "train/models.hpp"
#include "train/optimizer.hpp"

namespace dpbench {

MemoryInputs builtin_memory_inputs(const TrainConfig& config, const SampleShape& shape, std::size_t classes) {
  return model_memory_inputs(make_model(config, shape, classes), config, shape, classes);
}

MemoryInputs model_memory_inputs(std::shared_ptr<const Model> model, const TrainConfig& config,
                                 const SampleShape& shape, std::size_t classes) {
  MemoryInputs in;
  in.num_params = static_cast<double>(model->num_params());
  in.buffer_floats = static_cast<double>(model->num_buffers());
  in.input_floats = static_cast<double>(shape.features());
  in.classes = static_cast<double>(classes);
  in.activation_bytes = [model](double rows) {
    return static_cast<double>(model->activation_bytes(static_cast<std::size_t>(rows)));
  };
  in.config = config;
  return in;
}

double replica_rows(const TrainConfig& config, int rank) {
  if (!config.rank_batches.empty()) return static_cast<double>(config.rank_batches.at(static_cast<std::size_t>(rank)));
  return static_cast<double>(config.global_batch / static_cast<std::size_t>(config.world_size));
}

double loader_bytes(const MemoryInputs& in, double rows) {
  const DataLoaderOptions& l = in.config.loader;
  const double slots = l.num_workers == 0 ? 1.0 : static_cast<double>(l.num_workers) * l.prefetch_factor;
  return slots * rows * (in.input_floats * sizeof(float) + sizeof(std::int32_t));
}

double optimizer_bytes(const TrainConfig& config, double count) {
  return optimizer_slots(config.optimizer.name) * count * sizeof(float);
}

RankMemory replica_memory(const MemoryInputs& in, double rows) {
  RankMemory m;
  m.role = "replica";
  m[MemoryCategory::parameters] = (in.num_params + in.buffer_floats) * sizeof(float);
  m[MemoryCategory::gradients] = in.num_params * sizeof(float);
  m[MemoryCategory::activations] = in.activation_bytes(rows) + 2.0 * rows * in.classes * sizeof(float);
  m[MemoryCategory::data_staging] = loader_bytes(in, rows);
  return m;
}

double chain_relay_bytes(const TrainConfig& config, int rank, int root, double largest) {
  const int p = config.world_size;
  const int pos = ((rank - root - 1) % p + p) % p;
  if (config.comm != Backend::local || pos == 0 || pos == p - 1 || largest <= 0) return 0.0;
  const auto n = static_cast<std::size_t>(largest);
  return 2.0 * static_cast<double>(LocalCommunicator::chain_slice(n)) * sizeof(float);
}

}  // namespace dpbench
