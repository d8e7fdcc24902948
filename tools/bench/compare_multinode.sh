#!/usr/bin/env bash
# The multi-node path on this machine: two network namespaces joined by a
# veth pair (root), lockstep's all-reduce across them (2 ranks, one per
# "host", only a launcher's variables) beside PyTorch 1.13's gloo across the
# same pair (GLOO_SOCKET_IFNAME per namespace) and iperf3's bidirectional TCP rate
# over the same pair (each rank sends and receives at once, as the ring does),
# `runs` interleaved rounds (default 3), medians.
#   sudo bash tools/bench/compare_multinode.sh [runs]
# Needs iperf3 and python3-torch (apt). Removes its namespaces whatever happens.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
runs=${1:-3}
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns)" >&2; exit 2; }
command -v iperf3 >/dev/null || { echo "needs iperf3 (apt-get install iperf3)" >&2; exit 2; }
bazel build --config=opt //tools/bench:collectives >/dev/null 2>&1
tmp=$(mktemp -d)
cp -L bazel-bin/tools/bench/collectives "$tmp/"
a=lbA$$ b=lbB$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "va$$" type veth peer name "vb$$"
ip link set "va$$" netns "$a"; ip link set "vb$$" netns "$b"
ip -n "$a" addr add 10.78.0.1/24 dev "va$$"; ip -n "$b" addr add 10.78.0.2/24 dev "vb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "va$$" up; ip -n "$b" link set "vb$$" up
out="$tmp/rows"
for run in $(seq "$runs"); do
  port=$(( 29500 + run ))
  for r in 0 1; do
    ns=$a; [[ $r -eq 1 ]] && ns=$b
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.78.0.1 \
      MASTER_PORT=$port "$tmp/collectives" --min_bytes=1M --max_bytes=256M --step_factor=4 --iters=10 --warmup=2 \
      --json >"$tmp/ours.$r" 2>&1 &
  done
  wait
  lib json --all bytes busbw_gbps <"$tmp/ours.0" | sed "s/^/$run ours /" >>"$out"
  # PyTorch 1.13's gloo over the same pair, one rank per namespace.
  for r in 0 1; do
    ns=$a; ifname="va$$"; [[ $r -eq 1 ]] && { ns=$b; ifname="vb$$"; }
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=10.78.0.1 MASTER_PORT=$(( port + 100 )) \
      GLOO_SOCKET_IFNAME=$ifname OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout 300 /usr/bin/python3 \
      tools/bench/peers/gloo_all_reduce.py --bytes 1048576 4194304 16777216 67108864 268435456 --iters 10 \
      --warmup 2 >"$tmp/gloo.$r" 2>/dev/null &
  done
  wait
  awk -v run="$run" '$1 == "gloo" { print run, "gloo", $2, $4 }' "$tmp/gloo.0" >>"$out"
  ip netns exec "$a" iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  server=$!
  sleep 0.5  # iperf3's server has no readiness signal; a benchmark, not a test.
  ip netns exec "$b" iperf3 -c 10.78.0.1 -p 5201 --bidir -t 3 -J >"$tmp/iperf.json" 2>/dev/null || true
  wait "$server" || true
  # Per direction (GB/s): the rate each rank sends at while receiving.
  lib json end.sum_sent.bits_per_second \
    end.sum_sent_bidir_reverse.bits_per_second <"$tmp/iperf.json" |
    awk -v run="$run" '{ print run, "iperf3", 0, ($1 < $2 ? $1 : $2) / 8e9 }' >>"$out"
  echo "run $run done" >&2
done
lib table "$out" --fields "run tool bytes gbps" --series tool --rows bytes --require ours \
  --title 'iperf3 --bidir over the veth pair, per direction: {V("gbps", "iperf3"):.2f} GB/s'\
' (median of {V("gbps", "iperf3").n})' \
  --col 'size={int(bytes) >> 20} MiB' --col 'lockstep busbw (GB/s)={v("gbps", "ours"):.2f}' \
  --col 'PyTorch gloo busbw (GB/s)={v("gbps", "gloo"):.2f}' \
  --col 'lockstep / gloo={v("gbps", "ours") / v("gbps", "gloo"):.2f}x' \
  --col 'lockstep / iperf3 per direction={v("gbps", "ours") / V("gbps", "iperf3"):.0%}'
