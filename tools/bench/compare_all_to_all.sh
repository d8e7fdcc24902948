#!/usr/bin/env bash
# lockstep's all-to-all and uneven all-gather beside OpenMPI's (MPI_Alltoall,
# MPI_Allgatherv), f32, over TCP loopback (OpenMPI: --mca btl tcp,self) and
# shared memory (OpenMPI's vader), 2 and 3 ranks, interleaved runs, medians:
#
#   bash tools/bench/compare_all_to_all.sh [runs]      (default 5)
#
# Per run, op, world size, size and transport, lockstep and OpenMPI run one
# after the other (lockstep first on odd runs, OpenMPI first on even ones),
# each timed as //tools/bench:collectives times itself (the slowest rank's
# mean over the iterations; busbw factor (n-1)/n). Prints one markdown table
# per op and world size: sizes down, per transport lockstep's and OpenMPI's
# median time and busbw and the median of the per-run ratios MPI time /
# lockstep time (> 1: lockstep faster), and the load average beside each
# run in the raw rows (kept in $KEEP_ROWS if set). With 3 ranks on 2 cores
# both tools oversubscribe (neither binds ranks to cores).
#
# OPS, RANKS and SIZES (bytes, space-separated) narrow the sweep.
# Needs openmpi-bin and libopenmpi-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

die() { echo "compare_all_to_all: $*" >&2; exit 2; }
runs=${1:-5}
[[ $runs =~ ^[1-9][0-9]*$ ]] || die "runs must be a positive number, not '$runs'"
ops=(${OPS:-all_to_all all_gather_v})
ranks=(${RANKS:-2 3})
sizes=(${SIZES:-4096 65536 1048576 16777216 67108864 268435456})
command -v mpicc >/dev/null || die "mpicc is missing: apt-get install openmpi-bin libopenmpi-dev"

iters_for() {  # About 0.1-0.5 s per size for either tool.
  local b=$1
  if (( b <= 65536 )); then echo 500; elif (( b <= 1048576 )); then echo 100;
  elif (( b <= 16777216 )); then echo 20; else echo 5; fi
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! bazel build --config=opt //tools/bench:collectives >"$tmp/build.log" 2>&1; then
  tail -n 30 "$tmp/build.log" >&2
  die "bazel build //tools/bench:collectives failed"
fi
cp -L bazel-bin/tools/bench/collectives "$tmp/collectives"  # Immune to rebuilds during the runs.
mpicc -O2 -o "$tmp/mpi_exchange" tools/bench/peers/mpi_exchange.c
errlog=$tmp/errors.log
rows=$tmp/rows
: >"$rows"

run_lockstep() {  # op n transport bytes iters warmup -> mean p50 p95 busbw
  local line
  line=$(timeout -k 5 600 "$tmp/collectives" --op="$1" --nproc="$2" --transport="$3" --min_bytes="$4" \
    --max_bytes="$4" --iters="$5" --warmup="$6" --json 2>>"$errlog" | grep '^{' | tail -n 1) || return 1
  [[ $line == *"\"transport\": \"host over $3\""* ]] || { echo "ran on another transport: $line" >>"$errlog"; return 1; }
  local f out=()
  for f in time_us p50_us p95_us busbw_gbps; do out+=("$(sed -nE "s/.*\"$f\": ([-+0-9.eE]+).*/\1/p" <<<"$line")"); done
  echo "${out[*]}"
}
run_mpi() {  # op n transport bytes iters warmup -> mean p50 p95 busbw
  local f btl=(--mca btl tcp,self --mca btl_tcp_if_include lo)
  [[ $3 == shm ]] && btl=(--mca btl self,vader)
  read -r -a f < <(timeout -k 5 600 mpirun --allow-run-as-root --oversubscribe -np "$2" "${btl[@]}" \
    "$tmp/mpi_exchange" "$1" "$4" "$5" "$6" 2>>"$errlog" | grep '^mpi ' | tail -n 1) || return 1
  (( ${#f[@]} >= 6 )) || return 1
  echo "${f[2]} ${f[4]} ${f[5]} ${f[3]}"
}
record() {  # run op n transport tool bytes command...
  local run=$1 op=$2 n=$3 transport=$4 tool=$5 b=$6 figures
  shift 6
  if figures=$("$@"); then
    echo "$run $op $n $transport $tool $b $figures $(cut -d' ' -f1 /proc/loadavg)" >>"$rows"
  else
    echo "compare_all_to_all: $tool $op n=$n $transport at $b bytes failed in run $run (skipped):" >&2
    tail -n 3 "$errlog" >&2
  fi
}

for run in $(seq "$runs"); do
  for op in "${ops[@]}"; do
    for n in "${ranks[@]}"; do
      for b in "${sizes[@]}"; do
        it=$(iters_for "$b")
        w=$(( it / 10 + 2 ))
        for transport in tcp shm; do
          if (( run % 2 == 1 )); then
            record "$run" "$op" "$n" "$transport" lockstep "$b" run_lockstep "$op" "$n" "$transport" "$b" "$it" "$w"
            record "$run" "$op" "$n" "$transport" mpi "$b" run_mpi "$op" "$n" "$transport" "$b" "$it" "$w"
          else
            record "$run" "$op" "$n" "$transport" mpi "$b" run_mpi "$op" "$n" "$transport" "$b" "$it" "$w"
            record "$run" "$op" "$n" "$transport" lockstep "$b" run_lockstep "$op" "$n" "$transport" "$b" "$it" "$w"
          fi
        done
      done
    done
  done
  echo "run $run of $runs done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
[[ -n ${KEEP_ROWS:-} ]] && cp "$rows" "$KEEP_ROWS"

python3 - "$rows" <<'PY'
import collections, statistics, sys
# run op n transport tool bytes mean p50 p95 busbw load
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
fig = collections.defaultdict(list)
per_run = {}
for run, op, n, tr, tool, b, mean, p50, p95, busbw, load in rows:
    fig[(op, n, tr, tool, int(b))].append((float(mean), float(busbw)))
    per_run[(run, op, n, tr, tool, int(b))] = float(mean)
def med(v): return statistics.median(v) if v else float("nan")
def size(b):
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= scale: return f"{b // scale} {unit}"
    return f"{b} B"
for op in dict.fromkeys(r[1] for r in rows):
    for n in dict.fromkeys(r[2] for r in rows if r[1] == op):
        print(f"\n{op}, {n} ranks (medians of {len({r[0] for r in rows})} runs; time us, busbw GB/s; ratio = MPI time / lockstep time)\n")
        print("| size | TCP lockstep | TCP OpenMPI | TCP ratio | shm lockstep | vader | shm ratio |")
        print("|---|---|---|---|---|---|---|")
        for b in sorted({int(r[5]) for r in rows if r[1] == op and r[2] == n}):
            cells = []
            for tr in ("tcp", "shm"):
                ours, mpi = fig[(op, n, tr, "lockstep", b)], fig[(op, n, tr, "mpi", b)]
                ratios = [per_run[(run, op, n, tr, "mpi", b)] / per_run[(run, op, n, tr, "lockstep", b)]
                          for run in {r[0] for r in rows}
                          if (run, op, n, tr, "mpi", b) in per_run and (run, op, n, tr, "lockstep", b) in per_run]
                cells += [f"{med([m for m, _ in ours]):.1f} us, {med([bw for _, bw in ours]):.2f}",
                          f"{med([m for m, _ in mpi]):.1f} us, {med([bw for _, bw in mpi]):.2f}",
                          (f"{med(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})" if ratios else "n/a")]
            print(f"| {size(b)} | " + " | ".join(cells) + " |")
PY
