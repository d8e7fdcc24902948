#!/usr/bin/env bash
# Time lost per failure, fault-tolerant training (lockstep-run
# --fault_tolerant) beside today's restart from a checkpoint (--max_restarts,
# checkpoints every 100 steps, --resume), 3 ranks, one SIGKILL at step 150,
# and the overhead of fault tolerance without a failure
# (tools/bench/compare_fault_tolerance.py says how).
#   bash tools/bench/compare_fault_tolerance.sh [runs] [mlp|resnet18 ...]
# The MLP: ddp_trainer's reference MLP, batch 64 per rank, 400 steps.
# ResNet-18: resnet18_trainer (libtorch, width 64), batch 16 per rank, 200 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
shift || true
models=("$@")
[[ ${#models[@]} -gt 0 ]] || models=(mlp resnet18)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bazel build --config=opt //tools/launch:lockstep-run //trainers:ddp_trainer //interop/torch/trainers:resnet18_trainer >/dev/null 2>&1
cp -L bazel-bin/tools/launch/lockstep-run bazel-bin/trainers/ddp_trainer bazel-bin/interop/torch/trainers/resnet18_trainer "$tmp/"
echo "# runs: $runs; load before: $(cut -d' ' -f1 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for model in "${models[@]}"; do
  echo "## $model"
  case $model in
    mlp) /usr/bin/python3 tools/bench/compare_fault_tolerance.py --trainer "$tmp/ddp_trainer" --launcher "$tmp/lockstep-run" \
           --runs "$runs" --steps 400 --kill_at 150 --batch 64 ;;
    resnet18) /usr/bin/python3 tools/bench/compare_fault_tolerance.py --trainer "$tmp/resnet18_trainer" \
           --launcher "$tmp/lockstep-run" --runs "$runs" --steps 200 --kill_at 150 --batch 16 ;;
    *) echo "unknown model $model" >&2; exit 2 ;;
  esac
done
