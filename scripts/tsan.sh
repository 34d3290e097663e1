#!/usr/bin/env bash
# The CPU suites of the training layer under ThreadSanitizer: the per-rank context, the gradient
# reducer and both strategies run their ranks, communication threads and data-loader workers as
# threads, and the ordering the GPU relies on (a bucket is reduced after its gradients are
# written; the optimizer waits for every reduction) is the ordering between those threads here.
# A race makes TSan report and the run exit non-zero. Builds the `tsan` preset (CPU only).
# Left to the release suite: the tests that start the dpbench command (Cli*, processes of their
# own), the long accuracy runs (*Reaches*), and the rendezvous (Rendezvous.*), whose ZeroMQ I/O
# thread is not instrumented, so TSan reports ZeroMQ's own hand-offs as races.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake --preset tsan >/dev/null
cmake --build --preset tsan -j"$(nproc)"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
./build/tsan/tests/dpbench_tests --gtest_brief=1 --gtest_filter='-Cli*:Rendezvous.*:*Reaches*'
