#!/usr/bin/env bash
# GPU validation of dpbench on a machine that has a GPU, its driver, the CUDA libraries, cuBLAS
# and NCCL, but none of Debian's -dev packages this build needs and no network. Two steps:
#
#   bash scripts/gpu-check.sh bundle [--data]
#       On the build machine (nvcc is here), from the checkout: builds the `gpu` CMake preset
#       (CUDA required, MPI and gloo off) and packs build/gpu/dpbench, build/gpu/tests/dpbench_tests
#       and build/gpu/dpbench_gpu_step, with the shared libraries they load, into .gpu/ (which git
#       ignores). --data also copies the Fashion-MNIST files (about 30 MB) into the bundle.
#       Copy .gpu/ along with the checkout to the GPU machine.
#
#   bash scripts/gpu-check.sh run
#       On the GPU machine, from the checkout: runs the GPU test suites, the CPU's bitwise pin
#       (StepLoopPin, under OPENBLAS_CORETYPE=Haswell, on this other CPU), a short `dpbench run` on
#       CUDA and the single-GPU step benchmark, printing one PASS or FAIL line per stage. A stage
#       fails on a non-zero exit; the benchmark stage also when a benchmark reported an error
#       (Google Benchmark exits 0 then). Without a usable GPU the test suites report their GPU
#       tests as skipped and pass, while `dpbench run --device cuda` fails. Exits 0 when every
#       stage passed, 1 otherwise.
#
# Libraries the GPU machine provides are not packed: the C library and loader (libc, libm,
# libdl, libpthread, librt, libresolv and the other parts of glibc, ld-linux), the driver
# (libcuda, libnvidia-*) and the CUDA libraries (libcudart, libcublas, libcublasLt, libnccl,
# ...), which are far too large to carry. The
# bundle records which CUDA libraries the programs load, and .gpu/run finds them on the GPU
# machine (the dynamic loader's cache, /usr/local/cuda*, /usr/lib, /usr/local/lib, /opt,
# including the nvidia-* Python packages there).
#
#   bash .gpu/run PROGRAM [ARGS...]
#       Runs one bundled program (dpbench, dpbench_tests, dpbench_gpu_step) with LD_LIBRARY_PATH
#       set to the bundle's libraries and the machine's CUDA libraries.
set -euo pipefail

cd "$(dirname "$0")/.."
dest=.gpu
programs=(build/gpu/dpbench build/gpu/tests/dpbench_tests build/gpu/dpbench_gpu_step)

usage() {
  sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
}

# Provided by the GPU machine and never packed.
system_lib='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libanl\.so|libnsl\.so|libcuda\.so|libnvidia)'
# CUDA libraries: not packed, found on the GPU machine by .gpu/run.
cuda_lib='^(libcudart|libcublas|libcublasLt|libnccl|libcurand|libcusparse|libcufft|libcusolver|libnvrtc|libnvJitLink)'

