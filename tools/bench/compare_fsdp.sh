#!/usr/bin/env bash
# FSDP's step beside DDP's on the reference libtorch models, 2 ranks, one
# thread each, data in memory, SGD momentum 0.9, interleaved runs: the median
# step of the slowest rank (median over `runs`, default 3) of
#   ddp    lockstep's DDP for libtorch (interop/torch/ddp:ddp_bench --mode=lockstep)
#   fsdp   lockstep's FSDP for libtorch (--mode=fsdp: every block a unit)
# their ratio (the goal: fsdp <= 1.25 x ddp), and the bytes each rank sends
# per step beside the textbook: DDP's ring all-reduce 2 Psi (N-1)/N, ZeRO-3's
# 3 Psi (N-1)/N (two all-gathers and a reduce-scatter), Psi in bytes.
#   bash tools/bench/compare_fsdp.sh [runs] [resnet18:32] [char_transformer:2]
# Needs libtorch-dev (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
shift || true
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(resnet18:32 char_transformer:2)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
bench=${LOCKSTEP_DDP_BENCH:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [[ -z $bench ]]; then
  bazel build --config=opt //interop/torch/ddp:ddp_bench >/dev/null 2>&1
  cp -L bazel-bin/interop/torch/ddp/ddp_bench "$tmp/"
  bench="$tmp/ddp_bench"
fi
json() { /usr/bin/python3 -c 'import json, sys; d = json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d["step_ms_median"], d["bytes_sent_per_step"])'; }
echo "# runs: $runs; configs: ${configs[*]}; load before: $(cut -d' ' -f1 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for run in $(seq "$runs"); do
  for config in "${configs[@]}"; do
    model=${config%%:*} batch=${config##*:}
    steps=40 warmup=5
    [[ $model == char_transformer ]] && steps=20 warmup=3
    for mode in lockstep fsdp; do
      echo "$config $mode $("$bench" --nproc=2 --mode="$mode" --model="$model" --batch="$batch" --steps="$steps" --warmup="$warmup" | json)" >>"$tmp/rows"
    done
  done
done
/usr/bin/python3 - "$tmp/rows" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
# Parameter bytes of each model (f32): interop/torch/models.
psi = {"resnet18": 11175370 * 4, "char_transformer": 10784370 * 4}
for config in dict.fromkeys(r[0] for r in rows):
    ms = {m: statistics.median(float(r[2]) for r in rows if r[0] == config and r[1] == m) for m in ("lockstep", "fsdp")}
    sent = {m: statistics.median(float(r[3]) for r in rows if r[0] == config and r[1] == m) for m in ("lockstep", "fsdp")}
    p = psi[config.split(":")[0]]
    print(f"{config}: ddp {ms['lockstep']:.1f} ms, fsdp {ms['fsdp']:.1f} ms, fsdp/ddp {ms['fsdp'] / ms['lockstep']:.3f}; "
          f"bytes sent per step: ddp {sent['lockstep'] / 2**20:.1f} MiB ({sent['lockstep'] / (p):.2f} Psi), "
          f"fsdp {sent['fsdp'] / 2**20:.1f} MiB ({sent['fsdp'] / p:.2f} Psi; ZeRO-3's 3 Psi (N-1)/N = 1.50 Psi)")
PY
