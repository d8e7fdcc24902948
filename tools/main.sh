#!/usr/bin/env bash
# The README's "main job". Until the DDP trainer lands, it installs what is
# missing, builds everything (CUDA code too, when the toolkit is present),
# runs a checked all-reduce sweep on 2 local ranks over TCP and the MLP
# training-step benchmark on one core.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //...
bazel build --config=opt //tools/bench:collectives //nn:mlp_step_benchmark
bazel-bin/tools/bench/collectives --nproc=2 --op=all_reduce --dtype=f32 \
  --min_bytes=4K --max_bytes=64M --step_factor=16 --iters=20 --warmup=5 --check
OPENBLAS_NUM_THREADS=1 bazel-bin/nn/mlp_step_benchmark --benchmark_min_time=0.2 "$@"
