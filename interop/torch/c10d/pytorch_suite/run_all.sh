#!/usr/bin/env bash
# PyTorch 1.13's distributed test suite on gloo, on lockstep and on lockstep
# as gloo (run_distributed_suite.py), world sizes 2 and 3, then the
# comparison into docs/TORCH_SUITE.md (compare_suite.py, which exits 1 when
# a test that passes on gloo does not pass on lockstep and is not listed in
# expected_differences.txt). About 35 minutes on 2 cores.
#
#   bash interop/torch/c10d/pytorch_suite/run_all.sh [RESULTS_DIR]
#
# WORLD_SIZES ("2 3") and RUNS ("gloo lockstep asgloo") narrow it; -k
# patterns in SUITE_K ("test_all_reduce test_ddp") select tests.
set -euo pipefail
cd "$(dirname "$0")/../../.."
repo=$(pwd)
python=/usr/bin/python3
results=${1:-$(mktemp -d /tmp/lockstep_suite.XXXXXX)}
mkdir -p "$results"
bazel build //interop/torch:lockstep_torch >"$results/build.log" 2>&1 || { tail -n 20 "$results/build.log" >&2; exit 2; }
module=$(mktemp -d)
trap 'rm -rf "$module"' EXIT
cp -L bazel-bin/interop/torch/lockstep_torch.so "$module/"
k_args=()
for k in ${SUITE_K:-}; do k_args+=(-k "$k"); done
for world in ${WORLD_SIZES:-2 3}; do
  for run in ${RUNS:-gloo lockstep asgloo}; do
    backend=$run as_gloo=0
    [[ $run == asgloo ]] && backend=gloo as_gloo=1
    temp=$(mktemp -d)
    start=$(date +%s)
    BACKEND=$backend LOCKSTEP_AS_GLOO=$as_gloo WORLD_SIZE=$world TEMP_DIR=$temp OMP_NUM_THREADS=1 \
      PYTHONPATH="$module:$repo/interop/torch/c10d/pytorch_suite" PYTHONWARNINGS=ignore \
      timeout -k 10 3600 "$python" interop/torch/c10d/pytorch_suite/run_distributed_suite.py \
      --json "$results/${run}_${world}.json" "${k_args[@]}" >"$results/${run}_${world}.log" 2>&1 || true
    rm -rf "$temp"
    [[ -f "$results/${run}_${world}.json" ]] || { echo "run_all: $run at world size $world wrote no results (log: $results/${run}_${world}.log)" >&2; exit 1; }
    echo "run_all: $run, world size $world: $(( $(date +%s) - start )) s" >&2
  done
done
python3 interop/torch/c10d/pytorch_suite/compare_suite.py "$results" --write docs/TORCH_SUITE.md
