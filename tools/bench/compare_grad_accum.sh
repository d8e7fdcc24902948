#!/usr/bin/env bash
# Gradient accumulation across two "hosts" (network namespaces joined by a
# veth pair shaped to RATE, 1 Gbit/s by default, tc tbf on both ends; root),
# one rank in each, over TCP: the MLP (//trainers:ddp_trainer,
# --model=mlp:784,4096,2048,10, 46 MB of gradients) and ResNet-18
# (//interop/torch/trainers:resnet18_trainer, 11.2M parameters, 43 MiB) on
# Fashion-MNIST at the same micro-batch with --grad_accum_steps 1, 2, 4, 8,
# each run one epoch over the same examples (the first STEPS x micro-batch x
# 2 training images: STEPS optimizer steps at N = 1, STEPS / N at N; all
# 10,000 test images): training samples/s, bytes sent per sample, the step
# time's exposed communication share (the trainers' last line) and the test
# accuracy after that epoch.
#
#   sudo bash tools/bench/compare_grad_accum.sh [STEPS]      (default 96)
#   sudo RATE=10gbit bash tools/bench/compare_grad_accum.sh
#   sudo MODELS=mlp bash tools/bench/compare_grad_accum.sh   (mlp, resnet18 or both)
#
# Needs dataset-fashion-mnist (tools/setup.sh). Removes its namespaces and
# stops its ranks whatever happens. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."
steps=${1:-96}
[[ $steps =~ ^[1-9][0-9]*$ && $((steps % 8)) -eq 0 ]] || { echo "STEPS must be a positive multiple of 8" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "needs root (ip netns, tc)" >&2; exit 2; }
rate=${RATE:-1gbit}
models=${MODELS:-mlp resnet18}
bazel build --config=opt //trainers:ddp_trainer //interop/torch/trainers:resnet18_trainer >/dev/null 2>&1
tmp=$(mktemp -d)
cp -L bazel-bin/trainers/ddp_trainer bazel-bin/interop/torch/trainers/resnet18_trainer "$tmp/"
a=gaA$$ b=gaB$$ pids=()
cleanup() {
  for p in "${pids[@]:-}"; do [[ -n "$p" ]] && kill -9 "$p" 2>/dev/null; done
  ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add "$a"; ip netns add "$b"
ip link add "ga$$" type veth peer name "gb$$"
ip link set "ga$$" netns "$a"; ip link set "gb$$" netns "$b"
ip -n "$a" addr add 10.78.0.1/24 dev "ga$$"; ip -n "$b" addr add 10.78.0.2/24 dev "gb$$"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up; done
ip -n "$a" link set "ga$$" up; ip -n "$b" link set "gb$$" up
ip netns exec "$a" tc qdisc add dev "ga$$" root tbf rate "$rate" burst 4mb latency 50ms
ip netns exec "$b" tc qdisc add dev "gb$$" root tbf rate "$rate" burst 4mb latency 50ms

# subset DIR N: Fashion-MNIST with its first N training images (IDX files,
# the count in each header cut to N) and every test image.
subset() {
  mkdir -p "$1"
  /usr/bin/python3 - /usr/share/datasets/fashion-mnist "$1" "$2" <<'PY'
import gzip, os, shutil, struct, sys
src, dst, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for kind, record in (("images-idx3", 28 * 28), ("labels-idx1", 1)):
  with gzip.open(os.path.join(src, "train-%s-ubyte.gz" % kind)) as f:
    data = f.read()
  header = 16 if kind.startswith("images") else 8
  assert struct.unpack(">I", data[4:8])[0] >= n
  with open(os.path.join(dst, "train-%s-ubyte" % kind), "wb") as f:
    f.write(data[:4] + struct.pack(">I", n) + data[8:header] + data[header:header + n * record])
  shutil.copy(os.path.join(src, "t10k-%s-ubyte.gz" % kind), dst)
PY
}

# run NAME PORT BINARY FLAGS...: both ranks; rank 0's output in NAME.log.
run() {
  local name=$1 port=$2 binary=$3
  shift 3
  pids=()
  for r in 0 1; do
    local ns=$a; [[ $r -eq 1 ]] && ns=$b
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=10.78.0.1 \
      MASTER_PORT="$port" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 timeout -k 5 3600 "$tmp/$binary" \
      --num_workers=1 --seed=1 "$@" >"$tmp/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}" && wait "${pids[1]}" || { tail -n 20 "$tmp/$name.0.log" "$tmp/$name.1.log" >&2; exit 1; }
  pids=()
}

echo "### Gradient accumulation across two namespaces, link $rate ($steps steps' examples at N = 1)"
echo
echo "| model | --grad_accum_steps | micro-batch | optimizer steps | samples/s | vs N = 1 | bytes sent per sample | exposed communication | test accuracy |"
echo "|---|---|---|---|---|---|---|---|---|"
port=29700
for model in $models; do
  base_sps=""
  for n in 1 2 4 8; do
    port=$((port + 1))
    case $model in
      mlp) micro=64 binary=ddp_trainer flags=(--model=mlp:784,4096,2048,10 --lr=0.05) ;;
      resnet18) micro=32 binary=resnet18_trainer flags=(--lr=0.02) ;;
      *) echo "MODELS: mlp or resnet18, not $model" >&2; exit 2 ;;
    esac
    [[ -d "$tmp/data_$micro" ]] || subset "$tmp/data_$micro" $((steps * micro * 2))
    run "$model.$n" "$port" "$binary" --dataset="$tmp/data_$micro" --batch_size="$micro" --epochs=1 \
      --grad_accum_steps="$n" "${flags[@]}"
    log="$tmp/$model.$n.0.log"
    sps=$(sed -nE 's/.*final test .*, ([0-9]+) samples\/s.*/\1/p' "$log" | tail -n 1)
    acc=$(sed -nE 's/.*final test .*accuracy ([0-9.]+)%.*/\1/p' "$log" | tail -n 1)
    bps=$(sed -nE 's/.*step time: .*; ([0-9]+) bytes sent per sample.*/\1/p' "$log" | tail -n 1)
    exposed=$(sed -nE 's/.*step time: .*exposed communication ([0-9]+) %.*/\1/p' "$log" | tail -n 1)
    [[ -n $sps && -n $acc && -n $bps && -n $exposed ]] || { echo "no result in $log:" >&2; tail -n 5 "$log" >&2; exit 1; }
    [[ -n $base_sps ]] || base_sps=$sps
    ratio=$(awk -v a="$sps" -v b="$base_sps" 'BEGIN { printf "%.2fx", a / b }')
    echo "| $model | $n | $micro | $((steps / n)) | $sps | $ratio | $bps | $exposed % | $acc % |"
  done
done
