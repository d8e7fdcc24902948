#!/usr/bin/env bash
# lockstep's all-reduce beside its peers, 2 ranks, f32 SUM, interleaved
# runs, medians: over TCP (lockstep --transport=tcp) beside PyTorch 1.13
# gloo and OpenMPI over TCP, and over shared memory (lockstep
# --transport=shm) beside OpenMPI's shared-memory path (vader: --mca btl
# self,vader). Three modes:
#
#   bash tools/bench/compare_all_reduce.sh [runs]
#       sizes 4 KiB..256 MiB; per size lockstep TCP, gloo, OpenMPI TCP,
#       lockstep shm and OpenMPI vader one after the other, `runs` times
#       (default 6); two markdown tables of medians (TCP, shared memory;
#       mean, and p50/p95 for lockstep and OpenMPI, which report them).
#   bash tools/bench/compare_all_reduce.sh --small_pairs N
#       the 4 KiB acceptance protocol: N pairs, each a cache-line ping-pong
#       (which placement mode the vCPUs are in, docs/PERFORMANCE.md),
#       then lockstep and OpenMPI over TCP and lockstep shm and OpenMPI
#       vader (--iters 2000 --warmup 200), lockstep first on odd pairs and
#       OpenMPI first on even ones; then both over shared memory once more
#       in a tight loop of TIGHT_ITERS iterations (default 200000; 0: none),
#       the figure vader's own long runs give. Medians per mode and
#       transport, per-pair ratios MPI/lockstep, and the raw rows.
#   bash tools/bench/compare_all_reduce.sh --ab REV [runs]
#       this tree (A) against git revision REV (B), built in a temporary git
#       worktree with its own Bazel server; for each of `runs` (default 3) and
#       each size, A and B back to back in alternating order, each right after
#       a ping-pong. Medians of A and B and of the per-pair ratios B/A, per
#       size and placement mode. AB_SIZES="4096 65536" restricts the sizes.
#       Both sides run their default transport (auto: shared memory here);
#       against a revision from before --transport, compare like with like
#       by AB_A_FLAGS=--transport=tcp.
#
# LOCKSTEP_BENCH_FLAGS adds flags to lockstep's runs (both sides in --ab),
# e.g. LOCKSTEP_BENCH_FLAGS=--tcp_congestion_control= (the system's algorithm);
# AB_A_FLAGS and AB_B_FLAGS add flags to one side of --ab only (e.g.
# AB_A_FLAGS=--bind_to=none against a revision without binding).
# Needs python3-torch (default mode only) and openmpi-bin/libopenmpi-dev (apt).
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.
repo=$(pwd)

usage() { sed -n '2,32s/^# \{0,1\}//p' "$0" >&2; }
die() { echo "compare_all_reduce: $*" >&2; exit 2; }
is_count() { [[ $1 =~ ^[1-9][0-9]*$ ]]; }

mode=default runs=6 pairs=0 rev=
case "${1:-}" in
  --small_pairs)
    mode=small pairs=${2:-}
    is_count "$pairs" || die "--small_pairs needs a number of pairs, e.g. --small_pairs 10"
    ;;
  --ab)
    mode=ab rev=${2:-} runs=${3:-3}
    [[ -n $rev ]] || die "--ab needs a git revision, e.g. --ab HEAD~1"
    is_count "$runs" || die "--ab REV [runs]: runs must be a positive number, not '$runs'"
    ;;
  -h | --help) usage; exit 0 ;;
  "") ;;
  *)
    is_count "$1" || { usage; die "unknown argument '$1'"; }
    runs=$1
    ;;
esac

iters_for() {  # Same schedule for every tool: about 0.1-0.5 s per size.
  local b=$1
  if (( b <= 65536 )); then echo 1000; elif (( b <= 1048576 )); then echo 200;
  elif (( b <= 16777216 )); then echo 20; else echo 5; fi
}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo

