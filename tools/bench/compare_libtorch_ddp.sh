#!/usr/bin/env bash
# The reference MLP (784-512-256-10, SGD lr 0.1 momentum 0.9) as a libtorch
# module, 2 ranks x 64, one thread each, data in memory, interleaved runs,
# medians and ranges of `runs` (default 5):
#   lockstep's DDP for libtorch (interop/torch/ddp:ddp_bench --mode=lockstep)
#   the C++ recipe users write today: per-parameter all-reduce after
#     backward over c10d's ProcessGroupGloo from C++ (--mode=c10d_recipe,
#     pytorch/examples' dist-mnist.cpp)
#   PyTorch 1.13's Python DDP, gloo (tools/bench/peers/torch_ddp_mlp.py)
#   and, as the bound, the same step without any communication
#     (--mode=local: each rank trains alone)
# All three report the slowest rank's wall time over 300 steps after 30 of
# warm-up: samples/s = steps x 128 / that time.
#   bash tools/bench/compare_libtorch_ddp.sh [runs]
# Needs libtorch-dev, libgloo-dev and python3-torch (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-5}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //interop/torch/ddp:ddp_bench >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/interop/torch/ddp/ddp_bench "$tmp/"
wall() { lib json wall_samples_per_s; }
echo "# runs: $runs; load before: $(cut -d' ' -f1 /proc/loadavg)" >&2
for run in $(seq "$runs"); do  # rows: run configuration samples/s
  echo "$run lockstep $("$tmp/ddp_bench" --nproc=2 --mode=lockstep | wall)" >>"$tmp/rows"
  echo "$run c10d_recipe $("$tmp/ddp_bench" --nproc=2 --mode=c10d_recipe | wall)" >>"$tmp/rows"
  echo "$run local $("$tmp/ddp_bench" --nproc=2 --mode=local | wall)" >>"$tmp/rows"
  echo "$run torch_ddp $(/usr/bin/python3 tools/bench/peers/torch_ddp_mlp.py --steps 300 --warmup 30 2>/dev/null | wall)" >>"$tmp/rows"
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
table() { lib table "$tmp/rows" --fields "run tool sps" --series tool "$@"; }
table --rows tool --order tool=lockstep,c10d_recipe,torch_ddp,local \
  --let 'label={"lockstep": "lockstep DDP for libtorch", "c10d_recipe": "C++ recipe: per-parameter c10d gloo all-reduce",
                "torch_ddp": "PyTorch 1.13 Python DDP, gloo", "local": "bound: the same step, no communication"}' \
  --col "configuration (2 ranks x 64, median of $runs runs)={label[tool]}" --col 'samples/s={v("sps"):.0f}' \
  --col 'range={v("sps").range(".0f")}' --col 'lockstep / this={V("sps", "lockstep") / v("sps"):.2f}x'
table --rows run --title '' --col 'run={run}' --col 'lockstep={v("sps", "lockstep"):.0f}' \
  --col 'C++ recipe={v("sps", "c10d_recipe"):.0f}' --col 'PyTorch DDP={v("sps", "torch_ddp"):.0f}' \
  --col 'no communication={v("sps", "local"):.0f}' \
  --col 'lockstep / recipe={v("sps", "lockstep") / v("sps", "c10d_recipe"):.2f}x' \
  --col 'lockstep / PyTorch={v("sps", "lockstep") / v("sps", "torch_ddp"):.2f}x' \
  --col 'lockstep / bound={v("sps", "lockstep") / v("sps", "local"):.2f}x'
