#!/usr/bin/env bash
# DDP overhead on the reference libtorch models (interop/torch/models, their
# Python twins in interop/torch/models/reference_models.py: the same
# libtorch kernels on both sides), 2 ranks, one thread each, data in memory,
# SGD momentum 0.9, interleaved runs, medians and ranges of `runs`
# (default 3):
#   lockstep        lockstep's DDP for libtorch (interop/torch/ddp:ddp_bench --mode=lockstep)
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
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-3}
shift || true
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(resnet18:32 char_transformer:2)
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //interop/torch/ddp:ddp_bench >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/interop/torch/ddp/ddp_bench "$tmp/"
field() { lib json step_ms_median peak_rss_mb; }
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
# Per model: each configuration's median step, and the DDP overhead of each
# beside PyTorch's (tools/bench/compare_lib.py).
table() { lib table "$tmp/rows" --fields "config tool ms rss" --series tool "$@"; }
for config in "${configs[@]}"; do
  model=${config%%:*} batch=${config##*:}
  table --where "config == '$config'" --rows tool:seen \
    --title $'\n'"$model, 2 ranks x $batch per rank, median step of the slowest rank over $runs runs:"$'\n' \
    --col 'configuration={tool}' --col 'step ms (median)={v("ms"):.1f}' --col 'range={v("ms").range(".1f")}' \
    --col "samples/s={2 * $batch / v('ms') * 1e3:.0f}" --col 'peak RSS per rank, MiB (last run)={last("rss")}'
  # Each DDP configuration beside the no-communication step of its language.
  table --where "config == '$config'" --rows tool \
    --order tool=lockstep,lockstep_view,c10d_recipe,torch_ddp,torch_ddp_view \
    --let 'base={"lockstep": "local", "lockstep_view": "local", "c10d_recipe": "local", "torch_ddp": "torch_local",
               "torch_ddp_view": "torch_local"}' \
    --title '' --col 'DDP overhead (DDP step - no-communication step)={tool}' \
    --col 'ms={v("ms") - V("ms", base[tool]):.1f}' \
    --col 'share of the DDP step={100 * (v("ms") - V("ms", base[tool])) / v("ms"):.0f} %' \
    --col $'/ PyTorch DDP\'s={(v("ms") - V("ms", base[tool])) / (V("ms", "torch_ddp") - V("ms", "torch_local")):.2f}'
done
