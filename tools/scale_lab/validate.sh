#!/usr/bin/env bash
# Calibrates the cost model in the scale lab, then runs the lab's points
# where the link term dominates and compares each with the model's
# prediction: a benchmark, not a test (its results go in docs/SCALING.md).
#
#   sudo bash tools/scale_lab/validate.sh [--out=DIR] [--calibration=FILE] [--quick] [--rows=FILE]
#
# --rows=FILE runs no lab at all: it compares FILE's validation rows (those
# with D > 0, e.g. a former DIR/lab_rows.jsonl) with --calibration (default
# DIR/calibration.json): a change to the model checked against the points
# already measured, in seconds.
#
# Calibration (skipped with --calibration=FILE), each a lab run (run.sh):
#   shm, tcp_local    2 ranks on one host, all_reduce 4 KiB-4 MiB (recursive
#                     doubling below 256 KiB: t = alpha + n (beta + gamma);
#                     the ring from there: 2 alpha + n beta + n/2 gamma), over
#                     shared memory and over loopback TCP (--transport=tcp);
#   tcp_remote        2 hosts of 1 rank through the lab's links at D = 0: the
#                     forwarder's own cost is in alpha; a link of delay D then
#                     has alpha + D;
#   gamma             //core:kernels_benchmark's f32 sum;
#   fabric (phi)      4 hosts of 1 rank at D = 0, all_to_all 256 KiB-4 MiB:
#                     every host sends at once, and the lab's links share one
#                     forwarder thread and this machine's cores
#                     (lab_model.py fabric); not in calibration_real_host.json;
#   c (CPU term)      one host of 4, 8 and 16 ranks over loopback TCP, 4 KiB;
#   set-up            the setup workload at 2..16 ranks on one host.
# Validation points: hosts x ranks per host in {2x1, 4x1, 8x1, 2x2, 4x2, 8x2,
# 4x4}, D in {1000, 2000} us, all_reduce, all_gather, reduce_scatter and
# all_to_all at 4 KiB, 64 KiB and 1 MiB (--quick: 2x1, 4x2 at D = 2000, 4 KiB
# and 64 KiB). Rooted operations (broadcast, reduce, gather, scatter) are not
# validation points: the benchmark times them back to back, and the root's
# next operation starts before the last rank's ends, so their iterations
# overlap and a mean hides the rounds the model counts. A point counts
# when its link term is at least 5 x its CPU term; the verdict per point is
# measured / predicted within 0.7..1.3.
#
# Writes DIR (default docs/scaling): calibration.json, calibration_real_host.json
# (the same with shm and tcp_local refit with lockstep's default spinning and
# binding, as on a host with a core per rank: what predictions use),
# lab_rows.jsonl (every lab row), validation.jsonl and validation.md (each point beside the
# model) and validation.png (tools/scale_lab/lab_model.py plot; gnuplot-nox).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=docs/scaling calibration="" quick=0 reuse_rows=""
for arg in "$@"; do
  case $arg in
    --out=*) out=${arg#*=} ;;
    --rows=*) reuse_rows=${arg#*=} ;;
    --calibration=*) calibration=${arg#*=} ;;
    --quick) quick=1 ;;
    *) echo "validate.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "validate.sh: needs root (the lab's namespaces)" >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "validate.sh: needs gnuplot (apt-get install gnuplot-nox)" >&2; exit 2; }
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "validate.sh: building (-c opt) ..." >&2
bazel build -c opt //tools/bench:collectives //tools/scale_lab:delay_link //tools/scale_lab:model \
  //trainers:ddp_trainer //core:kernels_benchmark >"$tmp/build.log" 2>&1 || { tail -20 "$tmp/build.log"; exit 1; }
bin=$(bazel info -c opt bazel-bin 2>/dev/null)
export LAB_BENCH=$bin/tools/bench/collectives LAB_DELAY_LINK=$bin/tools/scale_lab/delay_link
export LAB_TRAINER=$bin/trainers/ddp_trainer
model=$bin/tools/scale_lab/model
lab() { /usr/bin/python3 tools/scale_lab/lab_model.py "$@"; }
rows=$out/lab_rows.jsonl
if [[ -n "$reuse_rows" ]]; then
  [[ -s "$reuse_rows" ]] || { echo "validate.sh: --rows=$reuse_rows: no such file, or empty" >&2; exit 2; }
  /usr/bin/python3 -c 'import json, sys
for l in open(sys.argv[1]):
  if l.strip() and json.loads(l).get("delay_us", 0) > 0: sys.stdout.write(l)' "$reuse_rows" >"$tmp/reused_rows.jsonl"
  [[ "$(realpath "$reuse_rows")" == "$(realpath -m "$rows")" ]] || cp "$reuse_rows" "$rows"
  calibration=${calibration:-$out/calibration.json}
fi
# lab NAME ARGS...: a run of run.sh, its rows appended to lab_rows.jsonl.
run() {
  local name=$1; shift
  echo "validate.sh: $name: $*" >&2
  bash tools/scale_lab/run.sh "$@" --peers=none --json="$tmp/$name.jsonl" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { tail -20 "$tmp/$name.err" >&2; echo "validate.sh: the lab run $name failed" >&2; exit 1; }
  cat "$tmp/$name.jsonl" >>"$rows"
}
[[ -n "$reuse_rows" ]] || : >"$rows"

if [[ -z "$calibration" ]]; then
  calibration=$out/calibration.json
  "$bin/core/kernels_benchmark" --benchmark_filter='BM_ReduceSum/f32' --benchmark_format=json \
    --benchmark_min_time=0.2 >"$tmp/gamma_bench.json" 2>/dev/null
  lab gamma --benchmark_json="$tmp/gamma_bench.json" >"$tmp/gamma.jsonl"
  "$model" fit --link=gamma --points="$tmp/gamma.jsonl" --out="$calibration" \
    --notes="calibrated by tools/scale_lab/validate.sh on $(date -u +%F), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
  gamma=$(/usr/bin/python3 -c "import json; print(json.load(open('$calibration'))['gamma_us_per_byte'])")
  small=(--min_bytes=4K --max_bytes=4M --step_factor=2 --iters=200 --warmup=20 --large_bytes=0 --ops=all_reduce)
  run cal_shm --hosts=1 --ranks_per_host=2 --link_delay_us=0 "${small[@]}"
  run cal_tcp_local --hosts=1 --ranks_per_host=2 --link_delay_us=0 "${small[@]}" --lockstep_flags=--transport=tcp
  run cal_tcp_remote --hosts=2 --ranks_per_host=1 --link_delay_us=0 "${small[@]}"
  for link in shm tcp_local tcp_remote; do
    lab points --rows="$tmp/cal_$link.jsonl" --gamma="$gamma" >"$tmp/points_$link.jsonl"
    # TCP's window is lockstep's fixed socket buffer (TcpTransportOptions::socket_buffer_bytes).
    window=$([[ $link == shm ]] && echo 0 || echo 262144)
    "$model" fit --link=$link --points="$tmp/points_$link.jsonl" --in="$calibration" --out="$calibration" \
      --window_bytes="$window"
  done
  # A real host gives each rank a core, and lockstep spins before it sleeps
  # there (its defaults); the lab's many ranks cannot. For predictions the
  # links inside a host are refit that way, 2 ranks on this machine's 2 cores:
  # calibration_real_host.json.
  spin_on="--worker_spin_microseconds=-1 --wait_spin_microseconds=-1 --transport_spin_microseconds=-1 --bind_to=core"
  run cal_shm_spin --hosts=1 --ranks_per_host=2 --link_delay_us=0 "${small[@]}" --lockstep_flags="$spin_on"
  run cal_tcp_local_spin --hosts=1 --ranks_per_host=2 --link_delay_us=0 "${small[@]}" \
    --lockstep_flags="--transport=tcp $spin_on"
  : >"$tmp/cpu_rows.jsonl"
  for n in 4 8 16; do
    run cal_cpu_$n --hosts=1 --ranks_per_host=$n --link_delay_us=0 --ops=all_reduce --min_bytes=4K --max_bytes=4K \
      --iters=200 --warmup=20 --lockstep_flags=--transport=tcp
    cat "$tmp/cal_cpu_$n.jsonl" >>"$tmp/cpu_rows.jsonl"
  done
  lab fit_cpu --rows="$tmp/cpu_rows.jsonl" --model="$model" --calibration="$calibration" --cores="$(nproc)"
  : >"$tmp/setup_rows.jsonl"
  for n in 2 4 8 16; do
    run cal_setup_$n --hosts=1 --ranks_per_host=$n --link_delay_us=0 --workload=setup
    cat "$tmp/cal_setup_$n.jsonl" >>"$tmp/setup_rows.jsonl"
  done
  lab setup --rows="$tmp/setup_rows.jsonl" --cores="$(nproc)" >"$tmp/setup_points.jsonl"
  "$model" fit_setup --points="$tmp/setup_points.jsonl" --in="$calibration" --out="$calibration"
  real_host=$out/calibration_real_host.json
  cp "$calibration" "$real_host"
  for link in shm tcp_local; do
    lab points --rows="$tmp/cal_${link}_spin.jsonl" --gamma="$gamma" >"$tmp/points_${link}_spin.jsonl"
    window=$([[ $link == shm ]] && echo 0 || echo 262144)
    "$model" fit --link=$link --points="$tmp/points_${link}_spin.jsonl" --in="$real_host" --out="$real_host" \
      --window_bytes="$window" --notes="$(basename "$calibration") with the links inside a host refit with spinning on"
  done
  # After the copy: a real cluster's network is taken as full bisection.
  run cal_fabric --hosts=4 --ranks_per_host=1 --link_delay_us=0 --ops=all_to_all --min_bytes=256K --max_bytes=4M \
    --step_factor=2 --iters=20 --warmup=5 --large_bytes=0
  lab fabric --rows="$tmp/cal_fabric.jsonl" --calibration="$calibration"
fi

alpha0=$(/usr/bin/python3 -c "import json; print(json.load(open('$calibration'))['links']['tcp_remote']['alpha_us'])")
if [[ -n "$reuse_rows" ]]; then
  topologies=() delays=()
  cp "$tmp/reused_rows.jsonl" "$tmp/val_rows.jsonl"
elif (( quick )); then
  topologies=("2 1" "4 2") delays=(2000) sizes=(--min_bytes=4K --max_bytes=64K --step_factor=16 --large_bytes=0)
else
  topologies=("2 1" "4 1" "8 1" "2 2" "4 2" "8 2" "4 4") delays=(1000 2000)
  sizes=(--min_bytes=4K --max_bytes=1M --step_factor=16 --large_bytes=0)
fi
[[ -n "$reuse_rows" ]] || : >"$tmp/val_rows.jsonl"
for d in "${delays[@]}"; do
  for t in "${topologies[@]}"; do
    set -- $t
    run "val_${1}x${2}_d$d" --hosts="$1" --ranks_per_host="$2" --link_delay_us="$d" --ops=all_reduce,all_gather,reduce_scatter,all_to_all \
      --iters=20 --warmup=5 "${sizes[@]}"
    cat "$tmp/val_${1}x${2}_d$d.jsonl" >>"$tmp/val_rows.jsonl"
  done
done
lab compare --rows="$tmp/val_rows.jsonl" --model="$model" --calibration="$calibration" --cores="$(nproc)" \
  --hop_us="$alpha0" >"$out/validation.jsonl"
lab plot --compare="$out/validation.jsonl" --out="$out/validation.png"
rm -f "$out/validation.png.dat" "$calibration".cpu*.json
/usr/bin/python3 - "$out/validation.jsonl" <<'PY' | tee "$out/validation.md"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
kept = [r for r in rows if r["link_dominates"]]
inside = [r for r in kept if 0.7 <= r["ratio"] <= 1.3]
print("# The scale lab's validation points\n")
print("Written by `tools/scale_lab/validate.sh` (see [SCALING.md](../SCALING.md)): each lab point beside the")
print("calibrated model; D is the links' delay, late the forwarder's median lateness in that run.\n")
print("| op | bytes | p | hosts x ranks | D (us) | late (us) | algorithm | measured (us) | predicted (us) | link (us) | CPU (us) | measured/predicted |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
  flag = "" if r["link_dominates"] else " (CPU term too large: not counted)"
  print(f"| {r['op']} | {r['bytes']} | {r['p']} | {r['hosts']}x{r['ranks_per_host']} | {r['delay_us']} "
        f"| {r['lateness_p50_us']:.0f} | {r['algorithm']} "
        f"| {r['measured_us']:.0f} | {r['predicted_us']:.0f} | {r['link_us']:.0f} | {r['cpu_us']:.0f} | {r['ratio']:.2f}{flag} |")
print(f"\n{len(inside)} of {len(kept)} points where the link term is >= 5 x the CPU term are within +-30 %"
      f" ({len(rows) - len(kept)} points not counted)")
valid = [r for r in kept if r["valid_links"]]
print(f"of them, {len(valid)} ran on links that kept their delay (the forwarder's p99 lateness within 10 % of D):"
      f" {sum(1 for r in valid if 0.7 <= r['ratio'] <= 1.3)} within +-30 %")
for op in sorted({r["op"] for r in kept}):
  ratios = sorted(r["ratio"] for r in kept if r["op"] == op)
  print(f"{op}: {sum(1 for x in ratios if 0.7 <= x <= 1.3)} of {len(ratios)} within +-30 %, median ratio"
        f" {ratios[len(ratios) // 2]:.2f}, range {ratios[0]:.2f}..{ratios[-1]:.2f}")
PY
