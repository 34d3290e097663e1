#!/usr/bin/env bash
# Formats the tracked C++/CUDA sources (*.cpp *.hpp *.cu *.cuh *.h *.cc, as `git ls-files` lists
# them) with clang-format and the repository's .clang-format (clang-format 14, Debian 12's
# `clang-format` package; another major version may format some lines differently).
#   scripts/format.sh           rewrite the files in place
#   scripts/format.sh --check   change nothing; exit 1 naming every file that differs from the style
# CLANG_FORMAT names another binary (default: clang-format on PATH). Exit 2 when clang-format or git
# is missing or the style file does not parse.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "format.sh: unknown argument $1 (give --check or nothing)" >&2; exit 2 ;;
esac
[ $# -le 1 ] || { echo "format.sh: one argument at most (--check)" >&2; exit 2; }

clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" >/dev/null 2>&1; then
  echo "format.sh: $clang_format not found (apt-get install clang-format: Debian 12's is version 14)" >&2
  exit 2
fi
command -v git >/dev/null 2>&1 || { echo "format.sh: git not found (the file list is git ls-files)" >&2; exit 2; }
version=$("$clang_format" --version | sed -n 's/.*clang-format version \([0-9]*\).*/\1/p')
if [ "$version" != "14" ]; then
  echo "format.sh: warning: $clang_format is version ${version:-unknown}, .clang-format is tuned for 14" >&2
fi
# A style file that does not parse would otherwise show as every file differing.
if ! err=$("$clang_format" --style=file --dump-config 2>&1 >/dev/null); then
  echo "format.sh: .clang-format: $(printf '%s' "$err" | head -n 1)" >&2
  exit 2
fi

files=()
while IFS= read -r -d '' f; do
  [ -f "$f" ] && files+=("$f")  # skip tracked files deleted in the work tree
done < <(git ls-files -z -- '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h' '*.cc')
[ ${#files[@]} -gt 0 ] || { echo "format.sh: git ls-files lists no C++/CUDA source" >&2; exit 2; }
jobs=$(nproc 2>/dev/null || echo 2)

if [ "$check" -eq 0 ]; then
  printf '%s\0' "${files[@]}" | xargs -0 -n 16 -P "$jobs" "$clang_format" --style=file -i
  exit 0
fi

# Each batch of files writes its diagnostics to a file of its own (parallel batches would interleave
# on one stream); a violation reads `FILE:LINE:COL: error: code should be clang-formatted`.
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=0
# shellcheck disable=SC2016  # $0, $@ and $OUT are the inner shell's
printf '%s\0' "${files[@]}" | OUT="$out" xargs -0 -n 16 -P "$jobs" sh -c \
  'exec "$0" --style=file --dry-run -Werror "$@" 2>"$(mktemp "$OUT/batch.XXXXXX")"' "$clang_format" || status=$?
differ=$(cat "$out"/batch.* | sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
if [ "$status" -ne 0 ] && [ -z "$differ" ]; then
  echo "format.sh: clang-format failed:" >&2
  cat "$out"/batch.* | head -n 20 >&2
  exit 2
fi
if [ -n "$differ" ]; then
  count=$(printf '%s\n' "$differ" | wc -l)
  echo "format.sh: $count of ${#files[@]} files differ from .clang-format (scripts/format.sh rewrites them):" >&2
  printf '%s\n' "$differ" | sed 's/^/  /' >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files follow .clang-format"
