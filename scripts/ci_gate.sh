#!/usr/bin/env bash
# The CI regression gate: a quick CPU sweep (Fashion-MNIST, every strategy at 1 and 2 ranks,
# 120 steps each, 3 repetitions with the modes alternating, about a minute on 2 cores) compared with the committed baseline by
# `dpbench compare`. Deterministic figures (bytes per step, memory peaks, parameter counts) must
# match exactly and accuracy within a tolerance; timings only as throughput ratios to ps
# inside each file, above a noise floor. Exit 1 on a regression.
#
# Refresh the baseline on purpose (after a change that moves a deterministic figure):
#   bash scripts/ci_gate.sh --refresh && git add results/baselines/ci-sweep.json
set -euo pipefail
cd "$(dirname "$0")/.."
dpbench=./build/release/dpbench
baseline=results/baselines/ci-sweep.json
current=results/ci-current.json
"$dpbench" sweep --device cpu --ranks 1,2 --batch-sizes 256 --num-workers 0 --max-steps 120 --warmup-steps 10 --repetitions 3 \
  --seed 0 -q -o "$current"
if [ "${1:-}" = "--refresh" ]; then
  cp "$current" "$baseline"
  echo "ci_gate: baseline refreshed: $baseline (commit it)"
  exit 0
fi
"$dpbench" compare "$baseline" "$current" --markdown results/ci-compare.md
