#!/usr/bin/env bash
# torch.distributed over lockstep's backend beside gloo, from Python, 2 ranks:
#
#   bash tools/bench/compare_torch_backend.sh [runs]      (default 5)
#
# 1. dist.all_reduce (f32 SUM, blocking) 4 KiB .. 256 MiB
#    (tools/bench/peers/gloo_all_reduce.py --backend gloo|lockstep), beside
#    lockstep's own benchmark at the same sizes (//tools/bench:collectives,
#    --transport=auto as the backend chooses): what the binding costs.
#    Per run and size the three run one after the other, the order rotating
#    between runs; medians of the slowest rank's mean time, busbw from it.
# 2. PyTorch DDP training, the reference MLP, global batch 128
#    (tools/bench/peers/torch_ddp_mlp.py --backend gloo|lockstep), alternating;
#    median samples/s per backend and the median of the per-run ratios.
#
# SIZES (bytes) and DDP_STEPS (200) narrow it. Needs python3-torch.
set -euo pipefail
cd "$(dirname "$0")/../.."

die() { echo "compare_torch_backend: $*" >&2; exit 2; }
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "runs must be a positive number, not '$runs'"
sizes=(${SIZES:-4096 65536 1048576 16777216 67108864 268435456})
ddp_steps=${DDP_STEPS:-200}
python=/usr/bin/python3
"$python" -c "import torch.distributed" 2>/dev/null || die "$python cannot import torch.distributed (bash tools/setup.sh)"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo PYTHONWARNINGS=ignore

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! bazel build --config=opt //interop/torch:lockstep_torch //tools/bench:collectives >"$tmp/build.log" 2>&1; then
  tail -n 30 "$tmp/build.log" >&2
  die "bazel build failed"
fi
mkdir -p "$tmp/module"
cp -L bazel-bin/interop/torch/lockstep_torch.so "$tmp/module/"
cp -L bazel-bin/tools/bench/collectives "$tmp/collectives"
export PYTHONPATH="$tmp/module${PYTHONPATH:+:$PYTHONPATH}"
rows=$tmp/rows
: >"$rows"

iters_for() {
  local b=$1
  if (( b <= 65536 )); then echo 2000; elif (( b <= 1048576 )); then echo 200;
  elif (( b <= 16777216 )); then echo 20; else echo 5; fi
}
torch_run() {  # backend bytes iters -> time_us
  timeout -k 5 600 "$python" tools/bench/peers/gloo_all_reduce.py --backend "$1" --nproc 2 --bytes "$2" \
    --iters "$3" --warmup $(( $3 / 10 + 2 )) 2>>"$tmp/errors.log" | awk -v b="$1" '$1 == b {print $3}' | tail -n 1
}
native_run() {  # bytes iters -> time_us
  timeout -k 5 600 "$tmp/collectives" --op=all_reduce --nproc=2 --min_bytes="$1" --max_bytes="$1" --iters="$2" \
    --warmup=$(( $2 / 10 + 2 )) --json 2>>"$tmp/errors.log" | grep '^{' | tail -n 1 |
    sed -nE 's/.*"time_us": ([-+0-9.eE]+).*/\1/p'
}
record() {  # run what bytes time
  [[ -n $4 ]] || { echo "compare_torch_backend: $2 at $3 bytes failed in run $1:" >&2; tail -n 5 "$tmp/errors.log" >&2; return; }
  echo "$1 $2 $3 $4 $(cut -d' ' -f1 /proc/loadavg)" >>"$rows"
}

for run in $(seq "$runs"); do
  for b in "${sizes[@]}"; do
    it=$(iters_for "$b")
    order=(gloo lockstep native)
    for (( k = 0; k < (run - 1) % 3; ++k )); do order=("${order[@]:1}" "${order[0]}"); done
    for tool in "${order[@]}"; do
      case $tool in
        native) record "$run" native "$b" "$(native_run "$b" "$it")" ;;
        *) record "$run" "$tool" "$b" "$(torch_run "$tool" "$b" "$it")" ;;
      esac
    done
  done
  for backend in $( (( run % 2 )) && echo "gloo lockstep" || echo "lockstep gloo"); do
    line=$(timeout -k 5 600 "$python" tools/bench/peers/torch_ddp_mlp.py --backend "$backend" --steps "$ddp_steps" \
      --warmup 20 2>>"$tmp/errors.log" | grep '^{' | tail -n 1) || true
    sps=$(sed -nE 's/.*"samples_per_s": ([0-9.]+).*/\1/p' <<<"$line")
    record "$run" "ddp_$backend" 0 "$sps"
  done
  echo "run $run of $runs done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
[[ -n ${KEEP_ROWS:-} ]] && cp "$rows" "$KEEP_ROWS"

python3 - "$rows" "$runs" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
by = collections.defaultdict(dict)  # (tool, bytes) -> run -> value
for run, tool, b, v, load in rows:
    by[(tool, int(b))][run] = float(v)
med = lambda v: statistics.median(v) if v else float("nan")
def size(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale: return f"{b // scale} {unit}"
    return f"{b} B"
def busbw(b, us): return b / (us * 1e-6) / 1e9 * 2 * (2 - 1) / 2
print(f"\ntorch.distributed.all_reduce, f32 SUM, 2 ranks, medians of {sys.argv[2]} runs "
      "(time us, busbw GB/s; ratio = gloo time / lockstep time; binding = torch-lockstep time / native time)\n")
print("| size | gloo | lockstep (torch) | lockstep native | lockstep / gloo | binding |")
print("|---|---|---|---|---|---|")
for b in sorted({int(r[2]) for r in rows if r[1] in ("gloo", "lockstep", "native")}):
    g, l, n = by[("gloo", b)], by[("lockstep", b)], by[("native", b)]
    ratio = med([g[r] / l[r] for r in g if r in l])
    binding = med([l[r] / n[r] for r in l if r in n])
    cell = lambda d: f"{med(list(d.values())):.1f} us, {busbw(b, med(list(d.values()))):.2f}" if d else "n/a"
    print(f"| {size(b)} | {cell(g)} | {cell(l)} | {cell(n)} | **{ratio:.2f}x** | {binding:.2f}x |")
g, l = by[("ddp_gloo", 0)], by[("ddp_lockstep", 0)]
if g and l:
    ratio = med([l[r] / g[r] for r in g if r in l])
    print(f"\nPyTorch DDP, reference MLP, 2 ranks x 64: gloo {med(list(g.values())):.0f} samples/s, "
          f"lockstep {med(list(l.values())):.0f} samples/s, lockstep / gloo **{ratio:.2f}x** "
          f"(per-run ratios {', '.join(f'{l[r] / g[r]:.2f}' for r in sorted(g) if r in l)})")
PY
