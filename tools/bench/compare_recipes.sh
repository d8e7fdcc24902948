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

python3 - "$tmp" "$epochs" "${RATE:-unshaped}" <<'PY'
import json, re, sys
tmp, epochs, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def epochs_of(name):
    return [json.loads(l) for l in open(f"{tmp}/{name}.jsonl") if '"event":"epoch"' in l]
def sent(name, r):
    m = re.search(r"rank %d: (\d+) bytes sent" % r, open(f"{tmp}/{name}.{r}.log").read())
    return int(m.group(1))
print(f"### PowerSGD across two namespaces, link {rate} ({epochs} epochs of Fashion-MNIST, 2 ranks x 64, "
      "model mlp:784,4096,2048,10)\n")
print("| run | bytes sent, rank 0 / rank 1 | seconds per epoch | samples/s per epoch | test accuracy per epoch |")
print("|---|---|---|---|---|")
rows = {}
for name, label in (("plain", "plain DDP"), ("powersgd", "PowerSGD rank 4 (from iteration 10)")):
    e = epochs_of(name)
    rows[name] = (sent(name, 0), e)
    print(f"| {label} | {sent(name, 0) / 1e9:.2f} / {sent(name, 1) / 1e9:.2f} GB | "
          f"{', '.join('%.1f' % x['seconds'] for x in e)} | {', '.join('%.0f' % x['samples_per_s'] for x in e)} | "
          f"{', '.join('%.2f%%' % (100 * x['test_accuracy']) for x in e)} |")
p, q = rows["plain"], rows["powersgd"]
print(f"\nPowerSGD sent {p[0] / q[0]:.1f}x fewer bytes; epoch time ratio plain / PowerSGD "
      f"{', '.join('%.2fx' % (a['seconds'] / b['seconds']) for a, b in zip(p[1], q[1]))}; test accuracy "
      f"{100 * q[1][-1]['test_accuracy']:.2f}% vs {100 * p[1][-1]['test_accuracy']:.2f}% "
      f"({100 * (q[1][-1]['test_accuracy'] - p[1][-1]['test_accuracy']):+.2f} points).\n")
state = 2 * 4 * (784 * 4096 + 4096 + 4096 * 2048 + 2048 + 2048 * 10 + 10)
a, z = epochs_of("adam")[-1]["peak_rss_bytes"], epochs_of("zero")[-1]["peak_rss_bytes"]
print("### ZeRO with Adam (1 epoch of 100 steps, same model)\n")
print("| rank | plain DDP + Adam peak RSS | ZeRO peak RSS | saved | state held by the other rank | saved / that |")
print("|---|---|---|---|---|---|")
for r in range(2):
    mine = 4 * int(re.search(r"rank %d: ZeRO: .*\((\d+) elements\)" % r, open(f"{tmp}/zero.{r}.log").read()).group(1))
    other = state + 4 * 6 - mine  # and a 4-byte step count per parameter (6)
    saved = a[r] - z[r]
    print(f"| {r} | {a[r] / 2**20:.0f} MiB | {z[r] / 2**20:.0f} MiB | {saved / 2**20:.0f} MiB | "
          f"{other / 2**20:.0f} MiB | {100 * saved / other:.0f}% |")
print(f"\nAdam's whole state: {state / 2**20:.0f} MiB (exp_avg and exp_avg_sq of every parameter).")
PY
