#!/usr/bin/env bash
# Runs one GoogleTest binary as two shards per core (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX: each
# test runs in exactly one shard; DPBENCH_SHARDS overrides the count), the shards side by side,
# then prints each shard's log in turn and exits non-zero when any shard failed, naming it. The
# suites are already safe to run side by side: ctest runs three at a time on 2 cores. Two shards
# per core, because gtest deals the tests out by index, not by cost: under TSan on 2 cores, 2
# shards took 103 s and 51 s, 4 shards 89, 20, 19 and 43 s (the slowest,
# StepSchedule.EveryStrategyMovesTheBytesItsRunCounts, 52 s alone). The sanitizer stages use it
# (scripts/tsan.sh, scripts/asan.sh).
#   usage: scripts/gtest-shards.sh BINARY [GTEST ARGS...]
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "gtest-shards.sh: ${1:-<no binary>}: not an executable test binary" >&2
  exit 2
fi
binary=$1
shift
shards=${DPBENCH_SHARDS:-$((2 * $(nproc)))}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for ((i = 0; i < shards; i++)); do
  GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i "$binary" "$@" >"$logs/$i.log" 2>&1 &
  pids+=($!)
done
failed=()
for ((i = 0; i < shards; i++)); do
  wait "${pids[$i]}" || failed+=("$i")
done
for ((i = 0; i < shards; i++)); do
  echo "--- shard $((i + 1)) of $shards"
  cat "$logs/$i.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gtest-shards.sh: shard(s) ${failed[*]} of $shards failed (0-based; logs above)" >&2
  exit 1
fi
