#!/usr/bin/env bash
# Training throughput of the reference MLP (784-512-256-10, SGD lr 0.1
# momentum 0.9, global batch 128, one BLAS thread per process) beside PyTorch
# 1.13 in the same session, interleaved, medians of `runs` (default 5):
#   lockstep ddp_trainer, 2 ranks x 64 (shared memory: the automatic choice on one host)
#                                             vs  PyTorch DDP, gloo, 2 ranks x 64
#   lockstep single_trainer, batch 128         vs  PyTorch, one process, batch 128
#   bash tools/bench/compare_ddp_step.sh [runs]
# With MODEL=cnn, the reference CNN (--model=cnn: 2 x Conv-BatchNorm2d-ReLU-
# MaxPool, Linear 3136-128-10) in both instead of the MLP.
# With AMP=bf16, both under bf16 autocast (lockstep --amp=bf16; PyTorch
# torch.autocast("cpu", dtype=torch.bfloat16)): for the CNN, convolutions,
# BatchNorm, ReLU, MaxPool and Linear on bf16 activations in both.
# With DDP_VIEWS=1, a third pair too: both DDPs with gradient_as_bucket_view
# (gradients are views into the buckets: no copy into and out of them;
# PyTorch's default and ours is off).
# lockstep: samples/s of one epoch of Fashion-MNIST (60,000 examples) from the
# trainer's metrics: wall time of the training loop, data loading included.
# PyTorch (tools/bench/peers/torch_{ddp,single}_mlp.py): samples/s of the
# slowest rank's wall time over 300 steps on tensors already in memory.
# Both use the same OpenBLAS kernels: the trainers pick OPENBLAS_CORETYPE when
# OpenBLAS does not know the CPU (nn/blas_kernels.h); the peers get the same.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-5}
model=${MODEL:-mlp}
amp=${AMP:-off}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //trainers:ddp_trainer //trainers:single_trainer >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/trainers/ddp_trainer bazel-bin/trainers/single_trainer "$tmp/"
core=$("$tmp/single_trainer" --epochs=1 --max_steps=1 --dataset=synthetic --synthetic_train_size=256 \
         --synthetic_test_size=0 2>&1 | sed -n 's/.*BLAS kernels \([A-Za-z0-9]*\).*/\1/p' | head -1)
peer_env=()
[[ -n ${core:-} && -z ${OPENBLAS_CORETYPE:-} ]] && peer_env=(OPENBLAS_CORETYPE="$core")
echo "# model: $model; amp: $amp; BLAS kernels: ${core:-unknown}; runs: $runs; load before: $(cut -d' ' -f1 /proc/loadavg)" >&2
ours() {  # config binary args... -> "config lockstep samples/s"
  local config=$1 bin=$2; shift 2
  rm -f "$tmp/m.jsonl"
  "$tmp/$bin" --epochs=1 --dataset=fashion-mnist --model="$model" --amp="$amp" --metrics="$tmp/m.jsonl" "$@" >/dev/null 2>&1
  echo "$config lockstep $(lib json samples_per_s --has '"epoch"' <"$tmp/m.jsonl")"
}
peer() {  # config script [flags] -> "config torch samples/s"
  local config=$1 script=$2; shift 2
  echo "$config torch $(env "${peer_env[@]}" /usr/bin/python3 "tools/bench/peers/$script" --steps 300 --warmup 30 \
    --model "$model" --amp "$amp" "$@" 2>/dev/null | lib json wall_samples_per_s)"
}
out="$tmp/rows"  # run config side samples/s
for run in $(seq "$runs"); do
  echo "$run $(ours ddp ddp_trainer --nproc=2 --batch_size=64)" >>"$out"
  echo "$run $(peer ddp torch_ddp_mlp.py)" >>"$out"
  echo "$run $(ours single single_trainer --batch_size=128)" >>"$out"
  echo "$run $(peer single torch_single_mlp.py)" >>"$out"
  if [[ ${DDP_VIEWS:-0} == 1 ]]; then
    echo "$run $(ours ddp_views ddp_trainer --nproc=2 --batch_size=64 --gradient_as_bucket_view)" >>"$out"
    echo "$run $(peer ddp_views torch_ddp_mlp.py --gradient_as_bucket_view)" >>"$out"
  fi
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
table() { lib table "$out" --fields "run config side sps" --series side "$@"; }
table --rows config:seen \
  --let 'label={"ddp": "DDP, 2 ranks x 64", "single": "one process, batch 128",
                "ddp_views": "DDP, gradient_as_bucket_view"}' \
  --col 'configuration={label[config]}' --col 'lockstep samples/s={v("sps", "lockstep").spread(".0f")}' \
  --col 'PyTorch 1.13 samples/s={v("sps", "torch").spread(".0f")}' \
  --col 'ratio={v("sps", "lockstep") / v("sps", "torch"):.2f}x' \
  --note "(median of $runs runs, BLAS kernels ${core:-unknown}, model $model $amp)" \
  --footer '| lockstep DDP / PyTorch single | {V("sps", "lockstep", config="ddp"):.0f} '\
'| {V("sps", "torch", config="single"):.0f} '\
'| {V("sps", "lockstep", config="ddp") / V("sps", "torch", config="single"):.2f}x |'
# Each run's own ratios (its four figures were measured back to back).
table --rows run --title '' --col 'run={run}' --col 'lockstep DDP={v("sps", "lockstep", config="ddp"):.0f}' \
  --col 'PyTorch DDP={v("sps", "torch", config="ddp"):.0f}' \
  --col 'PyTorch single={v("sps", "torch", config="single"):.0f}' \
  --col 'DDP / PyTorch DDP={v("sps", "lockstep", config="ddp") / v("sps", "torch", config="ddp"):.2f}x' \
  --col 'DDP / PyTorch single={v("sps", "lockstep", config="ddp") / v("sps", "torch", config="single"):.2f}x'
