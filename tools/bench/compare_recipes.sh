#!/usr/bin/env bash
# The data-parallel recipes across two "hosts" (network namespaces joined by
# a veth pair, as tests/launch_lib.sh builds them; root), one ddp_trainer
# rank in each, over TCP, on an MLP of 11.6M parameters
# (--model=mlp:784,4096,2048,10, 46 MB of gradients a step):
#   1. plain DDP against --comm_hook=powersgd --powersgd_rank=4
#      --powersgd_start_iter=10: bytes each rank sent over the gradients'
#      group (the transports' counters), seconds and samples/s per epoch,
#      and test accuracy after EPOCHS epochs on Fashion-MNIST;
#   2. DDP with Adam, plain against --zero: each rank's peak RSS after one
#      short epoch, beside the size of Adam's state (2 x 46 MB) and the
#      share ZeRO saves each rank.
#
#   sudo bash tools/bench/compare_recipes.sh [EPOCHS]      (default 3)
#   sudo RATE=10gbit bash tools/bench/compare_recipes.sh   (the veth pair shaped
#                                                           to a 10 Gbit/s link, tc tbf)
#
# Unshaped, the pair is memory copies between two processes on the same
# CPUs (several GB/s): a real link between hosts is slower, which is where
# PowerSGD's trade of computation for bytes pays. RATE (a tc rate) shapes
# both ends of the pair.
# Needs dataset-fashion-mnist (tools/setup.sh). Removes its namespaces and
# stops its ranks whatever happens. Prints a markdown report.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
epochs=${1:-3}
[[ $epochs =~ ^[1-9][0-9]*$ ]] || { echo "EPOCHS must be a positive number" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns)" >&2; exit 2; }
model=mlp:784,4096,2048,10
bazel build --config=opt //trainers:ddp_trainer >/dev/null 2>&1
tmp=$(mktemp -d)
cp -L bazel-bin/trainers/ddp_trainer "$tmp/"
a=lrA$$ b=lrB$$ pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "ra$$" type veth peer name "rb$$"
ip link set "ra$$" netns "$a"; ip link set "rb$$" netns "$b"
ip -n "$a" addr add 10.79.0.1/24 dev "ra$$"; ip -n "$b" addr add 10.79.0.2/24 dev "rb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "ra$$" up; ip -n "$b" link set "rb$$" up
if [[ -n ${RATE:-} ]]; then
  ip netns exec "$a" tc qdisc add dev "ra$$" root tbf rate "$RATE" burst 4mb latency 50ms
  ip netns exec "$b" tc qdisc add dev "rb$$" root tbf rate "$RATE" burst 4mb latency 50ms
fi

# train NAME PORT FLAGS...: both ranks, logs NAME.<rank>.log, metrics NAME.jsonl.
train() {
  local name=$1 port=$2
  shift 2
  pids=()
  for r in 0 1; do
    local ns=$a; [[ $r -eq 1 ]] && ns=$b
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.79.0.1 \
      MASTER_PORT="$port" OPENBLAS_NUM_THREADS=1 timeout -k 5 3600 "$tmp/ddp_trainer" --model="$model" \
      --num_workers=1 --metrics="$tmp/$name.jsonl" "$@" >"$tmp/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" && wait "${pids[1]}" || { tail -n 20 "$tmp/$name.0.log" "$tmp/$name.1.log" >&2; exit 1; }
  pids=()
}

train plain 29611 --epochs="$epochs" --lr=0.05
train powersgd 29612 --epochs="$epochs" --lr=0.05 --comm_hook=powersgd --powersgd_rank=4 --powersgd_start_iter=10
train adam 29613 --dataset=synthetic --synthetic_train_size=6400 --synthetic_test_size=64 --epochs=1 \
  --optimizer=adam --lr=0.001
train zero 29614 --dataset=synthetic --synthetic_train_size=6400 --synthetic_test_size=64 --epochs=1 \
  --optimizer=adam --lr=0.001 --zero

