// The `ps` mode's own knobs, TrainConfig's `ps` section. A leaf header (standard headers only):
// the train layer holds it in TrainConfig.
#pragma once

namespace dpbench {

// How the root coalesces its parameter broadcast and gradient reduce_add (DataParallel's
// broadcast_coalesced / reduce_add_coalesced).
struct PsConfig {
  double coalesce_mb = 10.0;  // the coalesced buffer size, in MiB (no command-line option)
};

}  // namespace dpbench
