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
ours() {  # name binary args... -> "name samples/s"
  local name=$1 bin=$2; shift 2
  rm -f "$tmp/m.jsonl"
  "$tmp/$bin" --epochs=1 --dataset=fashion-mnist --model="$model" --amp="$amp" --metrics="$tmp/m.jsonl" "$@" >/dev/null 2>&1
  /usr/bin/python3 -c "import json,sys; d=[json.loads(l) for l in open(sys.argv[1]) if '\"epoch\"' in l][-1]; print(sys.argv[2], d['samples_per_s'])" "$tmp/m.jsonl" "$name"
}
peer() {  # name script [flags] -> "name samples/s"
  local name=$1 script=$2; shift 2
  env "${peer_env[@]}" /usr/bin/python3 "tools/bench/peers/$script" --steps 300 --warmup 30 --model "$model" --amp "$amp" "$@" 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(sys.argv[1], d['wall_samples_per_s'])" "$name"
}
out="$tmp/rows"
for run in $(seq "$runs"); do
  ours lockstep_ddp ddp_trainer --nproc=2 --batch_size=64 >>"$out"
  peer torch_ddp torch_ddp_mlp.py >>"$out"
  ours lockstep_single single_trainer --batch_size=128 >>"$out"
  peer torch_single torch_single_mlp.py >>"$out"
  if [[ ${DDP_VIEWS:-0} == 1 ]]; then
    ours lockstep_ddp_views ddp_trainer --nproc=2 --batch_size=64 --gradient_as_bucket_view >>"$out"
    peer torch_ddp_views torch_ddp_mlp.py --gradient_as_bucket_view >>"$out"
  fi
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
/usr/bin/python3 - "$out" "$runs" "${core:-unknown}" "$model $amp" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, value = line.split()
    rows.setdefault(name, []).append(float(value))
med = {k: statistics.median(v) for k, v in rows.items()}
rng = {k: (min(v), max(v)) for k, v in rows.items()}
print(f"| configuration | lockstep samples/s | PyTorch 1.13 samples/s | ratio | (median of {sys.argv[2]} runs, BLAS kernels {sys.argv[3]}, model {sys.argv[4]})")
print("|---|---|---|---|")
pairs = [("lockstep_ddp", "torch_ddp", "DDP, 2 ranks x 64"), ("lockstep_single", "torch_single", "one process, batch 128")]
if "lockstep_ddp_views" in med and "torch_ddp_views" in med:
    pairs.append(("lockstep_ddp_views", "torch_ddp_views", "DDP, gradient_as_bucket_view"))
for ours, theirs, label in pairs:
    print(f"| {label} | {med[ours]:.0f} ({rng[ours][0]:.0f}-{rng[ours][1]:.0f}) | {med[theirs]:.0f} ({rng[theirs][0]:.0f}-{rng[theirs][1]:.0f}) | {med[ours] / med[theirs]:.2f}x |")
print(f"| lockstep DDP / PyTorch single | {med['lockstep_ddp']:.0f} | {med['torch_single']:.0f} | {med['lockstep_ddp'] / med['torch_single']:.2f}x |")
# Each run's own ratios (its four figures were measured back to back).
print()
print("| run | lockstep DDP | PyTorch DDP | PyTorch single | DDP / PyTorch DDP | DDP / PyTorch single |")
print("|---|---|---|---|---|---|")
for i, (a, b, c) in enumerate(zip(rows["lockstep_ddp"], rows["torch_ddp"], rows["torch_single"]), 1):
    print(f"| {i} | {a:.0f} | {b:.0f} | {c:.0f} | {a / b:.2f}x | {a / c:.2f}x |")
PY
