#!/usr/bin/env bash
# Quick start 1: install, build, then run the main job (`dpbench run`, arguments passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
exec ./build/release/dpbench run "$@"