tmp=$(mktemp -d)
worktree_added=0 ab_server=0
cleanup() {
  # The --ab worktree's Bazel server and output base are ours alone: stop the
  # server (its output base lives under $tmp) before removing the worktree.
  if (( ab_server )); then
    (cd "$tmp/ab" && bazel --output_base="$tmp/ab_output_base" shutdown) >/dev/null 2>&1 || true
  fi
  if (( worktree_added )); then
    git -C "$repo" worktree remove --force "$tmp/ab" >/dev/null 2>&1 ||
      echo "compare_all_reduce: could not remove the worktree $tmp/ab (git worktree prune will)" >&2
  fi
  chmod -R u+w "$tmp" 2>/dev/null || true  # Bazel leaves read-only files.
  rm -rf "$tmp"
}
trap cleanup EXIT

# Builds `targets` in the workspace `dir` (extra Bazel startup flags in
# `startup`), printing the log's tail if it fails.
build() {
  local dir=$1 startup=$2; shift 2
  # shellcheck disable=SC2086  # startup is empty or one flag.
  if ! (cd "$dir" && bazel $startup build --config=opt "$@") >"$tmp/build.log" 2>&1; then
    tail -n 30 "$tmp/build.log" >&2
    die "bazel build $* failed in $dir"
  fi
}

# Copies of the binaries, so that another build in this tree during the runs
# cannot swap them underneath us.
build "$repo" "" //tools/bench:collectives //tools/bench:cacheline_pingpong
cp -L bazel-bin/tools/bench/collectives "$tmp/A_collectives"
cp -L bazel-bin/tools/bench/cacheline_pingpong "$tmp/pingpong"
mpibin=$tmp/mpi_all_reduce
mpicc -O2 -o "$mpibin" tools/bench/peers/mpi_all_reduce.c
errlog=$tmp/errors.log
touch "$errlog"

# Every measurement is one line of $out:
#   key mode pingpong_ns load tool bytes mean_us p50_us p95_us busbw_GBps
#   p99_us max_us stall_us stalls vcsw ivcsw other_vcsw other_ivcsw steal_ms
# (key: the run or pair; mode, pingpong_ns: "-" and nan where no ping-pong
# ran; nan for a figure the tool does not report. stall_us: the mean's
# share of iterations slower than 10 x p50; vcsw, ivcsw: context switches
# of the calling thread (lockstep) or the process (OpenMPI) in the timed
# loop, other_*: lockstep's other threads; steal_ms: the time the host
# took the VM's vCPUs from it during the run, all vCPUs together.)
out=$tmp/rows
: >"$out"

# Prints `mean p50 p95 busbw p99 max stall stalls vcsw ivcsw other_vcsw
# other_ivcsw` from the benchmark's JSON line; nan for fields it lacks
# (older revisions print no percentiles or tail figures).
json_fields() {
  lib json time_us p50_us p95_us busbw_gbps p99_us max_us stall_us stalls \
    caller_vcsw caller_ivcsw other_vcsw other_ivcsw <<<"$1"
}