# The report (tools/bench/compare_lib.py) from rows the runs leave:
#   epochs: name epoch seconds samples/s test_accuracy bytes_sent_rank0 bytes_sent_rank1
#   memory: rank adam_peak_rss zero_peak_rss zero_elements (this rank's share of Adam's state)
sent() { sed -nE "s/.*rank $2: ([0-9]+) bytes sent.*/\1/p" "$tmp/$1.$2.log" | head -n 1; }
for name in plain powersgd; do
  lib json --all --has '"event":"epoch"' seconds samples_per_s test_accuracy \
    <"$tmp/$name.jsonl" | awk -v name="$name" -v s0="$(sent "$name" 0)" -v s1="$(sent "$name" 1)" \
    '{ print name, NR, $0, s0, s1 }' >>"$tmp/epochs"
done
peak() { lib json --has '"event":"epoch"' peak_rss_bytes <"$tmp/$1.jsonl" | cut -d, -f"$2"; }
for r in 0 1; do
  elements=$(sed -nE "s/.*rank $r: ZeRO: .*\(([0-9]+) elements\).*/\1/p" "$tmp/zero.$r.log" | head -n 1)
  echo "$r $(peak adam $((r + 1))) $(peak zero $((r + 1))) $elements" >>"$tmp/memory"
done
epoch_fields="name epoch seconds sps accuracy sent0 sent1"
title="### PowerSGD across two namespaces, link ${RATE:-unshaped} ($epochs epochs of Fashion-MNIST, 2 ranks x 64,"
lib table "$tmp/epochs" --fields "$epoch_fields" --rows name:seen --title "$title model $model)"$'\n' \
  --let 'label={"plain": "plain DDP", "powersgd": "PowerSGD rank 4 (from iteration 10)"}' \
  --col 'run={label[name]}' --col 'bytes sent, rank 0 / rank 1={v("sent0") / 1e9:.2f} / {v("sent1") / 1e9:.2f} GB' \
  --col 'seconds per epoch={join("seconds", ".1f")}' --col 'samples/s per epoch={join("sps", ".0f")}' \
  --col 'test accuracy per epoch={", ".join(f"{100 * x:.2f}%" for x in v("accuracy").values)}'
lib say "$tmp/epochs" --fields "$epoch_fields" --series name --pair epoch \
  $'\nPowerSGD sent {V("sent0", "plain") / V("sent0", "powersgd"):.1f}x fewer bytes; epoch time ratio'\
' plain / PowerSGD {ratio("seconds", "plain", "powersgd").join(".2f", "x")}; test accuracy'\
' {100 * V("accuracy", "powersgd").values[-1]:.2f}% vs {100 * V("accuracy", "plain").values[-1]:.2f}%'\
' ({100 * (V("accuracy", "powersgd").values[-1] - V("accuracy", "plain").values[-1]):+.2f} points).'$'\n'
# Adam's state: exp_avg and exp_avg_sq, 4 bytes each, of every parameter of
# mlp:784,4096,2048,10; the other rank holds what this one does not, and a
# 4-byte step count per parameter (6).
state='2 * 4 * (784 * 4096 + 4096 + 4096 * 2048 + 2048 + 2048 * 10 + 10)'
lib table "$tmp/memory" --fields "rank adam zero elements" --each --let "state=$state" \
  --let 'MiB=2**20' --title $'### ZeRO with Adam (1 epoch of 100 steps, same model)\n' --col 'rank={rank}' \
  --col 'plain DDP + Adam peak RSS={v("adam") / MiB:.0f} MiB' --col 'ZeRO peak RSS={v("zero") / MiB:.0f} MiB' \
  --col 'saved={(v("adam") - v("zero")) / MiB:.0f} MiB' \
  --col 'state held by the other rank={(state + 4 * 6 - 4 * v("elements")) / MiB:.0f} MiB' \
  --col 'saved / that={100 * (v("adam") - v("zero")) / (state + 4 * 6 - 4 * v("elements")):.0f}%'
lib say "$tmp/memory" --fields "rank adam zero elements" --let "state=$state" \
  $'\nAdam\'s whole state: {state / 2**20:.0f} MiB (exp_avg and exp_avg_sq of every parameter).'
