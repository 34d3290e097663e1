#!/usr/bin/env bash
# Fuzzes the hostile-input parsers with libFuzzer: builds the `fuzz` preset (clang-14, ASan +
# UBSan, CPU only) and runs every target of fuzz/ for N seconds (default 60: the CI smoke) over its
# seed corpus (fuzz/corpus/<target>/) and regression inputs (fuzz/regressions/<target>/). New
# coverage-increasing inputs go to build/fuzz/corpus/<target>/, outside the tree. An input that
# crashes a target, leaks, runs out of memory or hangs is copied to fuzz/regressions/<target>/
# (so that ctest's fuzz.replay.<target> replays it from then on; commit it with the fix) and the
# script exits 1. Runs one target per core at a time. Prints one line per target: seconds,
# executions, result.
#   --seconds N   time per target (a long run: --seconds 3600)
#   TARGET...     only these (fashion_mnist, rendezvous_message, run_options, sample_shape)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seconds=*) seconds="${1#*=}"; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  targets=(fashion_mnist rendezvous_message run_options sample_shape)
fi

bash scripts/setup.sh --fuzz >/dev/null
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j"$(nproc)"

# Leaks fail a run; UBSan stops at the first report (also compiled in: -fno-sanitize-recover).
export ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
# One target: fuzzes it, keeps a crashing input, writes its summary line to build/fuzz/$t.result
# (a first word FAILED when it failed).
fuzz_target() {
  local t=$1
  local bin=build/fuzz/fuzz/fuzz_$t work=build/fuzz/corpus/$t artifacts=build/fuzz/artifacts/$t
  local log=build/fuzz/$t.log status=0 result=ok execs a
  mkdir -p "$work" "$artifacts" "fuzz/regressions/$t"
  rm -f "$artifacts"/*
  echo "fuzz.sh: $t for ${seconds} s (log: $log)"
  # -timeout: one input running over 10 s is a hang; -rss_limit_mb: over 2 GiB is out of memory.
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "$work" "fuzz/corpus/$t" "fuzz/regressions/$t" >"$log" 2>&1 || status=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$status" -ne 0 ] || [ -n "$(ls -A "$artifacts")" ]; then
    result="FAILED (exit $status)"
    for a in "$artifacts"/*; do
      [ -e "$a" ] || continue
      cp "$a" "fuzz/regressions/$t/"
      result="$result, kept fuzz/regressions/$t/$(basename "$a")"
    done
    grep -m1 -E "ERROR: |runtime error|fuzz check failed|terminate called" "$log" >&2 || tail -20 "$log" >&2
  fi
  printf '%-20s %6s s  %12s execs  %s\n' "$t" "$seconds" "${execs:-?}" "$result" >"build/fuzz/$t.result"
}

# The targets side by side, one per core (each libFuzzer process runs on one).
rm -f build/fuzz/*.result
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n || true; done
  fuzz_target "$t" &
done
wait
failed=()
for t in "${targets[@]}"; do
  cat "build/fuzz/$t.result"
  grep -q '  FAILED' "build/fuzz/$t.result" && failed+=("$t")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz.sh: ${failed[*]} failed; the inputs are in fuzz/regressions/ (logs in build/fuzz/*.log)" >&2
  exit 1
fi
