#!/bin/bash
# The scale lab end to end, as root: a 16-rank cluster (4 hosts x 4 ranks,
# 200 us links) comes up, runs every collective of lockstep and of OpenMPI
# with --check on small sizes, writes the JSON it promises, and goes away
# leaving nothing behind (namespaces, TUN devices, processes, its temporary
# directory); a job launched by lockstep-run on every host (c10d, and etcd
# with an etcd-server in host 0) sets up and trains on all 16 ranks; and a
# run interrupted (SIGINT) while its ranks run cleans up too. No timing is asserted: the rows' times are whatever the machine gave.
# The full form (8 x 8, 4 KiB-64 MiB, 1 ms links) is a benchmark: see
# tools/scale_lab/run.sh and docs/SCALING.md.
set -u
runfiles="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-lockstep}"
if [[ $(id -u) -ne 0 ]]; then
  if [[ "${LOCKSTEP_SKIP_ROOT_TESTS:-}" == 1 ]]; then
    echo "SKIP: lab_test needs root; skipped because LOCKSTEP_SKIP_ROOT_TESTS=1"
    exit 0
  fi
  echo "FAIL: lab_test needs root (network namespaces, TUN devices; CI runs as root): run as root, or set" \
    "LOCKSTEP_SKIP_ROOT_TESTS=1 (bazel test --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1) to skip the root-only tests" >&2
  exit 1
