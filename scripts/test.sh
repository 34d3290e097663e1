#!/usr/bin/env bash
# Quick start 2: install, build, then run every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh --test
ctest --preset release -j"$(nproc)"
