#!/usr/bin/env bash
# The CI regression gate, in two parts.
#
# 1. A/B against the base commit (results/ab_gate.py). The base is the merge base of HEAD with
#    the target branch ($GITHUB_BASE_REF's origin branch in a GitHub pull request, else
#    origin/main, else main); on the target branch itself, HEAD's parent. It is checked out in a
#    git worktree and its `dpbench` built there (build/gate-base/<commit>, kept for the next run).
#    A tree that differs from its base only in docs/ and *.md files skips this part (it says so).
#    The base's and the head's (./build/release/dpbench) runs then alternate, base first on odd
#    repetitions and head first on even ones: the same CPU training of every mode at 2 ranks, and
#    one simulated projection (resnet50 on DGX H100 nodes to 64 ranks). Deterministic figures
#    (bytes per step, memory peaks, step losses, accuracy, simulated step times) must be equal;
#    each mode's throughput is judged by a one-sided Mann-Whitney U over the repetitions (p <= 0.01)
#    with a fixed minimum effect (10 %), never widened by the runs' spread. A throughput loss
#    that fails, or is suspect (beyond the minimum effect at p <= 0.05), runs a second round of
#    alternated runs ($out/confirm): it is a regression only when both rounds' runs pooled fail
#    it (a deterministic regression stands without a second round). Every regression is named with the figure, the base, the effect and the p-value.
#    Report: results/ci-ab.md.
#
# 2. The emulated cluster (3 nodes x 200 Mbit/s, every mode, 2 repetitions, about a minute)
#    against results/baselines/ci-cluster.json by `dpbench compare`: deterministic figures
#    exactly, each in-file throughput ratio to ps at a fixed 10 % floor (a figure whose spread is
#    above 10 % is listed as too noisy, not judged). A failing comparison is run once more and must
#    fail again. Skipped, saying so, where this machine cannot host a cluster (dpbench exits 2
#    naming what is missing).
#
# usage: bash scripts/ci_gate.sh [--base REV | --base-binary PATH] [--repetitions N] [--max-steps N]
#            [--min-effect PCT] [--accept PREFIX]... [--head-env VAR=VALUE]... [--out DIR]
#            [--no-cluster] [--refresh]
#   --base REV           the base commit (default: as above; or $DPBENCH_GATE_BASE)
#   --base-binary PATH   a built base instead of a commit (an A/A check: the head's own binary)
#   --repetitions N      runs of each build, alternating (default 5, at least 5)
#   --max-steps N        steps of each training run (default 250)
#   --min-effect PCT     smallest throughput loss that fails (default 10)
#   --accept PREFIX      a deterministic figure meant to change (e.g. comm_bytes_per_step)
#   --head-env VAR=VALUE set in the head's runs only (the tests plant a slowdown this way)
#   --out DIR            where the runs' files go (default build/gate)
#   --no-cluster         part 1 only
#   --refresh            rewrite the cluster baseline from a fresh sweep (commit it), no gate
# Exit 0: no regression; 1: a regression; 2: bad usage, or a base that cannot be found or built.
# In a GitHub Actions job: check out with `fetch-depth: 0` (the base must be in the clone), run
# `bash scripts/setup.sh && bash scripts/build.sh && bash scripts/ci_gate.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dpbench=./build/release/dpbench
cluster_baseline=results/baselines/ci-cluster.json
cluster_current=results/ci-cluster-current.json

die() { echo "ci_gate: $*" >&2; exit 2; }

base_rev=${DPBENCH_GATE_BASE:-}
base_binary=
repetitions=5
max_steps=250
min_effect=10
out=build/gate
cluster=1
refresh=0
accept=()
head_env=()
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base_rev=${2:?--base needs a commit}; shift 2 ;;
    --base-binary) base_binary=${2:?--base-binary needs a path}; shift 2 ;;
    --repetitions) repetitions=${2:?--repetitions needs a count}; shift 2 ;;
    --max-steps) max_steps=${2:?--max-steps needs a count}; shift 2 ;;
    --min-effect) min_effect=${2:?--min-effect needs a percentage}; shift 2 ;;
    --accept) accept+=(--accept "${2:?--accept needs a figure prefix}"); shift 2 ;;
    --head-env) head_env+=("${2:?--head-env needs VAR=VALUE}"); shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --no-cluster) cluster=0; shift ;;
    --refresh) refresh=1; shift ;;
    *) die "unknown argument $1 (see the usage at the top of scripts/ci_gate.sh)" ;;
  esac
done
[[ "$repetitions" =~ ^[0-9]+$ && "$repetitions" -ge 5 ]] || die "--repetitions $repetitions: at least 5 are needed"
[[ "$max_steps" =~ ^[0-9]+$ && "$max_steps" -ge 20 ]] || die "--max-steps $max_steps: at least 20 are needed"
for kv in "${head_env[@]}"; do [[ "$kv" =~ ^[A-Z_][A-Z0-9_]*= ]] || die "--head-env $kv: expected VAR=VALUE"; done
[ -x "$dpbench" ] || die "$dpbench is not built (bash scripts/build.sh)"

# The base commit: the merge base with the target branch, or HEAD's parent on that branch.
find_base() {
  local target=main
  if [ -n "${GITHUB_BASE_REF:-}" ]; then target=origin/$GITHUB_BASE_REF
  elif git rev-parse -q --verify origin/main >/dev/null; then target=origin/main; fi
  local mb
  mb=$(git merge-base HEAD "$target" 2>/dev/null) || die "no merge base of HEAD and $target (a shallow clone? check out with fetch-depth: 0, or give --base REV)"
  if [ "$mb" = "$(git rev-parse HEAD)" ]; then
    mb=$(git rev-parse -q --verify 'HEAD^') || die "HEAD has no parent to gate against (give --base REV)"
  fi
  echo "$mb"
}

