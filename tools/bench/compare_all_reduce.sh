#!/usr/bin/env bash
# lockstep's all-reduce over TCP beside PyTorch 1.13 gloo and OpenMPI over
# TCP, 2 ranks, f32 SUM, interleaved runs, medians. Prints a markdown table.
#   bash tools/bench/compare_all_reduce.sh [runs]
# LOCKSTEP_BENCH_FLAGS adds flags to lockstep's runs, e.g.
# LOCKSTEP_BENCH_FLAGS=--tcp_congestion_control= (the system's algorithm).
# Needs python3-torch and openmpi-bin/libopenmpi-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-6}
sizes=(4096 65536 1048576 16777216 67108864 268435456)
iters_for() {  # Same schedule for every tool: about 0.1-0.5 s per size.
  local b=$1
  if (( b <= 65536 )); then echo 1000; elif (( b <= 1048576 )); then echo 200;
  elif (( b <= 16777216 )); then echo 20; else echo 5; fi
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //tools/bench:collectives >/dev/null 2>&1
ours=bazel-bin/tools/bench/collectives
mpibin=$(mktemp -d)/mpi_all_reduce
mpicc -O2 -o "$mpibin" tools/bench/peers/mpi_all_reduce.c
out=$(mktemp)
for run in $(seq "$runs"); do
  for b in "${sizes[@]}"; do
    it=$(iters_for "$b")
    w=$(( it / 10 + 2 ))
    "$ours" --nproc=2 --min_bytes="$b" --max_bytes="$b" --iters="$it" --warmup="$w" --json ${LOCKSTEP_BENCH_FLAGS:-} |
      sed -nE 's/.*"bytes": ([0-9]+).*"time_us": ([0-9.]+).*"busbw_gbps": ([0-9.]+).*/lockstep \1 \2 \3/p' >>"$out"
    /usr/bin/python3 tools/bench/peers/gloo_all_reduce.py --nproc 2 --bytes "$b" --iters "$it" --warmup "$w" >>"$out" 2>/dev/null
    mpirun --allow-run-as-root -np 2 --mca btl tcp,self --mca btl_tcp_if_include lo "$mpibin" "$b" "$it" "$w" >>"$out" 2>/dev/null
  done
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
/usr/bin/python3 - "$out" "$runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    tool, b, t, bw = line.split()
    rows.setdefault((tool, int(b)), []).append((float(t), float(bw)))
def med(tool, b, k):
    v = [x[k] for x in rows.get((tool, b), [])]
    return statistics.median(v) if v else float("nan")
def spread(tool, b):
    v = [x[0] for x in rows.get((tool, b), [])]
    return (min(v), max(v)) if v else (float("nan"), float("nan"))
def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"
# Runs are interleaved (lockstep, gloo, MPI for one size, then the next), so
# each run's ratio compares tools measured within seconds of each other; the
# machine switches between fast and slow modes (../shared/BENCHMARKING.md).
def run_ratios(b):
    ours = [x[0] for x in rows.get(("lockstep", b), [])]
    g = [x[0] for x in rows.get(("gloo", b), [])]
    m = [x[0] for x in rows.get(("mpi", b), [])]
    return [min(gg, mm) / o for o, gg, mm in zip(ours, g, m)]
print(f"| size | lockstep | PyTorch gloo | OpenMPI TCP | best peer / lockstep (median of medians) | median of per-run ratios | (median of {sys.argv[2]} runs; time us / busbw GB/s)")
print("|---|---|---|---|---|---|")
for b in sorted({k[1] for k in rows}):
    cells = []
    for tool in ("lockstep", "gloo", "mpi"):
        lo, hi = spread(tool, b)
        cells.append(f"{med(tool, b, 0):.1f} us / {med(tool, b, 1):.2f} (range {lo:.0f}-{hi:.0f} us)")
    best = min(med("gloo", b, 0), med("mpi", b, 0))
    ratios = run_ratios(b)
    per_run = statistics.median(ratios) if ratios else float("nan")
    print(f"| {size(b)} | " + " | ".join(cells) + f" | {best / med('lockstep', b, 0):.2f}x | {per_run:.2f}x |")
PY
rm -f "$out"
