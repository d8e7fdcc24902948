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
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
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
  echo "$name $(lib json samples_per_s peak_rss_bytes:max --has '"epoch"' <"$tmp/m.jsonl")"
}
peer() {  # name script -> "name samples/s peak_rss_bytes"
  local lines
  lines=$(env "${peer_env[@]}" /usr/bin/python3 -c "
import os, resource, runpy, sys
sys.argv = [sys.argv[1], '--steps', '300', '--warmup', '30']
sys.path.insert(0, os.path.dirname(sys.argv[0]))  # Its sibling mlp_peer.py, as when run as a script.
runpy.run_path(sys.argv[0], run_name='__main__')
print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)" "tools/bench/peers/$2" 2>/dev/null)
  echo "$1 $(lib json wall_samples_per_s <<<"$lines")" \
    "$(awk '$1 == "RSS" { rss = $2 } END { print rss }' <<<"$lines")"
}
out="$tmp/rows"  # run name samples/s peak_rss_bytes
# The phases come from a separate traced run: with --trace the DP process's
# peak RSS grows several-fold (glibc arenas; under investigation), which
# would distort the memory column.
ours dp_traced dp_trainer --devices=cpu:0,cpu:1 --batch_size=128 --trace="$tmp/trace" >/dev/null
for run in $(seq "$runs"); do
  echo "$run $(ours single single_trainer --batch_size=128)" >>"$out"
  echo "$run $(ours dp dp_trainer --devices=cpu:0,cpu:1 --batch_size=128)" >>"$out"
  echo "$run $(ours ddp ddp_trainer --nproc=2 --batch_size=64)" >>"$out"
  echo "$run $(peer torch_single torch_single_mlp.py)" >>"$out"
  echo "run $run done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
lib table "$out" --fields "run name sps rss" --rows name \
  --order name=single,dp,ddp,torch_single \
  --let 'label={"single": "lockstep one process, batch 128",
                "dp": "lockstep DataParallel, cpu:0,cpu:1 (one process, 2 x 64)",
                "ddp": "lockstep DDP, 2 ranks x 64", "torch_single": "PyTorch 1.13 one process, batch 128"}' \
  --col 'configuration={label[name]}' --col "samples/s (median of $runs, range)={v('sps').spread('.0f')}" \
  --col 'peak RSS MiB={v("rss") / 2**20:.0f}' --note "(BLAS kernels ${core:-unknown})"
lib trace-phases "$tmp/trace/trace_rank0.json" \
  --title $'\nDP step phases (a separate traced run, {steps} steps), mean ms per step:' \
  "forward" "dp scatter" "dp replicate" "dp apply" "dp gather" "backward" "dp scatter grad" "dp apply backward" \
  "dp reduce" "optimizer step" "data wait"
