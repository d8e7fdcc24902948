#!/usr/bin/env bash
# What the flight recorder costs: //tools/bench:collectives with the
# recorder on (its default, 64 entries) and off (--flight_recorder_entries=0),
# all-reduce, f32, 2 ranks, one size per row, interleaved pairs, medians:
#
#   bash tools/bench/compare_flight_recorder.sh [pairs]      (default 10)
#
# Each pair runs both binaries' configurations one after the other (on first
# in odd pairs, off first in even ones) so that the host's placement modes
# (docs/PERFORMANCE.md) fall on both alike. Prints per transport and size the
# median per-op time with and without the recorder and the median and range
# of the per-pair ratios on/off (1.00: no cost), and the range of the runs
# without it (the benchmark's own noise).
#
# TRANSPORTS (tcp shm), SIZES (bytes; 4096) and ITERS (20000) narrow or widen it.
set -euo pipefail
cd "$(dirname "$0")/../.."
lib() { /usr/bin/python3 tools/bench/compare_lib.py "$@"; }  # Medians, ratios, tables, JSON fields.

die() { echo "compare_flight_recorder: $*" >&2; exit 2; }
pairs=${1:-10}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || die "pairs must be a positive number, not '$pairs'"
transports=(${TRANSPORTS:-tcp shm})
sizes=(${SIZES:-4096})
iters=${ITERS:-20000}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! bazel build --config=opt //tools/bench:collectives >"$tmp/build.log" 2>&1; then
  tail -n 30 "$tmp/build.log" >&2
  die "bazel build //tools/bench:collectives failed"
fi
cp -L bazel-bin/tools/bench/collectives "$tmp/collectives"
rows=$tmp/rows
: >"$rows"

run() {  # transport bytes entries -> mean us
  local line
  line=$(timeout -k 5 600 "$tmp/collectives" --op=all_reduce --nproc=2 --transport="$1" --min_bytes="$2" \
    --max_bytes="$2" --iters="$iters" --warmup=$((iters / 10)) --flight_recorder_entries="$3" --json \
    2>>"$tmp/errors.log" | grep '^{' | tail -n 1) || { tail -n 5 "$tmp/errors.log" >&2; die "run failed"; }
  lib json time_us <<<"$line"
}

for p in $(seq "$pairs"); do
  for transport in "${transports[@]}"; do
    for b in "${sizes[@]}"; do
      if (( p % 2 == 1 )); then
        on=$(run "$transport" "$b" 64); off=$(run "$transport" "$b" 0)
      else
        off=$(run "$transport" "$b" 0); on=$(run "$transport" "$b" 64)
      fi
      echo "$p $transport $b $on $off $(cut -d' ' -f1 /proc/loadavg)" >>"$rows"
    done
  done
  echo "pair $p of $pairs done, load $(cut -d' ' -f1 /proc/loadavg)" >&2
done
[[ -n ${KEEP_ROWS:-} ]] && cp "$rows" "$KEEP_ROWS"

lib table "$rows" --fields "pair transport bytes on off load" \
  --rows "transport:seen bytes:seen" \
  --title $'\nall-reduce f32, 2 ranks, '"$pairs"$' interleaved pairs (time per op, us; ratio = on / off)\n' \
  --col 'transport={transport}' --col 'size={bytes} B' --col 'recorder on={v("on"):.3f}' \
  --col 'recorder off={v("off"):.3f}' --col 'ratio median={rowratio("on", "off"):.3f}' \
  --col 'ratio range={rowratio("on", "off").range(".2f")}' --col "off runs' range={v('off').range('.3f')}"
