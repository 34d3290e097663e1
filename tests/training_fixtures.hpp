// What the training suites share: a small 20-step run configuration and the relative L2
// distance their agreement tests use.
#pragma once

#include <chrono>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "allreduce/ddp_trainer.hpp"
#include "ps/data_parallel.hpp"
#include "sharded_ps/sharded_ps.hpp"
#include "train/training.hpp"

namespace dpbench::testing {

// 20 steps of the MLP 48-32-24-10 (with kFeatures-wide synthetic samples), SGD lr 0.05 with
// momentum, seed 11, no evaluation, rank 0's final parameters kept.
inline TrainConfig small_train_config(const std::string& mode, int world_size, std::size_t batch) {
  TrainConfig c;
  c.mode = parse_mode(mode);
  c.world_size = world_size;
  c.global_batch = batch;
  c.model.hidden = {32, 24};
  c.run.max_steps = 20;
  c.run.warmup_steps = 2;
  c.run.epochs = 1;
  c.optimizer.lr = 0.05f;
  c.optimizer.momentum = 0.9f;
  c.seed = 11;
  c.evaluate = false;
  c.keep_final_params = true;
  c.timeout = std::chrono::seconds(60);
  return c;
}

// A small DLRM: 5 dense features, `tables` tables of `rows` rows of 4, 3 lookups, MLPs of 8.
inline DlrmShape small_dlrm_shape(std::size_t tables, std::size_t rows) {
  DlrmShape shape;
  shape.dense_features = 5;
  shape.tables = tables;
  shape.rows = rows;
  shape.dim = 4;
  shape.lookups = 3;
  shape.bottom = {8};
  shape.top = {8};
  return shape;
}

// A small dlrm run (tests of the sparse paths): `shape` trained at `world_size` ranks, global batch
// `batch`, `steps` steps (1 warm-up), one epoch, SGD lr 0.5 without momentum, seed 3, no
// evaluation, rank 0's final parameters kept.
inline TrainConfig small_dlrm_config(const DlrmShape& shape, int world_size, std::size_t batch, long steps) {
  TrainConfig c;
  c.model.workload = "dlrm";
  c.model.dlrm = shape;
  c.world_size = world_size;
  c.global_batch = batch;
  c.run.max_steps = steps;
  c.run.warmup_steps = 1;
  c.run.epochs = 1;
  c.optimizer.lr = 0.5f;
  c.optimizer.momentum = 0.0f;
  c.seed = 3;
  c.evaluate = false;
  c.keep_final_params = true;
  c.timeout = std::chrono::seconds(60);
  return c;
}

// Trains `c` on `data` (no test split) with its mode's trainer: ps, sharded_ps or allreduce.
inline RunResult train_mode(const TrainConfig& c, const Dataset& data) {
  const TrainData td{&data, nullptr};
  if (c.mode == Mode::ps) return train_data_parallel(c, td);
  if (c.mode == Mode::sharded_ps) return train_sharded_ps(c, td);
  return train_allreduce(c, td);
}

// ||a - b|| / ||b||, in double.
inline double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

// The floats of a raw little-endian file (dpbench run --save-params); empty when missing.
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v;
  float x;
  while (in.read(reinterpret_cast<char*>(&x), sizeof(x))) v.push_back(x);
  return v;
}

// Why this machine cannot run OpenBLAS's x86-64 Haswell kernels, which the bitwise pins are
// of (AVX2 and FMA), or "" when it can.
inline std::string haswell_kernels_unavailable() {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    return "this CPU has no AVX2 + FMA, so it cannot run the pinned OpenBLAS Haswell kernels";
  }
  return "";
#else
  return "the pins are of OpenBLAS's x86-64 Haswell kernels; this is not an x86-64 CPU";
#endif
}

}  // namespace dpbench::testing
