#!/usr/bin/env bash
# Runs one GoogleTest binary as two shards per core (DPBENCH_SHARDS overrides the count), the
# shards side by side, then prints each shard's log in turn and exits non-zero when any shard
# failed, naming it. The suites are already safe to run side by side: ctest runs three at a time
# on 2 cores. The tests the arguments select (--gtest_list_tests) are dealt out by cost, longest
# first, each to the shard with the least so far (LPT); the costs are scripts/sanitizer-costs.txt's
# seconds under TSan, and 0.2 s for a test it does not list. gtest's own GTEST_SHARD_INDEX deals
# by index: under TSan on the 2-core Intel machine it put the three slowest tests (65, 43 and
# 21 s) in one shard, which took 163 s while the other three took 14 to 29 s. The sanitizer stages
# use it (scripts/tsan.sh, scripts/asan.sh).
#   usage: scripts/gtest-shards.sh BINARY [GTEST ARGS...]
set -euo pipefail
if [ $# -lt 1 ] || [ ! -x "$1" ]; then
  echo "gtest-shards.sh: ${1:-<no binary>}: not an executable test binary" >&2
  exit 2
fi
binary=$1
shift
shards=${DPBENCH_SHARDS:-$((2 * $(nproc)))}
costs=$(dirname "$0")/sanitizer-costs.txt
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
# The selected tests' full names ("Suite.Test", "Prefix/Suite.Test/0"), one a line.
"$binary" "$@" --gtest_list_tests |
  awk '/^[^ ]/ { suite = $1; next } /^  / { print suite $1 }' >"$logs/tests"
if [ ! -s "$logs/tests" ]; then
  echo "gtest-shards.sh: $binary $*: selects no test" >&2
  exit 2
fi
# Each shard's tests as a gtest filter, one line per shard (LPT over the costs).
awk -v shards="$shards" '
  BEGIN { n = 0 }
  FNR == NR { if ($1 !~ /^#/ && NF >= 2) cost[$1] = $2; next }
  { name[n] = $1; c[n] = ($1 in cost) ? cost[$1] : 0.2; n++ }
  END {
    for (i = 0; i < n; i++) order[i] = i
    for (i = 1; i < n; i++) {  # by cost, longest first (insertion sort: a few hundred tests)
      k = order[i]; j = i - 1
      while (j >= 0 && c[order[j]] < c[k]) { order[j + 1] = order[j]; j-- }
      order[j + 1] = k
    }
    for (s = 0; s < shards; s++) load[s] = 0
    for (i = 0; i < n; i++) {
      t = order[i]; best = 0
      for (s = 1; s < shards; s++) if (load[s] < load[best]) best = s
      load[best] += c[t]
      filter[best] = filter[best] (filter[best] == "" ? "" : ":") name[t]
    }
    for (s = 0; s < shards; s++) print filter[s]
  }' "$costs" "$logs/tests" >"$logs/filters"
pids=()
i=0
while IFS= read -r filter; do
  if [ -n "$filter" ]; then
    "$binary" "$@" --gtest_filter="$filter" >"$logs/$i.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  fi
done <"$logs/filters"
failed=()
for ((i = 0; i < ${#pids[@]}; i++)); do
  wait "${pids[$i]}" || failed+=("$i")
done
for ((i = 0; i < ${#pids[@]}; i++)); do
  echo "--- shard $((i + 1)) of ${#pids[@]}"
  cat "$logs/$i.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "gtest-shards.sh: shard(s) ${failed[*]} of ${#pids[@]} failed (0-based; logs above)" >&2
  exit 1
fi
