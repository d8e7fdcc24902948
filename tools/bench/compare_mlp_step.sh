#!/usr/bin/env bash
# lockstep's MLP training step beside PyTorch 1.13's, one core, interleaved
# runs, medians. Needs python3-torch (LOCKSTEP_SETUP_TORCH=1 bash tools/setup.sh).
#   bash tools/bench/compare_mlp_step.sh [runs]
# Both are pinned to the same CPU (taskset) so neither gets a second core.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-5}
bazel build --config=opt //nn:mlp_step_benchmark >/dev/null 2>&1
bin=bazel-bin/nn/mlp_step_benchmark
out=$(mktemp -d)
for r in $(seq "$runs"); do
  OPENBLAS_NUM_THREADS=1 taskset -c 0 "$bin" --benchmark_min_time=1 --benchmark_format=csv 2>/dev/null >"$out/ours.$r.csv"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 taskset -c 0 \
    /usr/bin/python3 tools/bench/peers/torch_mlp_step.py 1 >"$out/torch.$r.txt"
done
/usr/bin/python3 - "$out" "$runs" <<'PY'
import csv, glob, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
ours, torch = {}, {}
for f in glob.glob(f"{d}/ours.*.csv"):
    for row in csv.DictReader(l for l in open(f) if not l.startswith("#")):
        name = row["name"].split("/")[0].removeprefix("BM_")
        ours.setdefault(name, []).append(float(row["real_time"]))
for f in glob.glob(f"{d}/torch.*.txt"):
    for line in open(f):
        k, v = line.split(": ")
        torch.setdefault(k, []).append(float(v.split()[0]))
print(f"| step (batch 128, 784-512-256-10, 1 core) | lockstep ms | PyTorch 1.13 ms | PyTorch / lockstep | runs |")
print("|---|---|---|---|---|")
for k in ours:
    if k in torch:
        o, t = statistics.median(ours[k]), statistics.median(torch[k])
        spread = f"lockstep {min(ours[k]):.2f}-{max(ours[k]):.2f}, PyTorch {min(torch[k]):.2f}-{max(torch[k]):.2f}"
        print(f"| {k} | {o:.2f} | {t:.2f} | {t/o:.2f}x | {runs} ({spread}) |")
PY
rm -rf "$out"
