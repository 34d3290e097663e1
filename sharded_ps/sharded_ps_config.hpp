// The `sharded_ps` mode's own options (--servers, --staleness, --staleness-replay), TrainConfig's
// `sharded_ps` section. A leaf header (standard headers only): the train layer holds it in
// TrainConfig.
#pragma once

#include <cstdint>

namespace dpbench {

// Which ranks serve a parameter range, and how stale a worker's parameters may be.
struct ShardedPsConfig {
  int servers = 0;  // server ranks 0..servers-1 (0: every rank)
  // The staleness bound S of stale-synchronous parallel (sharded_ps/stale_sync.hpp; 0:
  // synchronous), in steps, and the seed of its deterministic replay schedule (-1: the newest
  // version that has arrived, as timing gives it).
  int staleness = 0;
  std::int64_t staleness_replay = -1;
};

}  // namespace dpbench
