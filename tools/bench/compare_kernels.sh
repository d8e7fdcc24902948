#!/usr/bin/env bash
# lockstep's CPU kernels beside PyTorch 1.13's on one thread, interleaved runs,
# medians. Needs python3-torch (LOCKSTEP_SETUP_TORCH=1 bash tools/setup.sh).
#   bash tools/bench/compare_kernels.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
bazel build --config=opt //core:kernels_benchmark >/dev/null 2>&1
bin=bazel-bin/core/kernels_benchmark
out=$(mktemp -d)
for r in $(seq "$runs"); do
  "$bin" --benchmark_min_time=0.1 --benchmark_format=csv 2>/dev/null >"$out/ours.$r.csv"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/torch_kernels.py >"$out/torch.$r.txt"
done
/usr/bin/python3 - "$out" "$runs" <<'PY'
import csv, glob, re, statistics, sys
d, runs = sys.argv[1], int(sys.argv[2])
ours, torch = {}, {}
for f in glob.glob(f"{d}/ours.*.csv"):
    for row in csv.DictReader(l for l in open(f) if not l.startswith("#")):
        m = re.match(r"BM_(\w+?)/(\w+)/(\d+)$", row["name"]) or re.match(r"BM_(\w+)/(\d+)$", row["name"])
        if not m: continue
        g = m.groups()
        key = {"ReduceSum": f"reduce_sum/{g[1]}/{g[-1]}" if len(g) == 3 else None,
               "Cast": f"cast/{g[1]}/{g[-1]}" if len(g) == 3 else None,
               "AllFinite": f"all_finite/{g[-1]}", "Scale": f"scale/{g[-1]}"}.get(g[0])
        if key: ours.setdefault(key, []).append(float(row["bytes_per_second"]) / 2**30)
for f in glob.glob(f"{d}/torch.*.txt"):
    for line in open(f):
        k, v = line.split(": ")
        torch.setdefault(k, []).append(float(v.split()[0]))
print(f"| kernel | lockstep GiB/s | PyTorch 1.13 GiB/s | ratio | (median of {runs} interleaved runs)")
print("|---|---|---|---|")
for k in sorted(torch):
    if k in ours:
        o, t = statistics.median(ours[k]), statistics.median(torch[k])
        print(f"| {k} | {o:.1f} | {t:.1f} | {o/t:.2f}x |")
PY
rm -rf "$out"
