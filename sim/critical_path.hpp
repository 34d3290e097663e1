// A step schedule (core/schedule.hpp) timed without SimGrid where SimGrid's answer is known in
// closed form: on a built platform (sim/simulate.hpp's SimPlatform, no platform file, no send
// buffer), SimGrid's flow model as dpbench configures it (CM02, no cross-traffic, no TCP window)
// gives a transfer that has every link of its route to itself exactly its lone cost: it starts
// when both its send and its receive are posted (the mailbox's rendezvous) and ends the route's
// latency + bytes / min(the route's narrowest link, the engine's cap) later. When no link ever
// carries two transfers at once, the whole step is then a longest-path computation: every stream
// runs its ops in order, a wait ends at the latest of what it waits for (a max-plus evaluation,
// as in the critical-path analysis of LogGOPSim, Hoefler et al., HPDC 2010), in time linear in the
// messages instead of SimGrid's per-message events. The premise is checked afterwards, link
// direction by link direction; where it fails (transfers that share a link, and so its
// bandwidth), the caller plays the schedule on SimGrid instead.
#pragma once

#include <limits>
#include <optional>

#include "core/schedule.hpp"
#include "sim/simulate.hpp"

namespace dpbench {

// `steps` >= 1 repetitions of `schedule` on `platform` evaluated as above: the result SimGrid's
// simulate() would give (step_s, rank_step_s, simulated_s, messages; config.engine names this
// evaluation), or nullopt when the premise fails or the platform has what the evaluation does not
// model (a platform file, a send buffer). Also nullopt for a schedule that deadlocks, so that
// simulate() reports it. Throws InputError on a bad platform, Error on unmatched messages.
std::optional<SimulationResult> evaluate_uncontended(const StepSchedule& schedule, const SimPlatform& platform,
                                                     int steps = 1);

// evaluate_uncontended() where its premise holds, else simulate(): SimGrid, whose cost grows with
// the messages (about 5 us each on a 2-core machine), only for a schedule of at most
// `max_simgrid_messages` sends; Error naming the count past it.
SimulationResult simulate_fast(const StepSchedule& schedule, const SimPlatform& platform, int steps = 1,
                               double max_simgrid_messages = std::numeric_limits<double>::infinity());

}  // namespace dpbench