# Each run has a deadline, so that a hung rank costs minutes, not the night.
run_lockstep() {  # bin bytes iters warmup [transport] -> the fields of json_fields
  local line transport_flag=()
  [[ -n ${5:-} ]] && transport_flag=(--transport="$5")
  # The JSON names the transport that ran: refuse a run on another one.
  # shellcheck disable=SC2086  # LOCKSTEP_BENCH_FLAGS is a list of flags.
  line=$(timeout -k 5 300 "$1" --nproc=2 --min_bytes="$2" --max_bytes="$2" --iters="$3" --warmup="$4" --json \
    "${transport_flag[@]}" ${LOCKSTEP_BENCH_FLAGS:-} ${side_flags:-} 2>>"$errlog" | grep '^{' | tail -n 1) || return 1
  [[ -n $line ]] || return 1
  if [[ -n ${5:-} && $line != *"\"transport\": \"host over $5\""* ]]; then
    echo "compare_all_reduce: asked for --transport=$5, the benchmark ran: $line" >>"$errlog"
    return 1
  fi
  json_fields "$line"
}
run_mpi() {  # bytes iters warmup [tcp|vader] -> as json_fields (no other threads: nan)
  local f btl=(--mca btl tcp,self --mca btl_tcp_if_include lo)
  [[ ${4:-tcp} == vader ]] && btl=(--mca btl self,vader)
  read -r -a f < <(timeout -k 5 300 mpirun --allow-run-as-root -np 2 "${btl[@]}" \
    "$mpibin" "$1" "$2" "$3" 2>>"$errlog" | grep '^mpi ' | tail -n 1) || return 1
  (( ${#f[@]} >= 4 )) || return 1
  echo "${f[2]} ${f[4]:-nan} ${f[5]:-nan} ${f[3]} ${f[6]:-nan} ${f[7]:-nan} ${f[8]:-nan} ${f[9]:-nan}" \
    "${f[10]:-nan} ${f[11]:-nan} nan nan"
}
run_gloo() {  # bytes iters warmup -> mean p50 p95 busbw (gloo has no percentiles)
  local f
  read -r -a f < <(timeout -k 5 300 /usr/bin/python3 tools/bench/peers/gloo_all_reduce.py --nproc 2 --bytes "$1" \
    --iters "$2" --warmup "$3" 2>>"$errlog" | grep '^gloo ' | tail -n 1) || return 1
  (( ${#f[@]} >= 4 )) || return 1
  echo "${f[2]} nan nan ${f[3]} nan nan nan nan nan nan nan nan"
}
pingpong() {  # -> ns mode ("nan unknown" if it failed)
  local f
  read -r -a f < <(timeout -k 2 20 "$tmp/pingpong" 2>>"$errlog" | grep '^pingpong ') || true
  if (( ${#f[@]} == 3 )); then echo "${f[1]} ${f[2]}"; else echo "nan unknown"; fi
}
load() { cut -d' ' -f1 /proc/loadavg; }
# The VM's steal time so far, all vCPUs, in clock ticks (/proc/stat's
# eighth figure of the "cpu" line).
steal_ticks() { awk '$1 == "cpu" { print $9; exit }' /proc/stat; }
ticks_per_s=$(getconf CLK_TCK)

# record key mode pingpong_ns tool bytes command...: runs the command and
# appends its figures, or warns and goes on (the analysis skips holes).
record() {
  local key=$1 pmode=$2 pp=$3 tool=$4 b=$5 figures steal0 steal_ms
  shift 5
  steal0=$(steal_ticks)
  if figures=$("$@"); then
    steal_ms=$(( ($(steal_ticks) - steal0) * 1000 / ticks_per_s ))
    echo "$key $pmode $pp $(load) $tool $b $figures $steal_ms" >>"$out"
  else
    echo "compare_all_reduce: $tool at $b bytes failed in run/pair $key (skipped); stderr:" >&2
    tail -n 5 "$errlog" >&2
  fi
}

case $mode in
  default)
    sizes=(4096 65536 1048576 16777216 67108864 268435456)
    for run in $(seq "$runs"); do
      for b in "${sizes[@]}"; do
        it=$(iters_for "$b")
        w=$(( it / 10 + 2 ))
        record "$run" - nan lockstep "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" tcp
        record "$run" - nan gloo "$b" run_gloo "$b" "$it" "$w"
        record "$run" - nan mpi "$b" run_mpi "$b" "$it" "$w" tcp
        record "$run" - nan lockstep_shm "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" shm
        record "$run" - nan vader "$b" run_mpi "$b" "$it" "$w" vader
      done
      echo "run $run done, load $(load)" >&2
    done
    ;;
  small)
    b=4096 it=2000 w=200
    tight_iters=${TIGHT_ITERS:-200000}
    is_count "$tight_iters" || [[ $tight_iters == 0 ]] || die "TIGHT_ITERS: '$tight_iters' is not a count"
    for pair in $(seq "$pairs"); do
      read -r pp pmode < <(pingpong)
      if (( pair % 2 == 1 )); then
        record "$pair" "$pmode" "$pp" lockstep "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" tcp
        record "$pair" "$pmode" "$pp" mpi "$b" run_mpi "$b" "$it" "$w" tcp
        record "$pair" "$pmode" "$pp" lockstep_shm "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" shm
        record "$pair" "$pmode" "$pp" vader "$b" run_mpi "$b" "$it" "$w" vader
      else
        record "$pair" "$pmode" "$pp" mpi "$b" run_mpi "$b" "$it" "$w" tcp
        record "$pair" "$pmode" "$pp" lockstep "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" tcp
        record "$pair" "$pmode" "$pp" vader "$b" run_mpi "$b" "$it" "$w" vader
        record "$pair" "$pmode" "$pp" lockstep_shm "$b" run_lockstep "$tmp/A_collectives" "$b" "$it" "$w" shm
      fi
      # The tight loops: as many iterations as TIGHT_ITERS, shared memory
      # only, the order alternating with the pair's.
      if (( tight_iters > 0 )); then
        if (( pair % 2 == 1 )); then
          record "$pair" "$pmode" "$pp" lockstep_shm_tight "$b" run_lockstep "$tmp/A_collectives" "$b" "$tight_iters" 2000 shm
          record "$pair" "$pmode" "$pp" vader_tight "$b" run_mpi "$b" "$tight_iters" 2000 vader
        else
          record "$pair" "$pmode" "$pp" vader_tight "$b" run_mpi "$b" "$tight_iters" 2000 vader
          record "$pair" "$pmode" "$pp" lockstep_shm_tight "$b" run_lockstep "$tmp/A_collectives" "$b" "$tight_iters" 2000 shm
        fi
      fi
      echo "pair $pair done: $pmode ($pp ns), load $(load)" >&2
    done
    ;;
  ab)
    git -C "$repo" rev-parse --verify --quiet "$rev^{commit}" >/dev/null || die "'$rev' is not a revision of $repo"
    read -r -a sizes <<<"${AB_SIZES:-4096 65536 1048576 16777216 67108864}"
    for b in "${sizes[@]}"; do is_count "$b" || die "AB_SIZES: '$b' is not a byte count"; done
    worktree_added=1
    git -C "$repo" worktree add --detach "$tmp/ab" "$rev" >/dev/null 2>&1 || {
      worktree_added=0
      die "git worktree add of '$rev' failed"
    }
    echo "building $rev ($(git -C "$tmp/ab" log -1 --format='%h %s' | cut -c1-70)) in $tmp/ab" >&2
    ab_server=1
    build "$tmp/ab" "--output_base=$tmp/ab_output_base" //tools/bench:collectives
    cp -L "$tmp/ab/bazel-bin/tools/bench/collectives" "$tmp/B_collectives"
    # The build is done: stop its server now rather than let it hold memory
    # through the timed runs.
    (cd "$tmp/ab" && bazel --output_base="$tmp/ab_output_base" shutdown) >/dev/null 2>&1 || true
    ab_server=0
    side() {  # A or B, preceded by its own ping-pong.
      local pp pmode side_flags
      if [[ $2 == A ]]; then side_flags=${AB_A_FLAGS:-}; else side_flags=${AB_B_FLAGS:-}; fi
      read -r pp pmode < <(pingpong)
      record "$1" "$pmode" "$pp" "$2" "$3" run_lockstep "$tmp/$2_collectives" "$3" "$4" "$5"
    }
    for run in $(seq "$runs"); do
      for i in "${!sizes[@]}"; do
        b=${sizes[$i]}
        it=$(iters_for "$b")
        w=$(( it / 10 + 2 ))
        # Alternate across runs for each size, and across sizes in a run.
        if (( (run + i) % 2 == 1 )); then
          side "$run" A "$b" "$it" "$w"; side "$run" B "$b" "$it" "$w"
        else
          side "$run" B "$b" "$it" "$w"; side "$run" A "$b" "$it" "$w"
        fi
      done
      echo "run $run done, load $(load)" >&2
    done
    ;;
esac

# The tables (tools/bench/compare_lib.py): medians over runs or pairs, and
# the per-run or per-pair ratios, from $out.
fields="key mode pp load tool bytes mean p50 p95 bw p99 max stall stalls vcsw ivcsw ovcsw oivcsw steal"
table() { lib table "$out" --fields "$fields" --series tool "$@"; }
report_default() {  # runs
  # Runs are interleaved (lockstep, gloo, MPI for one size, then the next),
  # so each run's ratio compares tools measured within seconds of each
  # other; the machine switches between fast and slow modes
  # (docs/PERFORMANCE.md).
  table --pair key --rows bytes --col 'size={size(bytes)}' \
    --col 'lockstep TCP={timing("lockstep")}' --col 'PyTorch gloo={timing("gloo")}' \
    --col 'OpenMPI TCP={timing("mpi")}' \
    --col 'best peer / lockstep (median of medians)={best(v("mean", "gloo"), v("mean", "mpi"))
           / v("mean", "lockstep"):.2f}x' \
    --col 'median of per-run ratios={ratio("mean", ("gloo", "mpi"), "lockstep"):.2f}x' \
    --note "(median of $1 runs; mean time us / busbw GB/s; p50/p95 over iterations of the slowest rank, us)"
  # Shared memory: lockstep --transport=shm against OpenMPI's vader, each
  # run's pair measured within seconds of each other.
  table --pair key --rows bytes --title '' --col 'size={size(bytes)}' \
    --col 'lockstep shm={timing("lockstep_shm")}' --col 'OpenMPI vader={timing("vader")}' \
    --col 'vader / lockstep (median of medians)={v("mean", "vader") / v("mean", "lockstep_shm"):.2f}x' \
    --col 'median of per-run ratios={ratio("mean", "vader", "lockstep_shm"):.2f}x' \
    --col 'busbw lockstep / vader={ratio("bw", "lockstep_shm", "vader"):.2f}x'
}
report_small() {  # pairs
  local ours mpi label header=() tools
  echo "4 KiB all-reduce, 2 ranks, --iters 2000 --warmup 200 (tight loop: ${TIGHT_ITERS:-200000} iterations, 2000" \
    "warm-up); $1 interleaved pairs; medians over pairs (us); ratio = median of per-pair MPI/lockstep; TCP:" \
    "lockstep --transport=tcp vs OpenMPI btl tcp; shm: lockstep --transport=shm vs OpenMPI vader"
  echo
  # Per transport and placement mode (and all modes, when both were seen).
  for tools in "tcp:lockstep:mpi" "shm:lockstep_shm:vader" "shm, tight loop:lockstep_shm_tight:vader_tight"; do
    IFS=: read -r label ours mpi <<<"$tools"
    table --pair key --where "tool in ('$ours', '$mpi')" --rows mode --rollup mode=all "${header[@]}" \
      --col "transport=$label" --col 'mode={mode}' --col 'pairs={distinct("key")}' \
      --col "lockstep p50={v('p50', '$ours'):.1f}" --col "lockstep p95={v('p95', '$ours'):.1f}" \
      --col "lockstep mean={v('mean', '$ours'):.1f}" --col "MPI p50={v('p50', '$mpi'):.1f}" \
      --col "MPI p95={v('p95', '$mpi'):.1f}" --col "MPI mean={v('mean', '$mpi'):.1f}" \
      --col "MPI/lockstep p50={ratio('p50', '$mpi', '$ours'):.2f}x" \
      --col "MPI/lockstep p95={ratio('p95', '$mpi', '$ours'):.2f}x"
    header=(--no-header)
  done
  # Where the tail comes from: the stalls' share of the mean, beside what
  # the threads and the host did meanwhile.
  echo
  echo "Stalls (iterations slower than 10 x p50), medians over pairs: their share of the mean (us per" \
    "iteration), how many, p99, the context switches in the timed loop (lockstep: calling thread /" \
    "other threads; OpenMPI: the process), and the host's steal time during the run (ms)"
  echo
  table --where "tool in ('lockstep_shm', 'vader', 'lockstep_shm_tight', 'vader_tight')" \
    --rows "tool:seen mode" --rollup mode=all --col 'tool={tool}' --col 'mode={mode}' \
    --col 'pairs={distinct("key")}' --col 'stall share us={v("stall"):.3f}' --col 'stalls={v("stalls"):.0f}' \
    --col 'p99 us={v("p99"):.2f}' --col 'max us={v("max"):.0f}' \
    --col 'csw vol / invol={v("vcsw"):.0f} / {v("ivcsw"):.0f}' \
    --col 'other vol / invol={v("ovcsw"):.0f} / {v("oivcsw"):.0f}' --col 'steal ms={v("steal"):.0f}'
  table --each --title '' --col 'pair={key}' --col 'mode={mode}' --col 'pingpong ns={v("pp"):.1f}' \
    --col 'tool={tool}' --col 'mean us={v("mean"):.2f}' --col 'p50 us={v("p50"):.2f}' \
    --col 'p95 us={v("p95"):.2f}' --col 'p99 us={v("p99"):.2f}' --col 'stall us={v("stall"):.3f}' \
    --col 'stalls={v("stalls"):.0f}' --col 'csw={v("vcsw"):.0f}/{v("ivcsw"):.0f}' \
    --col 'other csw={v("ovcsw"):.0f}/{v("oivcsw"):.0f}' --col 'steal ms={v("steal"):.0f}' \
    --col 'load={v("load"):.2f}'
}
report_ab() {  # runs head other rev
  local runs=$1 head=$2 other=$3 rev=$4 fallback
  echo "A = this tree ($head, with its uncommitted changes), B = $rev ($other); $runs runs; A and B back to back" \
    "in alternating order, each after a ping-pong; medians (us); ratio = median of per-pair B/A (above 1: B" \
    "slower)"
  # A revision from before the percentiles reports only the mean: its mean
  # stands in for p50, and the table says so.
  fallback=$(awk '$8 == "nan" { print $5 }' "$out" | sort -u | paste -sd' ' | sed 's/ / and /g')
  [[ -z $fallback ]] || echo "(no p50_us from $fallback: its mean stands in for p50)"
  echo
  # A pair's mode: its sides' mode, or mixed; a pair with a side missing is
  # left out (and counted below the table).
  table --pair "key bytes" --fill p50=mean --unify mode --complete --rows "bytes mode" \
    --rollup 'mode=all ({counts("mode")})' --rollup-first --col 'size={size(bytes)}' --col 'mode={mode}' \
    --col 'pairs={distinct("key")}' --col 'A mean={v("mean", "A"):.1f}' --col 'A p50={v("p50", "A"):.1f}' \
    --col 'B mean={v("mean", "B"):.1f}' --col 'B p50={v("p50", "B"):.1f}' \
    --col 'B/A mean={ratio("mean", "B", "A"):.2f}x' --col 'B/A p50={ratio("p50", "B", "A"):.2f}x'
  table --each --title '' --col 'run={key}' --col 'size={size(bytes)}' --col 'side={tool}' --col 'mode={mode}' \
    --col 'pingpong ns={v("pp"):.1f}' --col 'mean us={v("mean"):.2f}' --col 'p50 us={v("p50"):.2f}' \
    --col 'p95 us={v("p95"):.2f}' --col 'load={v("load"):.2f}'
}

[[ -s $out ]] || { echo "compare_all_reduce: no run produced figures (see the errors above)" >&2; exit 1; }
case $mode in
  default) report_default "$runs" ;;
  small) report_small "$pairs" ;;
  ab)
    report_ab "$runs" "$(git -C "$repo" rev-parse --short HEAD)" "$(git -C "$repo" rev-parse --short "$rev^{commit}")" \
      "$rev"
    ;;
esac
