#!/usr/bin/env bash
# The CPU suites under AddressSanitizer and UndefinedBehaviorSanitizer: a heap error, a leak or
# undefined behaviour anywhere in the code the in-process suites reach fails the run. Built in
# the `fuzz` preset's tree (clang-14, ASan + UBSan, CPU only), which scripts/fuzz.sh then reuses
# for the fuzz targets, so that CI compiles the libraries once for both. The runs of the dpbench
# command as a child process and the long acceptance runs are left to the release suite
# (scripts/sanitizer-excluded.txt): under ASan they take minutes. Two shards per core
# (scripts/gtest-shards.sh). Built at -O1, as ASan's documentation suggests: on 2 cores dpbench
# and the test binary built in 199 s against 228 s at -O2, and the shards ran in 29 s at both.
# (The `debug` preset is the same
# sanitizers under gcc at -O0, for stepping through a report.)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --fuzz >/dev/null
cmake --preset fuzz >/dev/null
cmake --build build/fuzz -j"$(nproc)" --target dpbench dpbench_tests
export ASAN_OPTIONS="detect_leaks=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1 print_stacktrace=1 ${UBSAN_OPTIONS:-}"
bash scripts/gtest-shards.sh ./build/fuzz/tests/dpbench_tests --gtest_brief=1 --gtest_filter="-$(grep -v '^#' scripts/sanitizer-excluded.txt | paste -sd:)"
