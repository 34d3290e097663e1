#!/usr/bin/env bash
# The CPU suites under AddressSanitizer and UndefinedBehaviorSanitizer (the `debug` preset): a
# heap error, a leak or undefined behaviour anywhere in the code the in-process suites reach
# fails the run. The runs of the dpbench command as a child process and the long acceptance runs
# are left to the release suite (scripts/sanitizer-excluded.txt): under ASan they take minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset debug >/dev/null
cmake --build --preset debug -j"$(nproc)" --target dpbench dpbench_tests
export ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
./build/debug/tests/dpbench_tests --gtest_brief=1 --gtest_filter="-$(cat scripts/sanitizer-excluded.txt | grep -v '^#' | paste -sd:)"