bundle() {
  local data=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --data) data=1 ;;
      *) echo "gpu-check: bundle: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
  done

  cmake --preset gpu
  cmake --build --preset gpu

  rm -rf "$dest"
  mkdir -p "$dest/bin" "$dest/lib"
  : > "$dest/cuda-libs"
  local exe name path missing
  for exe in "${programs[@]}"; do
    [ -x "$exe" ] || { echo "gpu-check: $exe was not built" >&2; exit 2; }
    cp "$exe" "$dest/bin/"
    # ldd lines of resolved libraries: "libfoo.so.1 => /path/libfoo.so.1 (0x...)".
    while read -r name path; do
      if [[ "$name" =~ $system_lib ]]; then
        continue
      elif [[ "$name" =~ $cuda_lib ]]; then
        grep -qxF "$name" "$dest/cuda-libs" || echo "$name" >> "$dest/cuda-libs"
      elif [ ! -e "$dest/lib/$name" ]; then
        cp -L "$path" "$dest/lib/$name"
      fi
    done < <(ldd "$exe" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
    missing=$(ldd "$exe" | grep 'not found' || true)
    if [ -n "$missing" ]; then
      echo "gpu-check: $exe has unresolved libraries:" >&2
      echo "$missing" >&2
      exit 2
    fi
  done
  # The CLI tests start dpbench at the path it was built at; .gpu/run links it there when missing.
  echo "$PWD/build/gpu/dpbench" > "$dest/dpbench-path"

  if [ "$data" = 1 ]; then
    local src=${DPBENCH_DATA_DIR:-/usr/share/datasets/fashion-mnist}
    [ -d "$src" ] || { echo "gpu-check: $src is missing (Fashion-MNIST)" >&2; exit 2; }
    mkdir -p "$dest/data/fashion-mnist"
    cp "$src"/*.gz "$dest/data/fashion-mnist/"
  fi

  write_run_wrapper
  echo "gpu-check: bundle in $dest ($(du -sh "$dest" | cut -f1)); CUDA libraries left to the GPU machine: $(tr '\n' ' ' < "$dest/cuda-libs")"
}

write_run_wrapper() {
  cat > "$dest/run" <<'WRAPPER'
#!/usr/bin/env bash
# Runs a program of the bundle: bash .gpu/run PROGRAM [ARGS...] (written by scripts/gpu-check.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { echo "run: name a program of $here/bin" >&2; exit 2; }
program=$1
shift
[ -x "$here/bin/$program" ] || { echo "run: $program is not in $here/bin" >&2; exit 2; }

dirs=$here/lib
while read -r lib; do
  [ -n "$lib" ] || continue
  found=$( (ldconfig -p 2>/dev/null || true) | awk -v l="$lib" '$1 == l {print $NF; exit}')
  if [ -z "$found" ]; then
    found=$(find /usr/local/cuda*/ /usr/lib /usr/local/lib /opt -name "$lib" 2>/dev/null | head -n 1 || true)
  fi
  if [ -n "$found" ]; then
    case ":$dirs:" in *":$(dirname "$found"):"*) ;; *) dirs=$dirs:$(dirname "$found") ;; esac
  else
    echo "run: $lib not found on this machine" >&2
  fi
done < "$here/cuda-libs"
export LD_LIBRARY_PATH=$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ -d "$here/data/fashion-mnist" ] && [ -z "${DPBENCH_DATA_DIR:-}" ]; then
  export DPBENCH_DATA_DIR=$here/data/fashion-mnist
fi

# dpbench_tests starts dpbench at the path it was built at.
built=$(cat "$here/dpbench-path")
if [ ! -e "$built" ] && mkdir -p "$(dirname "$built")" 2>/dev/null; then
  ln -s "$here/bin/dpbench" "$built" 2>/dev/null || echo "run: could not link $built to the bundled dpbench" >&2
fi
exec "$here/bin/$program" "$@"
WRAPPER
  chmod +x "$dest/run"
}

results=()
failed=0

# stage NAME FAIL_PATTERN PROGRAM [ARGS...]: runs one bundled program and records PASS or FAIL.
# FAIL_PATTERN (grep -E; empty: none) marks a failure in output that exited 0.
stage() {
  local name=$1 pattern=$2
  shift 2
  echo "== gpu-check: $name: bash $dest/run $*"
  local log status=0 verdict
  log=$(mktemp)
  bash "$dest/run" "$@" 2>&1 | tee "$log" || status=$?
  if [ "$status" != 0 ]; then
    verdict="FAIL $name (exit $status)"
  elif [ -n "$pattern" ] && grep -Eq -- "$pattern" "$log"; then
    verdict="FAIL $name (output matches '$pattern')"
  else
    verdict="PASS $name"
  fi
  rm -f "$log"
  [ "${verdict%% *}" = PASS ] || failed=1
  results+=("$verdict")
  echo "$verdict"
}

run_checks() {
  [ -x "$dest/run" ] || { echo "gpu-check: no bundle in $dest (run 'bundle' on the build machine)" >&2; exit 2; }
  stage tests '' \
    dpbench_tests --gtest_filter='Cuda*:CliGpu*:DeviceMemory*:Nccl*'
  # The bitwise pin (tests/test_step_loop_pin.cpp) on this machine's CPU, another model than the
  # build machine's: the same CRCs must hold under OpenBLAS's Haswell kernels on any x86-64 CPU
  # with AVX2 and FMA.
  OPENBLAS_CORETYPE=Haswell stage cpu-pin '' \
    dpbench_tests --gtest_filter='StepLoopPin.*'
  stage dpbench-run '' \
    dpbench run --device cuda --data synthetic --max-steps 200
  stage gpu-step 'ERROR OCCURRED' \
    dpbench_gpu_step
  echo "== gpu-check summary"
  printf '%s\n' "${results[@]}"
  return "$failed"
}

case "${1:-}" in
  bundle) shift; bundle "$@" ;;
  run) shift; [ $# -eq 0 ] || { echo "gpu-check: run takes no arguments" >&2; exit 2; }; run_checks ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
