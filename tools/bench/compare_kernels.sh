#!/usr/bin/env bash
# lockstep's CPU kernels beside PyTorch 1.13's on one thread, interleaved runs,
# medians. Needs python3-torch (LOCKSTEP_SETUP_TORCH=1 bash tools/setup.sh).
#   bash tools/bench/compare_kernels.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-3}
bazel build --config=opt //core:kernels_benchmark >/dev/null 2>&1
bin=bazel-bin/core/kernels_benchmark
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rows=$out/rows  # run tool kernel rate (lockstep: bytes/s; PyTorch: GiB/s)
for r in $(seq "$runs"); do
  "$bin" --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null >"$out/ours.$r.csv"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/torch_kernels.py >"$out/torch.$r.txt"
done
for r in $(seq "$runs"); do
  # Google Benchmark's names as the peer prints them: BM_ReduceSum/f32/1024 is reduce_sum/f32/1024.
  lib gbench "$out/ours.$r.csv" bytes_per_second |
    sed -nE 's#^BM_ReduceSum/(\w+)/([0-9]+) #reduce_sum/\1/\2 #p; s#^BM_Cast/(\w+)/([0-9]+) #cast/\1/\2 #p
             s#^BM_AllFinite/([0-9]+) #all_finite/\1 #p; s#^BM_Scale/([0-9]+) #scale/\1 #p' |
    sed "s/^/$r lockstep /" >>"$rows"
  sed -nE "s#^([^:]+): ([^ ]+).*#$r torch \\1 \\2#p" "$out/torch.$r.txt" >>"$rows"
done
lib table "$rows" --fields "run tool kernel rate" --series tool \
  --rows kernel --require lockstep --require torch --col 'kernel={kernel}' \
  --col 'lockstep GiB/s={v("rate", "lockstep") / 2**30:.1f}' --col 'PyTorch 1.13 GiB/s={v("rate", "torch"):.1f}' \
  --col 'ratio={v("rate", "lockstep") / 2**30 / v("rate", "torch"):.2f}x' \
  --note "(median of $runs interleaved runs)"
