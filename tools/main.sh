#!/usr/bin/env bash
# The README's "main job": installs what is missing, then trains the
# reference MLP (784-512-256-10, SGD lr 0.1 momentum 0.9, batch 64 per rank)
# with DistributedDataParallel on 2 local ranks on Fashion-MNIST for 3 epochs,
# printing each epoch's loss, test accuracy and samples/s, then the final
# accuracy and throughput. Extra arguments go to the trainer, e.g.
#   bash tools/main.sh --comm_hook=fp16_compress --trace=/tmp/trace
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
out="${TMPDIR:-/tmp}/lockstep_main"
mkdir -p "$out"
bazel run --config=opt //trainers:ddp_trainer -- \
  --nproc=2 --epochs=3 --model=mlp --dataset=fashion-mnist \
  --metrics="$out/metrics.jsonl" "$@"
echo "main: per-epoch metrics (JSON lines) in $out/metrics.jsonl"