fi
export LAB_BENCH="$runfiles/tools/bench/collectives" LAB_DELAY_LINK="$runfiles/tools/scale_lab/delay_link"
export LAB_TRAINER="$runfiles/trainers/ddp_trainer" LAB_LAUNCHER="$runfiles/tools/launch/lockstep-run"
run="$runfiles/tools/scale_lab/run.sh"
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/lab_test.XXXXXX")
export LAB_TMPDIR=$tmp
fail=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1; shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}
# Nothing of run `tag` is left: namespaces, the lab's processes, its directory.
nothing_left() {
  local tag=$1
  ! ip netns list | grep -q "^$tag" &&
    ! pgrep -f "$tmp/lockstep_scale_lab" >/dev/null && ! pgrep -f "data-dir=$tmp/lockstep_scale_lab" >/dev/null &&
    ! compgen -G "$tmp/lockstep_scale_lab.*" >/dev/null
}
wait_for() {  # wait_for SECONDS COMMAND...: polls until COMMAND succeeds
  local deadline=$(( SECONDS + $1 )); shift
  until "$@"; do (( SECONDS < deadline )) || return 1; sleep 0.1; done
}
cleanup() {  # Whatever a failed run left (the script's own trap should have).
  local ns
  for ns in $(ip netns list | awk '{print $1}' | grep "^lt$$"); do
    ip netns pids "$ns" | xargs -r kill -KILL 2>/dev/null; ip netns del "$ns"
  done
  pkill -KILL -f "$tmp/lockstep_scale_lab" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "=== 4 hosts x 4 ranks, 200 us links: every op, lockstep and OpenMPI, --check, fewer iterations above 16K"
LAB_TAG="lt$$a" timeout -k 10 600 bash "$run" --hosts=4 --ranks_per_host=4 --link_delay_us=200 \
  --workload=bench --min_bytes=4K --max_bytes=64K --step_factor=2 --iters=3 --warmup=1 --large_bytes=16K --iters_large=2 \
  --peers=openmpi --timeout_s=240 \
  --json="$tmp/out.jsonl" >"$tmp/run.out" 2>"$tmp/run.err"
rc=$?
check "run.sh exits 0 (rc $rc)" test "$rc" -eq 0 || { tail -30 "$tmp/run.err"; }
check "nothing left behind" nothing_left "lt$$a"
/usr/bin/python3 - "$tmp/out.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "gather", "scatter", "all_to_all"]
sizes = [4096, 8192, 16384, 32768, 65536]
fields = ["impl", "op", "bytes", "p", "hosts", "delay_us", "rate", "time_us", "p50_us", "p95_us", "setup_s",
          "rss_mib", "fds", "load", "valid", "wrong", "iters"]
bad = []
for impl in ["lockstep", "openmpi"]:
  for op in ops:
    for size in sizes:
      match = [r for r in rows if r.get("impl") == impl and r.get("op") == op and r.get("bytes") == size]
      if len(match) != 1:
        bad.append(f"{impl} {op} {size}: {len(match)} rows, expected 1")
        continue
      r = match[0]
      missing = [f for f in fields if f not in r]
      if missing:
        bad.append(f"{impl} {op} {size}: missing {missing}")
      if r.get("iters") != (3 if size <= 16384 else 2):
        bad.append(f"{impl} {op} {size}: {r.get('iters')} iterations; --large_bytes=16K wants 3 up to it, 2 above")
      if r.get("wrong") != 0:
        bad.append(f"{impl} {op} {size}: wrong = {r.get('wrong')} (--check)")
      if (r.get("p"), r.get("hosts"), r.get("delay_us")) != (16, 4, 200):
        bad.append(f"{impl} {op} {size}: p, hosts, delay_us = {r.get('p')}, {r.get('hosts')}, {r.get('delay_us')}")
      if not (r.get("time_us", 0) > 0 and r.get("setup_s", 0) > 0 and r.get("fds", 0) > 0):
        bad.append(f"{impl} {op} {size}: time_us, setup_s and fds must be positive: {r}")
for b in bad:
  print("FAIL:", b)
print(f"ok: {len(rows)} JSON rows" if not bad else f"FAIL: {len(bad)} problems in {len(rows)} rows")
sys.exit(1 if bad else 0)
PY
check "the table names every impl" grep -q "| openmpi | all_to_all |" "$tmp/run.out"

echo "=== 4 hosts x 4 ranks, 100 us links: lockstep-run on every host (c10d, then etcd): set-up and the DDP trainer"
LAB_TAG="lt$$c" timeout -k 10 600 bash "$run" --hosts=4 --ranks_per_host=4 --link_delay_us=100 \
  --workload=launch --rdzv=c10d,etcd --trainer_steps=5 --timeout_s=240 \
  --json="$tmp/launch.jsonl" >"$tmp/launch.out" 2>"$tmp/launch.err"
rc=$?
check "run.sh --workload=launch exits 0 (rc $rc)" test "$rc" -eq 0 || { tail -30 "$tmp/launch.err"; }
check "nothing left behind (namespaces, agents, etcd)" nothing_left "lt$$c"
/usr/bin/python3 - "$tmp/launch.jsonl" <<'PY' || fail=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
bad = []
for backend in ["c10d", "etcd"]:
  setup = [r for r in rows if r.get("op") == "launch_setup" and r.get("rdzv") == backend]
  train = [r for r in rows if r.get("op") == "launch_trainer" and r.get("rdzv") == backend]
  if len(setup) != 1 or len(train) != 1:
    bad.append(f"{backend}: {len(setup)} set-up and {len(train)} trainer rows, expected 1 each")
    continue
  s, t = setup[0], train[0]
  # The start-up covers the agents' rendezvous and the workers' own set-up.
  if not (s.get("startup_s", 0) > s.get("setup_s", 0) > 0):
    bad.append(f"{backend}: startup_s {s.get('startup_s')} must exceed setup_s {s.get('setup_s')} > 0")
  if (s.get("p"), s.get("hosts"), s.get("wrong", 0)) != (16, 4, 0):
    bad.append(f"{backend}: p, hosts, wrong = {s.get('p')}, {s.get('hosts')}, {s.get('wrong')}")
  if (t.get("ranks_trained"), t.get("steps")) != (16, 5):
    bad.append(f"{backend}: the trainer ran {t.get('steps')} steps over {t.get('ranks_trained')} ranks, want 5 over 16")
for b in bad:
  print("FAIL:", b)
print(f"ok: launch rows {[(r['op'], r['rdzv'], r.get('startup_s', r.get('wall_s'))) for r in rows]}" if not bad else "FAIL")
sys.exit(1 if bad else 0)
PY

echo "=== Ctrl-C (SIGINT to the process group) while the ranks run: everything is torn down"
# In a session of its own, with SIGINT at its default (a background job of a
# script starts with it ignored), as a terminal's foreground job runs.
setsid /usr/bin/python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  env LAB_TAG="lt$$b" bash "$run" --hosts=2 --ranks_per_host=2 --link_delay_us=200 --workload=bench \
  --ops=all_reduce --min_bytes=4K --max_bytes=4K --iters=10000000 --warmup=0 --peers=none --timeout_s=240 \
  >"$tmp/int.out" 2>"$tmp/int.err" &
pid=$!
check "the ranks start" wait_for 120 pgrep -f "$tmp/lockstep_scale_lab.*/collectives"
kill -INT -- "-$pid"
check "run.sh ends after SIGINT" wait_for 60 bash -c "! kill -0 $pid 2>/dev/null"
wait "$pid"
rc=$?
check "run.sh reports the interruption (rc $rc)" test "$rc" -ne 0
check "nothing left behind after SIGINT" wait_for 30 nothing_left "lt$$b"

[[ $fail -eq 0 ]] && echo PASSED || echo FAILED
exit $fail
