#!/usr/bin/env bash
# The README's "main job". Until the DDP trainer lands, it installs what is
# missing, builds everything (CUDA code too, when the toolkit is present) and
# runs the core kernel benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bazel build //...
bazel run --config=opt //core:kernels_benchmark -- --benchmark_min_time=0.05 "$@"