# Builds the base's dpbench in a worktree of its own; prints its path.
build_base() {
  local sha=$1 dir=$root/build/gate-base/$1
  if [ ! -x "$dir/build/release/dpbench" ]; then
    git worktree prune
    rm -rf "$dir"
    git worktree add -q --detach "$dir" "$sha" >&2 || die "cannot check out base $sha"
    echo "ci_gate: building the base $sha's dpbench in $dir" >&2
    (cd "$dir" && cmake --preset release >/dev/null && cmake --build --preset release --target dpbench >/dev/null) >&2 ||
      die "the base $sha does not build (see above)"
  fi
  echo "$dir/build/release/dpbench"
}

ab_gate() {
  local base_bin base_label head_label
  if [ -n "$base_binary" ]; then
    [ -x "$base_binary" ] || die "--base-binary $base_binary is not an executable"
    base_bin=$base_binary
    base_label=$base_binary
  else
    local rev=$base_rev sha
    [ -n "$rev" ] || rev=$(find_base) || exit 2
    sha=$(git rev-parse -q --verify "$rev^{commit}") || die "--base $rev: not a commit here"
    if git diff --quiet "$sha" -- . ':(exclude)docs' ':(exclude)*.md'; then
      echo "ci_gate: the tree differs from the base $(git rev-parse --short "$sha") only in docs/ and *.md files:" \
        "nothing the A/B part measures can move; it is skipped"
      return 0
    fi
    base_bin=$(build_base "$sha") || exit 2
    base_label=$(git rev-parse --short "$sha")
  fi
  head_label=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- || head_label="$head_label with uncommitted changes"
  rm -rf "$out" && mkdir -p "$out"
  run_side() {  # DIR SIDE BINARY I [ENV...]
    local dir=$1 side=$2 bin=$3 i=$4
    shift 4
    env "$@" "$bin" run --device cpu --ranks 2 --batch-size 256 --num-workers 0 --max-steps "$max_steps" \
      --warmup-steps 10 --repetitions 1 --seed 0 -q -o "$dir/$side-$i.json" >/dev/null
  }
  alternate() {  # DIR: one round of the two builds' alternated runs
    local dir=$1 i
    mkdir -p "$dir"
    for i in $(seq 1 "$repetitions"); do
      if [ $((i % 2)) = 1 ]; then
        run_side "$dir" base "$base_bin" "$i" && run_side "$dir" head "$dpbench" "$i" "${head_env[@]}"
      else
        run_side "$dir" head "$dpbench" "$i" "${head_env[@]}" && run_side "$dir" base "$base_bin" "$i"
      fi
    done
  }
  alternate "$out"
  project_side() {  # SIDE BINARY [ENV...]
    local side=$1 bin=$2
    shift 2
    env "$@" "$bin" project --model resnet50 --topology dgx-h100 --simulate --max-ranks 64 -q \
      -o "$out/$side-projection.json" >/dev/null
  }
  if ! { project_side base "$base_bin" && project_side head "$dpbench" "${head_env[@]}"; }; then
    echo "ci_gate: a build cannot project --model resnet50 (see above): projections not compared"
    rm -f "$out"/*-projection.json
  fi
  judge() {  # [--confirm DIR2]
    /usr/bin/python3 results/ab_gate.py "$out" --base-label "$base_label" --head-label "$head_label" \
      --min-effect "$min_effect" "${accept[@]}" --markdown results/ci-ab.md "$@"
  }
  local rc=0
  judge 2>"$out/verdicts.txt" || rc=$?
  # Only a throughput regression, or a suspect loss, can be noise; a deterministic one stands as it is.
  if [ "$rc" -gt 1 ] ||
    ! grep -q "^ab_gate: \(REGRESSION: .* throughput_median_step_samples_per_s\|SUSPECT: \)" "$out/verdicts.txt"; then
    cat "$out/verdicts.txt" >&2
    return "$rc"
  fi
  sed 's/^/ci_gate: first round: /' "$out/verdicts.txt"
  echo "ci_gate: a throughput loss in the A/B comparison; running a second round of alternated runs to judge it"
  alternate "$out/confirm"
  judge --confirm "$out/confirm"
}

cluster_sweep() {
  "$dpbench" sweep --nodes 3 --links 200mbit --batch-sizes 384 --max-steps 40 --warmup-steps 5 --repetitions 2 \
    --no-eval --seed 0 -q -o "$cluster_current"
}
cluster_compare() {
  "$dpbench" compare "$cluster_baseline" "$cluster_current" --noise-floor 10 --noise-cap 10 \
    --markdown results/ci-cluster-compare.md
}
cluster_gate() {
  local rc=0
  cluster_sweep || rc=$?
  if [ "$rc" = 2 ]; then echo "ci_gate: emulated cluster unavailable here (see the line above): its gate is skipped"; return 0; fi
  [ "$rc" = 0 ] || return "$rc"
  if [ "$refresh" = 1 ]; then
    cp "$cluster_current" "$cluster_baseline"
    echo "ci_gate: $cluster_baseline refreshed (commit it)"
    return 0
  fi
  if cluster_compare; then return 0; fi
  echo "ci_gate: cluster comparison failed; running its sweep once more to confirm"
  cluster_sweep
  cluster_compare
}

if [ "$refresh" = 1 ]; then cluster_gate; exit 0; fi
status=0
ab_gate || status=$?
[ "$status" -le 1 ] || exit "$status"
if [ "$cluster" = 1 ]; then cluster_gate || { rc=$?; [ "$rc" -gt "$status" ] && status=$rc; }; fi
exit "$status"
