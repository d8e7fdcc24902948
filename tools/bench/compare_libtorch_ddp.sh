#!/usr/bin/env bash
# The reference MLP (784-512-256-10, SGD lr 0.1 momentum 0.9) as a libtorch
# module, 2 ranks x 64, one thread each, data in memory, interleaved runs,
# medians and ranges of `runs` (default 5):
#   lockstep's DDP for libtorch (interop/torch:ddp_bench --mode=lockstep)
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
runs=${1:-5}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //interop/torch:ddp_bench >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/interop/torch/ddp_bench "$tmp/"
wall() { /usr/bin/python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['wall_samples_per_s'])"; }
echo "# runs: $runs; load before: $(cut -d' ' -f1 /proc/loadavg)" >&2
for run in $(seq "$runs"); do
  echo "lockstep $("$tmp/ddp_bench" --nproc=2 --mode=lockstep | wall)" >>"$tmp/rows"
  echo "c10d_recipe $("$tmp/ddp_bench" --nproc=2 --mode=c10d_recipe | wall)" >>"$tmp/rows"
  echo "local $("$tmp/ddp_bench" --nproc=2 --mode=local | wall)" >>"$tmp/rows"
  echo "torch_ddp $(/usr/bin/python3 tools/bench/peers/torch_ddp_mlp.py --steps 300 --warmup 30 2>/dev/null | wall)" >>"$tmp/rows"
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
/usr/bin/python3 - "$tmp/rows" "$runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, value = line.split()
    rows.setdefault(name, []).append(float(value))
med = {k: statistics.median(v) for k, v in rows.items()}
print(f"| configuration (2 ranks x 64, median of {sys.argv[2]} runs) | samples/s | range | lockstep / this |")
print("|---|---|---|---|")
for name, label in [("lockstep", "lockstep DDP for libtorch"), ("c10d_recipe", "C++ recipe: per-parameter c10d gloo all-reduce"),
                    ("torch_ddp", "PyTorch 1.13 Python DDP, gloo"),
                    ("local", "bound: the same step, no communication")]:
    v = rows[name]
    print(f"| {label} | {med[name]:.0f} | {min(v):.0f}-{max(v):.0f} | {med['lockstep'] / med[name]:.2f}x |")
print()
print("| run | lockstep | C++ recipe | PyTorch DDP | no communication | lockstep / recipe | lockstep / PyTorch | lockstep / bound |")
print("|---|---|---|---|---|---|---|---|")
for i, (a, b, c, d) in enumerate(zip(rows["lockstep"], rows["c10d_recipe"], rows["torch_ddp"], rows["local"]), 1):
    print(f"| {i} | {a:.0f} | {b:.0f} | {c:.0f} | {d:.0f} | {a / b:.2f}x | {a / c:.2f}x | {a / d:.2f}x |")
PY
