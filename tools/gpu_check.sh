#!/usr/bin/env bash
# GPU checks in two halves.
#
#   bash tools/gpu_check.sh build   # here: a machine with Bazel and the CUDA toolkit, no GPU
#   bash tools/gpu_check.sh run     # there: a GPU machine without Bazel (gpu_bundle/ copied along)
#
# `build` compiles every test tagged `gpu` and every benchmark tagged `gpu`
# with --config=gpu_bundle (optimized, fully static except the CUDA driver,
# cuBLAS, NCCL and Google Benchmark, whose Debian package has no static
# archive and is copied in), and gathers them with this script into the
# git-ignored folder gpu_bundle/ (checked to stay under 64 MiB).
#
# `run` finds the CUDA/NCCL libraries at run time (/usr/local/cuda*, a Python
# environment's nvidia/*/lib, ldconfig), runs every test binary and benchmark
# with a deadline, and prints one summary line:
#   gpu_check: N passed, M failed, K skipped
# GPU tests skip (GTEST_SKIP) where no device is visible.
set -uo pipefail

mode=${1:-}
here=$(cd "$(dirname "$0")/.." && pwd)
bundle=${GPU_BUNDLE:-$here/gpu_bundle}

build() {
  set -e
  cd "$here"
  local tests benchmarks
  tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
  benchmarks=$(bazel query 'attr(tags, "\bgpu\b", attr(tags, "\bbenchmark\b", kind("cc_binary", //...)))' 2>/dev/null || true)
  echo "gpu_check build: tests: $(echo $tests)"
  echo "gpu_check build: benchmarks: $(echo $benchmarks)"
  bazel build --config=gpu_bundle $tests $benchmarks
  rm -rf "$bundle"
  mkdir -p "$bundle/tests" "$bundle/benchmarks" "$bundle/lib"
  local t bin
  for t in $tests; do
    bin=bazel-bin/$(echo "${t#//}" | tr ':' '/')
    cp "$bin" "$bundle/tests/$(echo "${t#//}" | tr '/:' '__')"
  done
  for t in $benchmarks; do
    bin=bazel-bin/$(echo "${t#//}" | tr ':' '/')
    cp "$bin" "$bundle/benchmarks/$(echo "${t#//}" | tr '/:' '__')"
  done
  # Shared libraries the GPU machine may lack (not CUDA's: found there).
  local lib
  for lib in $(ldd "$bundle"/tests/* "$bundle"/benchmarks/* 2>/dev/null | awk '/libbenchmark/ {print $3}' | sort -u); do
    cp -L "$lib" "$bundle/lib/"
  done
  cp tools/gpu_check.sh "$bundle/"
  strip --strip-debug "$bundle"/tests/* "$bundle"/benchmarks/* 2>/dev/null || true
  local size
  size=$(du -sm "$bundle" | cut -f1)
  echo "gpu_check build: $bundle holds $(ls "$bundle/tests" | wc -l) test(s), $(ls "$bundle/benchmarks" | wc -l) benchmark(s), ${size} MiB"
  if [[ $size -ge 64 ]]; then
    echo "gpu_check build: bundle is ${size} MiB, over the 64 MiB a device call can carry" >&2
    exit 1
  fi
}

library_path() {
  local dirs=("$bundle/lib") d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64 \
           /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
    [[ -d $d ]] && dirs+=("$d")
  done
  # pip-installed CUDA libraries (nvidia-nccl-cu*, nvidia-cublas-cu*, ...).
  while IFS= read -r d; do dirs+=("$d"); done < <(
    find /usr /opt /root /home -maxdepth 7 -type d -path '*site-packages/nvidia/*/lib' 2>/dev/null | sort -u)
  local IFS=:
  echo "${dirs[*]}"
}

run() {
  export LD_LIBRARY_PATH="$(library_path)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  command -v nvidia-smi >/dev/null && nvidia-smi -L
  local passed=0 failed=0 skipped=0 bin name log rc
  local failures=()
  log=$(mktemp)
  for bin in "$bundle"/tests/*; do
    [[ -x $bin ]] || continue
    name=$(basename "$bin")
    timeout "${GPU_TEST_TIMEOUT:-300}" "$bin" >"$log" 2>&1
    rc=$?
    if [[ $rc -ne 0 ]]; then
      failed=$((failed + 1)); failures+=("$name (exit $rc)")
      echo "--- $name FAILED (exit $rc)"; tail -40 "$log"
    elif grep -q '^\[  SKIPPED \]' "$log" && ! grep -q '^\[       OK \]' "$log"; then
      skipped=$((skipped + 1)); echo "--- $name SKIPPED: $(grep -m1 -A1 'Skipped' "$log" | tail -1)"
    else
      passed=$((passed + 1)); echo "--- $name PASSED ($(grep -c '^\[       OK \]' "$log") cases)"
    fi
  done
  for bin in "$bundle"/benchmarks/*; do
    [[ -x $bin ]] || continue
    name=$(basename "$bin")
    echo "--- benchmark $name"
    if timeout "${GPU_BENCH_TIMEOUT:-300}" "$bin" --benchmark_min_time=0.05 2>&1; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1)); failures+=("benchmark $name")
    fi
  done
  rm -f "$log"
  [[ ${#failures[@]} -gt 0 ]] && printf 'failed: %s\n' "${failures[@]}"
  echo "gpu_check: $passed passed, $failed failed, $skipped skipped"
  [[ $failed -eq 0 ]]
}

case "$mode" in
  build) build ;;
  run) run ;;
  *) echo "usage: $0 build|run" >&2; exit 2 ;;
esac
