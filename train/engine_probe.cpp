#include "train/engine_probe.hpp"

#include <algorithm>
#include <chrono>
#include <mutex>

#include <fmt/format.h>

#include "core/error.hpp"

namespace dpbench {

namespace {
std::mutex probe_mutex;
std::optional<EngineProbe>& stored() {
  static std::optional<EngineProbe> probe;
  return probe;
}

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}
}  // namespace

std::optional<EngineProbe> probe_engine(Communicator& comm, int a, int b, const std::vector<std::size_t>& floats,
                                        int reps) {
  const int me = comm.rank();
  if ((me != a && me != b) || a == b) return std::nullopt;
  const std::size_t largest = floats.empty() ? 1 : *std::max_element(floats.begin(), floats.end());
  std::vector<float> buf(std::max<std::size_t>(largest, 1), 0.0f);
  float ack = 0.0f;
  // Round-trip seconds of n floats out and one back; rank b only answers.
  auto round_trip = [&](std::size_t n) {
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      if (me == b) {
        comm.recv(buf.data(), n, a);
        comm.send(&ack, 1, a);
        continue;
      }
      const auto t0 = std::chrono::steady_clock::now();
      comm.send(buf.data(), n, b);
      comm.recv(&ack, 1, b);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return t.empty() ? 0.0 : median(t);
  };
  round_trip(1);  // the connection's first use
  const double small = round_trip(1);
  EngineProbe probe{a, b, {}, {}, 0, 0};
  for (std::size_t n : floats) {
    const double t = round_trip(n);
    probe.bytes.push_back(static_cast<double>(n * sizeof(float)));
    probe.one_way_s.push_back(std::max(0.0, t - small / 2.0));
  }
  if (me != a) return std::nullopt;
  fit_engine_line(probe);
  return probe;
}

void fit_engine_line(EngineProbe& p) {
  const std::size_t k = p.bytes.size();
  if (k < 2 || p.one_way_s.size() != k) throw Error(fmt::format("engine probe: {} points; a line needs two", k));
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < k; ++i) {
    sx += p.bytes[i];
    sy += p.one_way_s[i];
    sxx += p.bytes[i] * p.bytes[i];
    sxy += p.bytes[i] * p.one_way_s[i];
  }
  const double n = static_cast<double>(k);
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  p.bytes_per_s = slope > 0 ? 1.0 / slope : 0.0;
  p.overhead_s = std::max(0.0, (sy - (slope > 0 ? slope : 0.0) * sx) / n);
}

const std::optional<EngineProbe>& last_engine_probe() {
  std::lock_guard<std::mutex> lock(probe_mutex);
  return stored();
}

void set_last_engine_probe(const EngineProbe& probe) {
  std::lock_guard<std::mutex> lock(probe_mutex);
  stored() = probe;
}

}  // namespace dpbench
