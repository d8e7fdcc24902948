#!/usr/bin/env bash
# A model that does not fit one rank: each rank of a 4-rank job runs in its
# own cgroup (v1 memory controller) limited to --limit_gib; the same model
# (fsdp_memory_bench's 201M-parameter MLP, Adam) is trained under DDP, which
# the kernel's OOM killer stops, and under FSDP, which trains.
#
#   bazel build -c opt //fsdp:fsdp_memory_bench //tools/launch:lockstep-run
#   sudo bash fsdp/oom_demo.sh [--limit_gib=2.5] [--world=4]
#
# Root only (it creates cgroups under /sys/fs/cgroup/memory/lockstep_oom_demo
# and removes them on any exit). Prints one line per run and, for a rank the
# OOM killer stopped, what its cgroup recorded; exits 0 when DDP was killed
# and FSDP finished, 1 otherwise.
set -uo pipefail
limit_gib=2.5
world=4
root=$(cd "$(dirname "$0")/.." && pwd)
bench="$root/bazel-bin/fsdp/fsdp_memory_bench"
launcher="$root/bazel-bin/tools/launch/lockstep-run"
for arg in "$@"; do
  case "$arg" in
    --limit_gib=*) limit_gib=${arg#*=} ;;
    --world=*) world=${arg#*=} ;;
    --bench=*) bench=${arg#*=} ;;
    --launcher=*) launcher=${arg#*=} ;;
    *) echo "oom_demo: unknown argument $arg (--limit_gib=G --world=N --bench=PATH --launcher=PATH)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "oom_demo: run as root (it creates memory cgroups)" >&2; exit 2; }
base=/sys/fs/cgroup/memory
[[ -f $base/memory.limit_in_bytes ]] || { echo "oom_demo: no cgroup v1 memory controller at $base" >&2; exit 2; }
for f in "$bench" "$launcher"; do
  [[ -x $f ]] || { echo "oom_demo: $f is missing; bazel build -c opt //fsdp:fsdp_memory_bench //tools/launch:lockstep-run" >&2; exit 2; }
done
group=$base/lockstep_oom_demo
limit=$(awk -v g="$limit_gib" 'BEGIN { printf "%d", g * 1024 * 1024 * 1024 }')

cleanup() {
  [[ -d $group ]] || return 0
  for d in "$group"/rank*; do
    [[ -d $d ]] || continue
    # Anything left (a worker still exiting) goes back to the root group.
    while read -r pid; do echo "$pid" >"$base/cgroup.procs" 2>/dev/null; done <"$d/cgroup.procs"
    rmdir "$d" 2>/dev/null
  done
  rmdir "$group" 2>/dev/null
}
trap cleanup EXIT INT TERM

fresh_groups() {
  cleanup
  mkdir -p "$group"
  for ((r = 0; r < world; ++r)); do
    mkdir "$group/rank$r"
    echo "$limit" >"$group/rank$r/memory.limit_in_bytes"
    # No swap to fall back on: memory+swap gets the same limit where the
    # kernel accounts it.
    [[ -f $group/rank$r/memory.memsw.limit_in_bytes ]] && echo "$limit" >"$group/rank$r/memory.memsw.limit_in_bytes"
  done
}

# Each worker joins its rank's cgroup, then becomes the benchmark.
wrapper=$(mktemp /tmp/lockstep_oom_demo.XXXXXX)
trap 'cleanup; rm -f "$wrapper"' EXIT INT TERM
cat >"$wrapper" <<'SH'
#!/bin/sh
echo $$ > "$LOCKSTEP_OOM_DEMO_GROUP/rank$LOCAL_RANK/cgroup.procs" || exit 3
exec "$@"
SH
chmod 755 "$wrapper"

run() {  # mode -> prints the outcome; returns the launcher's status
  local mode=$1 out status
  fresh_groups
  out=$(LOCKSTEP_OOM_DEMO_GROUP="$group" timeout -k 10 600 "$launcher" --standalone --nproc_per_node "$world" \
    --max_restarts 0 "$wrapper" "$bench" --mode="$mode" --steps=2 2>&1)
  status=$?
  echo "$out" | grep -E "rank [0-9]+ mode|\[lockstep-run\]|rror" | grep -v "(restart 0)" | cut -c1-300 | sed 's/^/  /'
  for ((r = 0; r < world; ++r)); do
    local d="$group/rank$r" kills peak
    kills=$(awk '$1 == "oom_kill" { print $2 }' "$d/memory.oom_control")
    peak=$(awk '{ printf "%.2f", $1 / 1073741824 }' "$d/memory.max_usage_in_bytes")
    if [[ ${kills:-0} -gt 0 ]]; then
      echo "  $mode: rank $r was killed by the kernel's OOM killer: its cgroup ($d) could not grow past its" \
        "limit of $limit_gib GiB (usage peaked at $peak GiB before the kill; oom_kill $kills)"
    else
      echo "  $mode: rank $r peak $peak GiB of its $limit_gib GiB limit"
    fi
  done
  return $status
}

echo "== DDP, $world ranks, each limited to $limit_gib GiB"
run ddp
ddp_status=$?
echo "== FSDP, $world ranks, each limited to $limit_gib GiB"
run fsdp
fsdp_status=$?
if [[ $ddp_status -ne 0 && $fsdp_status -eq 0 ]]; then
  echo "oom_demo: DDP ran out of memory (exit $ddp_status) and FSDP trained the same model under the same limit"
  exit 0
fi
echo "oom_demo: expected DDP to fail and FSDP to finish; got DDP exit $ddp_status, FSDP exit $fsdp_status"
exit 1
