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
  local line=$1 field value fields=()
  for field in time_us p50_us p95_us busbw_gbps p99_us max_us stall_us stalls caller_vcsw caller_ivcsw other_vcsw \
    other_ivcsw; do
    value=$(sed -nE "s/.*\"$field\": ([-+0-9.eE]+|nan|inf).*/\1/p" <<<"$line")
    fields+=("${value:-nan}")
  done
  echo "${fields[*]}"
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
    extra=$runs
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
    extra=$pairs
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
    extra="$runs $(git -C "$repo" rev-parse --short HEAD) $(git -C "$repo" rev-parse --short "$rev^{commit}") $rev"
    ;;
esac

# shellcheck disable=SC2086  # extra is a list of arguments.
/usr/bin/python3 - "$mode" "$out" $extra <<'PY'
import math
import os
import statistics
import sys

what, path, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
NAN = float("nan")


def num(text):
    try:
        return float(text)
    except ValueError:
        return NAN


def ok(x):
    return x is not None and not math.isnan(x)


def med(values):
    v = [x for x in values if ok(x)]
    return statistics.median(v) if v else NAN


def fmt(x, digits=1):
    return f"{x:.{digits}f}" if ok(x) else "n/a"


def size(b):
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB" if b >= 1 << 10 else f"{b} B"


rows = []
for line in open(path):
    f = line.split()
    if len(f) != 19:
        continue  # Not a complete row (should not happen: record writes whole lines).
    try:
        b = int(f[5])
    except ValueError:
        continue
    rows.append(dict(key=f[0], mode=f[1], pp=num(f[2]), load=num(f[3]), tool=f[4], bytes=b,
                     mean=num(f[6]), p50=num(f[7]), p95=num(f[8]), bw=num(f[9]), p99=num(f[10]),
                     max=num(f[11]), stall=num(f[12]), stalls=num(f[13]), vcsw=num(f[14]), ivcsw=num(f[15]),
                     ovcsw=num(f[16]), oivcsw=num(f[17]), steal=num(f[18])))
if not rows:
    sys.exit("compare_all_reduce: no run produced figures (see the errors above)")

# (key, bytes, tool) -> row: a run or pair, measured within seconds.
by_key = {(r["key"], r["bytes"], r["tool"]): r for r in rows}


def ratios(num_tool, den_tool, field, b=None, keys=None):
    """Per-pair ratios num/den of `field` over pairs where both ran."""
    out = []
    for (key, bb, tool), r in by_key.items():
        if tool != den_tool or (b is not None and bb != b) or (keys is not None and key not in keys):
            continue
        other = by_key.get((key, bb, num_tool))
        if other and ok(other[field]) and ok(r[field]) and r[field] > 0:
            out.append(other[field] / r[field])
    return out


def raw_rows(fields):
    print()
    print("| " + " | ".join(h for h, _ in fields) + " |")
    print("|" + "---|" * len(fields))
    for r in rows:
        print("| " + " | ".join(fn(r) for _, fn in fields) + " |")


if what == "default":
    def tool_rows(tool, b):
        return [r for r in rows if r["tool"] == tool and r["bytes"] == b]

    def cell(tool, b):
        v = tool_rows(tool, b)
        if not v:
            return "n/a"
        lo, hi = min(r["mean"] for r in v), max(r["mean"] for r in v)
        pct = ""
        if any(ok(r["p50"]) for r in v):
            pct = f"p50 {fmt(med(r['p50'] for r in v))}, p95 {fmt(med(r['p95'] for r in v))}; "
        return (f"{fmt(med(r['mean'] for r in v))} us / {fmt(med(r['bw'] for r in v), 2)} "
                f"({pct}range {lo:.0f}-{hi:.0f} us)")

    print(f"| size | lockstep TCP | PyTorch gloo | OpenMPI TCP | best peer / lockstep (median of medians) "
          f"| median of per-run ratios | (median of {extra[0]} runs; mean time us / busbw GB/s; "
          f"p50/p95 over iterations of the slowest rank, us)")
    print("|---|---|---|---|---|---|")
    for b in sorted({r["bytes"] for r in rows}):
        ours = med(r["mean"] for r in tool_rows("lockstep", b))
        best = min((med(r["mean"] for r in tool_rows(t, b)) for t in ("gloo", "mpi")),
                   key=lambda x: x if ok(x) else math.inf)
        # Runs are interleaved (lockstep, gloo, MPI for one size, then the
        # next), so each run's ratio compares tools measured within seconds of
        # each other; the machine switches between fast and slow modes
        # (docs/PERFORMANCE.md).
        per_run = []
        for r in tool_rows("lockstep", b):
            peers = [by_key.get((r["key"], b, t)) for t in ("gloo", "mpi")]
            peers = [p["mean"] for p in peers if p and ok(p["mean"])]
            if peers and ok(r["mean"]) and r["mean"] > 0:
                per_run.append(min(peers) / r["mean"])
        ratio = best / ours if ok(best) and ok(ours) and ours > 0 else NAN
        print(f"| {size(b)} | {cell('lockstep', b)} | {cell('gloo', b)} | {cell('mpi', b)} "
              f"| {fmt(ratio, 2)}x | {fmt(med(per_run), 2)}x |")

    # Shared memory: lockstep --transport=shm against OpenMPI's vader, each
    # run's pair measured within seconds of each other.
    print()
    print(f"| size | lockstep shm | OpenMPI vader | vader / lockstep (median of medians) "
          f"| median of per-run ratios | busbw lockstep / vader |")
    print("|---|---|---|---|---|---|")
    for b in sorted({r["bytes"] for r in rows}):
        ours = med(r["mean"] for r in tool_rows("lockstep_shm", b))
        peer = med(r["mean"] for r in tool_rows("vader", b))
        ratio = peer / ours if ok(peer) and ok(ours) and ours > 0 else NAN
        bw = med(ratios("lockstep_shm", "vader", "bw", b=b))
        print(f"| {size(b)} | {cell('lockstep_shm', b)} | {cell('vader', b)} | {fmt(ratio, 2)}x "
              f"| {fmt(med(ratios('vader', 'lockstep_shm', 'mean', b=b)), 2)}x | {fmt(bw, 2)}x |")

