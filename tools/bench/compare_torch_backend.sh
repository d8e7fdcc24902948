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
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.

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
    --warmup=$(( $2 / 10 + 2 )) --json 2>>"$tmp/errors.log" | lib json time_us
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
    sps=$(lib json samples_per_s <<<"$line" 2>/dev/null) || sps=
    record "$run" "ddp_$backend" 0 "$sps"
  done
  echo "run $run of $runs done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
[[ -n ${KEEP_ROWS:-} ]] && cp "$rows" "$KEEP_ROWS"

# Medians per backend and size, busbw from the median time (2 ranks: the
# factor 2(n-1)/n is 1), and the per-run ratios (tools/bench/compare_lib.py).
cell() { echo "{v('t', '$1'):.1f} us, {int(bytes) / (v('t', '$1') * 1e-6) / 1e9:.2f}"; }
lib table "$rows" --fields "run tool bytes t load" --series tool --pair run \
  --where "tool in ('gloo', 'lockstep', 'native')" --rows bytes \
  --title $'\ntorch.distributed.all_reduce, f32 SUM, 2 ranks, medians of '"$runs"' runs (time us, busbw GB/s;'\
$' ratio = gloo time / lockstep time; binding = torch-lockstep time / native time)\n' \
  --col 'size={size(bytes)}' --col "gloo=$(cell gloo)" --col "lockstep (torch)=$(cell lockstep)" \
  --col "lockstep native=$(cell native)" --col 'lockstep / gloo=**{ratio("t", "gloo", "lockstep"):.2f}x**' \
  --col 'binding={ratio("t", "lockstep", "native"):.2f}x'
if grep -q ' ddp_gloo ' "$rows" && grep -q ' ddp_lockstep ' "$rows"; then
  lib say "$rows" --fields "run tool bytes t load" --series tool --pair run \
    $'\nPyTorch DDP, reference MLP, 2 ranks x 64: gloo {v("t", "ddp_gloo"):.0f} samples/s, lockstep'\
' {v("t", "ddp_lockstep"):.0f} samples/s, lockstep / gloo **{ratio("t", "ddp_lockstep", "ddp_gloo"):.2f}x**'\
' (per-run ratios {ratio("t", "ddp_lockstep", "ddp_gloo").join()})'
fi
