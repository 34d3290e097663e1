// torchrun's elastic restarts (`torchrun --max_restarts K`): when a rank dies, torchrun stops the
// group and starts it again with TORCHELASTIC_RESTART_COUNT one higher, and dpbench resumes from
// its newest checkpoint (--checkpoint-dir, --resume). What a restart costs is measured across the
// two attempts: a rank that survives the failure records, in the checkpoint directory, the step
// it had started and the time; the next attempt reads that record and, at its first step, knows
// how long the recovery took and how many steps it does again.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace dpbench {

// TORCHELASTIC_RESTART_COUNT: 0 in the first attempt and when not under torchrun.
int restart_count();

// The step a rank of this process started last, and the wall-clock time (system clock) at which
// the process started its first step; set by note_step_start(), which maybe_inject_fault calls
// at the start of every step.
void note_step_start(long step);
long last_step_started();
std::optional<std::chrono::system_clock::time_point> first_step_time();

// Records this process's view of a failure in dir/failure-<attempt>-rank<rank>.json: the step it
// had started, the time, and the error it saw; only a rank's first record in this process is
// written (a rank that saw the failure and is then stopped keeps its own view). Best effort:
// never throws.
void record_failure(const std::string& dir, int rank, const std::string& error) noexcept;

// The cost of the restart that attempt `attempt` (the job's: the highest restart count of its
// ranks) is, from the previous attempt's record (the lowest rank's) and this process's first step:
// {"restart_count", "failed_step", "error", "observed_by_rank", "recovery_s" (failure to the first
// step after the restart), "steps_redone" (failed_step - resumed_from_step), "counted_by"}. At
// attempt 0, a record of this job (same $TORCHELASTIC_RUN_ID, not "none") made before this
// process's first step still counts: torchrun restarts the workers of every node without
// counting when a node whose agent died joins again. Null when there is no such record.
nlohmann::json restart_cost(const std::string& dir, long resumed_from_step, int attempt);

}  // namespace dpbench
