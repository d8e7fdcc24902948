#!/usr/bin/env bash
# DDP overhead on the reference libtorch models (interop/torch/models, their
# Python twins in interop/torch/testdata/reference_models.py: the same
# libtorch kernels on both sides), 2 ranks, one thread each, data in memory,
# SGD momentum 0.9, interleaved runs, medians and ranges of `runs`
# (default 3):
#   lockstep        lockstep's DDP for libtorch (interop/torch:ddp_bench --mode=lockstep)
#   lockstep_view   the same with gradient_as_bucket_view
#   c10d_recipe     the C++ recipe: per-parameter c10d gloo all-reduce after backward
#   local           the same step in C++, no communication (each rank alone, both at once)
#   torch_ddp       PyTorch 1.13's Python DDP, gloo (tools/bench/peers/torch_models_ddp_peer.py)
#   torch_ddp_view  the same with gradient_as_bucket_view
#   torch_local     the same step in Python, no communication
# DDP overhead = DDP step - the same language's no-communication step (median
# step of the slowest rank); the goal is lockstep's <= 1/3 of PyTorch's at a
# per-rank batch where PyTorch's overhead is >= 10 % of its step.
#   bash tools/bench/compare_torch_models.sh [runs] [resnet18:32] [char_transformer:2]
# Needs libtorch-dev, libgloo-dev and python3-torch (tools/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
shift || true
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(resnet18:32 char_transformer:2)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //interop/torch:ddp_bench >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/interop/torch/ddp_bench "$tmp/"
field() { /usr/bin/python3 -c "import json,sys; j=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(j['step_ms_median'], ','.join(map(str, j['peak_rss_mb'])))"; }
echo "# runs: $runs; configs: ${configs[*]}; load before: $(cut -d' ' -f1 /proc/loadavg); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)" >&2
for run in $(seq "$runs"); do
  for config in "${configs[@]}"; do
    model=${config%%:*} batch=${config##*:}
    steps=40 warmup=5
    [[ $model == char_transformer ]] && steps=20 warmup=3
    common=(--model="$model" --batch="$batch" --steps="$steps" --warmup="$warmup")
    py=(/usr/bin/python3 tools/bench/peers/torch_models_ddp_peer.py --model "$model" --batch "$batch" --steps "$steps" --warmup "$warmup")
    echo "$config lockstep $("$tmp/ddp_bench" --nproc=2 --mode=lockstep "${common[@]}" | field)" >>"$tmp/rows"
    echo "$config lockstep_view $("$tmp/ddp_bench" --nproc=2 --mode=lockstep --gradient_as_bucket_view "${common[@]}" | field)" >>"$tmp/rows"
    echo "$config c10d_recipe $("$tmp/ddp_bench" --nproc=2 --mode=c10d_recipe "${common[@]}" | field)" >>"$tmp/rows"
    echo "$config local $("$tmp/ddp_bench" --nproc=2 --mode=local "${common[@]}" | field)" >>"$tmp/rows"
    echo "$config torch_ddp $("${py[@]}" --mode ddp 2>/dev/null | field)" >>"$tmp/rows"
    echo "$config torch_ddp_view $("${py[@]}" --mode ddp --gradient_as_bucket_view 2>/dev/null | field)" >>"$tmp/rows"
    echo "$config torch_local $("${py[@]}" --mode local 2>/dev/null | field)" >>"$tmp/rows"
  done
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
/usr/bin/python3 - "$tmp/rows" "$runs" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    config, tool, ms, rss = line.split()
    rows.setdefault(config, {}).setdefault(tool, []).append((float(ms), rss))
for config, tools in rows.items():
    model, batch = config.split(":")
    med = {t: statistics.median(v[0] for v in vals) for t, vals in tools.items()}
    print(f"\n{model}, 2 ranks x {batch} per rank, median step of the slowest rank over {sys.argv[2]} runs:\n")
    print("| configuration | step ms (median) | range | samples/s | peak RSS per rank, MiB (last run) |")
    print("|---|---|---|---|---|")
    for t, vals in tools.items():
        ms = [v[0] for v in vals]
        print(f"| {t} | {med[t]:.1f} | {min(ms):.1f}-{max(ms):.1f} | {2 * int(batch) / med[t] * 1e3:.0f} | {vals[-1][1]} |")
    torch_over = med["torch_ddp"] - med["torch_local"]
    print()
    print("| DDP overhead (DDP step - no-communication step) | ms | share of the DDP step | / PyTorch DDP's |")
    print("|---|---|---|---|")
    for t, base in [("lockstep", "local"), ("lockstep_view", "local"), ("c10d_recipe", "local"),
                    ("torch_ddp", "torch_local"), ("torch_ddp_view", "torch_local")]:
        over = med[t] - med[base]
        print(f"| {t} | {over:.1f} | {100 * over / med[t]:.0f} % | {over / torch_over:.2f} |")
PY
