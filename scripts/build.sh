#!/usr/bin/env bash
# Installs the dependencies (scripts/setup.sh, arguments passed on) and builds dpbench with the
# `release` preset (CUDA, NCCL and MPI when found). Output: build/release/dpbench, the tests and
# the micro-benchmarks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh "$@"
cmake --preset release >/dev/null
cmake --build --preset release -j"$(nproc)"
