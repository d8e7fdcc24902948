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
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
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
  lib json time_us p50_us p95_us busbw_gbps <<<"$line"
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

# Per op and world size: medians per transport and tool, and the per-run
# ratios MPI / lockstep (tools/bench/compare_lib.py).
cells=()
for transport in tcp shm; do
  names=("shm lockstep" vader "shm ratio")
  [[ $transport == tcp ]] && names=("TCP lockstep" "TCP OpenMPI" "TCP ratio")
  for tool in lockstep mpi; do
    cells+=(--col "${names[0]}={v('mean', '$tool', transport='$transport'):.1f} us, {v('busbw', '$tool',
                                                                                   transport='$transport'):.2f}")
    names=("${names[@]:1}")
  done
  cells+=(--col "${names[0]}={ratio('mean', 'mpi', 'lockstep', transport='$transport').spread('.2f', 'x')}")
done
lib table "$rows" --series tool --pair run --by "op n" --rows bytes \
  --fields "run op n transport tool bytes mean p50 p95 busbw load" \
  --title $'\n{op}, {n} ranks (medians of {distinct("run")} runs; time us, busbw GB/s;'\
$' ratio = MPI time / lockstep time)\n' --col 'size={size(bytes)}' "${cells[@]}"
