#!/usr/bin/env bash
# Quick start 2: install, build, then run the fast suite with ctest: every unit, property and
# small integration test (`ctest -LE long`, about 4 minutes of ctest on a 2-core machine; the
# figures are in docs/building.md). The long acceptance runs (label `long`: full-epoch accuracy,
# the PyTorch loss agreement, the regression gate's cluster runs, the projection grid) run in CI
# (.ci/run), or here with `--long`.
set -euo pipefail
cd "$(dirname "$0")/.."
labels=(-LE long)
if [ "${1:-}" = "--long" ]; then labels=(-L long); shift; fi
bash scripts/build.sh --test
# One ctest job more than there are cores: the emulated cluster's jobs run one at a time
# (RESOURCE_LOCK) and mostly wait on links and heartbeats, so the unit tests keep every core busy.
ctest --preset release -j"$(($(nproc) + 1))" "${labels[@]}"
