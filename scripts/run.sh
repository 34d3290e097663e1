#!/usr/bin/env bash
# Quick start 1: install, build the dpbench command, then run the main job (`dpbench run`,
# arguments passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)" --target dpbench
exec ./build/release/dpbench run "$@"