elif what == "small":
    # One ping-pong per pair: the pair's mode is that of its rows.
    pair_mode = {r["key"]: r["mode"] for r in rows}
    modes = sorted(set(pair_mode.values())) + ["all"]
    tight = os.environ.get("TIGHT_ITERS", "200000")
    print(f"4 KiB all-reduce, 2 ranks, --iters 2000 --warmup 200 (tight loop: {tight} iterations, 2000 warm-up); "
          f"{extra[0]} interleaved pairs; "
          "medians over pairs (us); ratio = median of per-pair MPI/lockstep; TCP: lockstep "
          "--transport=tcp vs OpenMPI btl tcp; shm: lockstep --transport=shm vs OpenMPI vader")
    print()
    print("| transport | mode | pairs | lockstep p50 | lockstep p95 | lockstep mean | MPI p50 | MPI p95 | MPI mean "
          "| MPI/lockstep p50 | MPI/lockstep p95 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for transport, ours_tool, mpi_tool in (("tcp", "lockstep", "mpi"), ("shm", "lockstep_shm", "vader"),
                                           ("shm, tight loop", "lockstep_shm_tight", "vader_tight")):
        for m in modes:
            keys = {k for k, v in pair_mode.items() if m in ("all", v)}
            if m == "all" and len(modes) == 2:
                continue  # One mode: "all" would repeat it.
            ours = [r for r in rows if r["tool"] == ours_tool and r["key"] in keys]
            mpi = [r for r in rows if r["tool"] == mpi_tool and r["key"] in keys]
            if not ours and not mpi:
                continue
            figures = [fmt(med(r[f] for r in v)) for v in (ours, mpi) for f in ("p50", "p95", "mean")]
            rp50 = med(ratios(mpi_tool, ours_tool, "p50", keys=keys))
            rp95 = med(ratios(mpi_tool, ours_tool, "p95", keys=keys))
            print(f"| {transport} | {m} | {len(keys)} | " + " | ".join(figures)
                  + f" | {fmt(rp50, 2)}x | {fmt(rp95, 2)}x |")
    # Where the tail comes from: the stalls' share of the mean, beside what
    # the threads and the host did meanwhile.
    print()
    print("Stalls (iterations slower than 10 x p50), medians over pairs: their share of the mean (us per "
          "iteration), how many, p99, the context switches in the timed loop (lockstep: calling thread / "
          "other threads; OpenMPI: the process), and the host's steal time during the run (ms)")
    print()
    print("| tool | mode | pairs | stall share us | stalls | p99 us | max us | csw vol / invol | other vol / invol "
          "| steal ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for tool in ("lockstep_shm", "vader", "lockstep_shm_tight", "vader_tight"):
        for m in modes:
            keys = {k for k, v in pair_mode.items() if m in ("all", v)}
            if m == "all" and len(modes) == 2:
                continue
            v = [r for r in rows if r["tool"] == tool and r["key"] in keys]
            if not v:
                continue
            print(f"| {tool} | {m} | {len(v)} | {fmt(med(r['stall'] for r in v), 3)} "
                  f"| {fmt(med(r['stalls'] for r in v), 0)} | {fmt(med(r['p99'] for r in v), 2)} "
                  f"| {fmt(med(r['max'] for r in v), 0)} | {fmt(med(r['vcsw'] for r in v), 0)} / "
                  f"{fmt(med(r['ivcsw'] for r in v), 0)} | {fmt(med(r['ovcsw'] for r in v), 0)} / "
                  f"{fmt(med(r['oivcsw'] for r in v), 0)} | {fmt(med(r['steal'] for r in v), 0)} |")
    raw_rows([("pair", lambda r: r["key"]), ("mode", lambda r: r["mode"]),
              ("pingpong ns", lambda r: fmt(r["pp"])), ("tool", lambda r: r["tool"]),
              ("mean us", lambda r: fmt(r["mean"], 2)), ("p50 us", lambda r: fmt(r["p50"], 2)),
              ("p95 us", lambda r: fmt(r["p95"], 2)), ("p99 us", lambda r: fmt(r["p99"], 2)),
              ("stall us", lambda r: fmt(r["stall"], 3)), ("stalls", lambda r: fmt(r["stalls"], 0)),
              ("csw", lambda r: f"{fmt(r['vcsw'], 0)}/{fmt(r['ivcsw'], 0)}"),
              ("other csw", lambda r: f"{fmt(r['ovcsw'], 0)}/{fmt(r['oivcsw'], 0)}"),
              ("steal ms", lambda r: fmt(r["steal"], 0)), ("load", lambda r: fmt(r["load"], 2))])

elif what == "ab":
    runs, head, other, rev = extra[0], extra[1], extra[2], " ".join(extra[3:])
    # A revision from before the percentiles reports only the mean: its mean
    # stands in for p50, and the table says so.
    fallback = set()
    for r in rows:
        r["p50_raw"] = r["p50"]
        if not ok(r["p50"]):
            r["p50"] = r["mean"]
            fallback.add(r["tool"])

    def pair_mode(key, b):
        a, bb = by_key.get((key, b, "A")), by_key.get((key, b, "B"))
        if not a or not bb:
            return None
        return a["mode"] if a["mode"] == bb["mode"] else "mixed"

    print(f"A = this tree ({head}, with its uncommitted changes), B = {rev} ({other}); {runs} runs; "
          "A and B back to back in alternating order, each after a ping-pong; medians (us); "
          "ratio = median of per-pair B/A (above 1: B slower)")
    if fallback:
        print(f"(no p50_us from {' and '.join(sorted(fallback))}: its mean stands in for p50)")
    print()
    print("| size | mode | pairs | A mean | A p50 | B mean | B p50 | B/A mean | B/A p50 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for b in sorted({r["bytes"] for r in rows}):
        keys = sorted({r["key"] for r in rows if r["bytes"] == b})
        modes = {k: pair_mode(k, b) for k in keys}
        complete = {k for k, m in modes.items() if m is not None}
        counts = {}
        for m in modes.values():
            if m is not None:
                counts[m] = counts.get(m, 0) + 1
        groups = [("all", complete)] + [(m, {k for k in complete if modes[k] == m}) for m in sorted(counts)]
        if len(counts) == 1:
            groups = groups[1:]  # One mode: "all" would repeat it.
        for m, ks in groups:
            a = [r for r in rows if r["bytes"] == b and r["tool"] == "A" and r["key"] in ks]
            bb = [r for r in rows if r["bytes"] == b and r["tool"] == "B" and r["key"] in ks]
            rm = med(ratios("B", "A", "mean", b=b, keys=ks))
            rp = med(ratios("B", "A", "p50", b=b, keys=ks))
            label = m if m != "all" else "all (" + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ")"
            print(f"| {size(b)} | {label} | {len(ks)} | {fmt(med(r['mean'] for r in a))} "
                  f"| {fmt(med(r['p50'] for r in a))} | {fmt(med(r['mean'] for r in bb))} "
                  f"| {fmt(med(r['p50'] for r in bb))} | {fmt(rm, 2)}x | {fmt(rp, 2)}x |")
        if len(complete) < len(keys):
            print(f"| {size(b)} | (incomplete) | {len(keys) - len(complete)} | one side failed; not counted |")
    raw_rows([("run", lambda r: r["key"]), ("size", lambda r: size(r["bytes"])), ("side", lambda r: r["tool"]),
              ("mode", lambda r: r["mode"]), ("pingpong ns", lambda r: fmt(r["pp"])),
              ("mean us", lambda r: fmt(r["mean"], 2)), ("p50 us", lambda r: fmt(r["p50_raw"], 2)),
              ("p95 us", lambda r: fmt(r["p95"], 2)), ("load", lambda r: fmt(r["load"], 2))])
PY
