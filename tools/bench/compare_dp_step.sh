#!/usr/bin/env bash
# Single process vs DataParallel (2 CPU devices, one process) vs DDP
# (2 ranks) on the reference MLP (784-512-256-10, SGD lr 0.1 momentum 0.9),
# global batch 128, one epoch of Fashion-MNIST each, interleaved, medians
# of `runs` (default 3), beside one PyTorch 1.13 process
# (tools/bench/peers/torch_single_mlp.py). PyTorch 1.13's DataParallel on
# CPU just calls the module (no device_ids without CUDA), so it has no CPU
# DP to compare with.
#   bash tools/bench/compare_dp_step.sh [runs]
# Prints samples/s and peak RSS (MiB; DDP: the largest rank's) per
# configuration, then DP's step broken into its phases, mean ms per step,
# from dp_trainer's Chrome trace.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo
bazel build --config=opt //trainers:dp_trainer //trainers:ddp_trainer //trainers:single_trainer >/dev/null 2>&1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -L bazel-bin/trainers/dp_trainer bazel-bin/trainers/ddp_trainer bazel-bin/trainers/single_trainer "$tmp/"
core=$("$tmp/single_trainer" --epochs=1 --max_steps=1 --dataset=synthetic --synthetic_train_size=256 \
         --synthetic_test_size=0 2>&1 | sed -n 's/.*BLAS kernels \([A-Za-z0-9]*\).*/\1/p' | head -1)
peer_env=()
[[ -n ${core:-} && -z ${OPENBLAS_CORETYPE:-} ]] && peer_env=(OPENBLAS_CORETYPE="$core")
echo "# BLAS kernels: ${core:-unknown}; runs: $runs; load before: $(cut -d' ' -f1 /proc/loadavg)" >&2
ours() {  # name binary args... -> "name samples/s peak_rss_bytes"
  local name=$1 bin=$2; shift 2
  rm -f "$tmp/m.jsonl"
  "$tmp/$bin" --epochs=1 --dataset=fashion-mnist --metrics="$tmp/m.jsonl" "$@" >/dev/null 2>&1
  /usr/bin/python3 -c "import json,sys; d=[json.loads(l) for l in open(sys.argv[1]) if '\"epoch\"' in l][-1]; print(sys.argv[2], d['samples_per_s'], max(d['peak_rss_bytes']))" "$tmp/m.jsonl" "$name"
}
peer() {  # name script -> "name samples/s peak_rss_bytes"
  env "${peer_env[@]}" /usr/bin/python3 -c "
import resource, runpy, sys
sys.argv = [sys.argv[1], '--steps', '300', '--warmup', '30']
runpy.run_path(sys.argv[0], run_name='__main__')
print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)" "tools/bench/peers/$2" 2>/dev/null |
    /usr/bin/python3 -c "
import json, sys
lines = sys.stdin.read().strip().splitlines()
rss = [l for l in lines if l.startswith('RSS')][-1].split()[1]
d = json.loads([l for l in lines if l.startswith('{')][-1])
print(sys.argv[1], d['wall_samples_per_s'], rss)" "$1"
}
out="$tmp/rows"
# The phases come from a separate traced run: with --trace the DP process's
# peak RSS grows several-fold (glibc arenas; under investigation), which
# would distort the memory column.
ours dp_traced dp_trainer --devices=cpu:0,cpu:1 --batch_size=128 --trace="$tmp/trace" >/dev/null
for run in $(seq "$runs"); do
  ours single single_trainer --batch_size=128 >>"$out"
  ours dp dp_trainer --devices=cpu:0,cpu:1 --batch_size=128 >>"$out"
  ours ddp ddp_trainer --nproc=2 --batch_size=64 >>"$out"
  peer torch_single torch_single_mlp.py >>"$out"
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
/usr/bin/python3 - "$out" "$runs" "${core:-unknown}" "$tmp/trace/trace_rank0.json" <<'PY'
import json, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, sps, rss = line.split()
    rows.setdefault(name, []).append((float(sps), float(rss)))
labels = (("single", "lockstep one process, batch 128"), ("dp", "lockstep DataParallel, cpu:0,cpu:1 (one process, 2 x 64)"),
          ("ddp", "lockstep DDP, 2 ranks x 64"), ("torch_single", "PyTorch 1.13 one process, batch 128"))
print(f"| configuration | samples/s (median of {sys.argv[2]}, range) | peak RSS MiB | (BLAS kernels {sys.argv[3]})")
print("|---|---|---|")
for key, label in labels:
    s = [r[0] for r in rows[key]]
    m = statistics.median(r[1] for r in rows[key]) / 2**20
    print(f"| {label} | {statistics.median(s):.0f} ({min(s):.0f}-{max(s):.0f}) | {m:.0f} |")
events = json.load(open(sys.argv[4]))["traceEvents"]
steps = sum(1 for e in events if e.get("name") == "forward")
order = ["forward", "dp scatter", "dp replicate", "dp apply", "dp gather", "backward", "dp scatter grad",
         "dp apply backward", "dp reduce", "optimizer step", "data wait"]
tot = {}
for e in events:
    if e.get("ph") == "X":
        tot[e["name"]] = tot.get(e["name"], 0.0) + e["dur"]
print(f"\nDP step phases (a separate traced run, {steps} steps), mean ms per step:")
print("| " + " | ".join(order) + " |")
print("|" + "---|" * len(order))
print("| " + " | ".join(f"{tot.get(n, 0) / steps / 1000:.3f}" for n in order) + " |")
PY
