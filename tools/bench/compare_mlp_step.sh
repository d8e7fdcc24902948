#!/usr/bin/env bash
# lockstep's MLP training step beside PyTorch 1.13's, one core, interleaved
# runs, medians. Needs python3-torch (LOCKSTEP_SETUP_TORCH=1 bash tools/setup.sh).
#   bash tools/bench/compare_mlp_step.sh [runs]
# Both are pinned to the same CPU (taskset) so neither gets a second core.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-5}
bazel build --config=opt //nn:mlp_step_benchmark >/dev/null 2>&1
bin=bazel-bin/nn/mlp_step_benchmark
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rows=$out/rows  # run tool step ms
for r in $(seq "$runs"); do
  OPENBLAS_NUM_THREADS=1 taskset -c 0 "$bin" --benchmark_min_time=1 --benchmark_format=csv 2>/dev/null >"$out/ours.$r.csv"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c 0 \
    /usr/bin/python3 tools/bench/peers/torch_mlp_step.py 1 >"$out/torch.$r.txt"
done
for r in $(seq "$runs"); do
  # BM_MlpTrainStepSgd/real_time is the peer's MlpTrainStepSgd.
  lib gbench "$out/ours.$r.csv" real_time |
    sed -E "s#^BM_([^/ ]*)[^ ]* #$r lockstep \\1 #" >>"$rows"
  sed -nE "s#^([^:]+): ([^ ]+).*#$r torch \\1 \\2#p" "$out/torch.$r.txt" >>"$rows"
done
lib table "$rows" --fields "run tool step ms" --series tool \
  --rows step:seen --require lockstep --require torch --col 'step (batch 128, 784-512-256-10, 1 core)={step}' \
  --col 'lockstep ms={v("ms", "lockstep"):.2f}' --col 'PyTorch 1.13 ms={v("ms", "torch"):.2f}' \
  --col 'PyTorch / lockstep={v("ms", "torch") / v("ms", "lockstep"):.2f}x' \
  --col "runs=$runs (lockstep {v('ms', 'lockstep').range('.2f')}, PyTorch {v('ms', 'torch').range('.2f')})"
