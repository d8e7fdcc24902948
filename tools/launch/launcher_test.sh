#!/bin/bash
# lockstep-run end to end on loopback: real agents as separate processes
# (two "nodes" with --nnodes 2 --node_rank 0/1, static and c10d) running
# test_worker, which checks and records its environment.
#
# Every agent runs under `timeout`, every wait has a deadline, and the trap
# kills whatever is left, so the test cannot hang or leak processes.
set -u

LAUNCH_TEST_NAME=launcher_test
source "${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-lockstep}/tools/launch/testing/launch_test_lib.sh"

# start NAME ARGS...: an agent in the background; output in $TMP/NAME.log,
# exit code in $TMP/NAME.rc.
start() {
  local name=$1
  shift
  ( timeout -s KILL 60 "$RUN" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"; echo $? >"$TMP/$name.rc" ) &
  PIDS+=($!)
}

# finish NAME: waits (bounded) for the agent's exit code.
finish() {
  wait_for 60 test -s "$TMP/$1.rc" || { fail "$1 did not finish"; echo 999; return; }
  cat "$TMP/$1.rc"
}

# gone PID: the process has ended (a zombie waiting for a reaper counts).
gone() {
  ! kill -0 "$1" 2>/dev/null || grep -q '^[0-9]* (.*) Z' "/proc/$1/stat" 2>/dev/null
}

expect_in() {  # FILE TEXT
  grep -qF -- "$2" "$1" || fail "'$2' not in $1: $(cat "$1")"
}

env_of() {  # DIR RANK ATTEMPT NAME
  sed -n "s/^$4=//p" "$1/env.$2.$3"
}

FAST="--monitor_interval 0.1 --rdzv_conf timeout=20,heartbeat_timeout=2,last_call_timeout=1"

echo "=== static, 2 nodes x 2 workers: environment, rank layout, prefixes"
D="$TMP/static"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "s$n" --nnodes 2 --node-rank $n --nproc_per_node 2 --master_port $P --rdzv_id job7 $FAST \
    "$WORKER" --out="$D" --print=hi
done
[ "$(finish s0)" = 0 ] || fail "static node 0: $(cat "$TMP/s0.err")"
[ "$(finish s1)" = 0 ] || fail "static node 1: $(cat "$TMP/s1.err")"
for r in 0 1 2 3; do
  [ -f "$D/env.$r.0" ] || { fail "rank $r did not run"; continue; }
  [ "$(env_of "$D" $r 0 WORLD_SIZE)" = 4 ] || fail "rank $r WORLD_SIZE"
  [ "$(env_of "$D" $r 0 LOCAL_WORLD_SIZE)" = 2 ] || fail "rank $r LOCAL_WORLD_SIZE"
  [ "$(env_of "$D" $r 0 LOCAL_RANK)" = $((r % 2)) ] || fail "rank $r LOCAL_RANK"
  [ "$(env_of "$D" $r 0 GROUP_RANK)" = $((r / 2)) ] || fail "rank $r GROUP_RANK"
  [ "$(env_of "$D" $r 0 GROUP_WORLD_SIZE)" = 2 ] || fail "rank $r GROUP_WORLD_SIZE"
  [ "$(env_of "$D" $r 0 ROLE_NAME)" = default ] || fail "rank $r ROLE_NAME"
  [ "$(env_of "$D" $r 0 TORCHELASTIC_RUN_ID)" = job7 ] || fail "rank $r RUN_ID"
  [ "$(env_of "$D" $r 0 TORCHELASTIC_RESTART_COUNT)" = 0 ] || fail "rank $r RESTART_COUNT"
  [ "$(env_of "$D" $r 0 TORCHELASTIC_MAX_RESTARTS)" = 0 ] || fail "rank $r MAX_RESTARTS"
  [ "$(env_of "$D" $r 0 OMP_NUM_THREADS)" = 1 ] || fail "rank $r OMP_NUM_THREADS"
  [ "$(env_of "$D" $r 0 MASTER_ADDR)" = 127.0.0.1 ] || fail "rank $r MASTER_ADDR"
  [ "$(env_of "$D" $r 0 MASTER_PORT)" = "$(env_of "$D" 0 0 MASTER_PORT)" ] || fail "rank $r MASTER_PORT differs"
  [ "$(env_of "$D" $r 0 LOCKSTEP_STORE_TOKEN)" = "$(env_of "$D" 0 0 LOCKSTEP_STORE_TOKEN)" ] || fail "rank $r token"
done
[ "$(env_of "$D" 0 0 MASTER_PORT)" != "$P" ] || fail "MASTER_PORT is the rendezvous port"
expect_in "$TMP/s0.out" "[0]:hi from rank 0"
expect_in "$TMP/s0.out" "[1]:hi from rank 1"
expect_in "$TMP/s1.out" "[2]:hi from rank 2"
expect_in "$TMP/s1.err" "[3]:hi from rank 3"

echo "=== static: a failure on node 1 restarts both nodes (TORCHELASTIC_RESTART_COUNT 1)"
D="$TMP/restart"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "r$n" --nnodes 2 --node_rank=$n --nproc_per_node 2 --master_port $P --max_restarts 2 $FAST \
    "$WORKER" --out="$D" --fail_rank=3 --fail_attempt=0 --exit=7 --others_wait="$D/never"
done
[ "$(finish r0)" = 0 ] || fail "restart node 0: $(cat "$TMP/r0.err")"
[ "$(finish r1)" = 0 ] || fail "restart node 1: $(cat "$TMP/r1.err")"
for r in 0 1 2 3; do
  [ "$(env_of "$D" $r 1 TORCHELASTIC_RESTART_COUNT)" = 1 ] || fail "rank $r did not run attempt 1"
  [ "$(env_of "$D" $r 1 TORCHELASTIC_MAX_RESTARTS)" = 2 ] || fail "rank $r MAX_RESTARTS"
done
[ "$(env_of "$D" 0 1 LOCKSTEP_STORE_TOKEN)" != "$(env_of "$D" 0 0 LOCKSTEP_STORE_TOKEN)" ] || fail "token reused"
expect_in "$TMP/r0.err" "attempt 0 failed (rank 3 on"
expect_in "$TMP/r0.err" "exited with code 7); restarting the group (restart 1 of 2)"
[ -f "$D/env.0.2" ] && fail "a third attempt ran"

echo "=== static, --max_restarts 0: a worker killed by a signal fails both agents with the summary"
D="$TMP/fatal"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "f$n" --nnodes 2 --node_rank $n --nproc_per_node 2 --master_port $P $FAST \
    "$WORKER" --out="$D" --print=last-words --fail_rank=2 --signal=9 --others_wait="$D/never"
done
[ "$(finish f0)" = 1 ] || fail "fatal node 0 exit code $(cat "$TMP/f0.rc")"
[ "$(finish f1)" = 1 ] || fail "fatal node 1 exit code $(cat "$TMP/f1.rc")"
for n in 0 1; do
  expect_in "$TMP/f$n.err" "first failure: rank 2 (local_rank 0, node rank 1) on host"
  expect_in "$TMP/f$n.err" "killed by signal 9"
  expect_in "$TMP/f$n.err" "last-words from rank 2"
done

echo "=== c10d, 2 nodes: node ranks by arrival, one group"
D="$TMP/c10d"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "c$n" --nnodes 2 --nproc_per_node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P $FAST \
    "$WORKER" --out="$D"
done
[ "$(finish c0)" = 0 ] || fail "c10d agent 0: $(cat "$TMP/c0.err")"
[ "$(finish c1)" = 0 ] || fail "c10d agent 1: $(cat "$TMP/c1.err")"
for r in 0 1 2 3; do
  [ "$(env_of "$D" $r 0 WORLD_SIZE)" = 4 ] || fail "c10d rank $r WORLD_SIZE"
  [ "$(env_of "$D" $r 0 GROUP_RANK)" = $((r / 2)) ] || fail "c10d rank $r GROUP_RANK"
done

echo "=== c10d --nnodes 1:2: one node forms the group after last_call_timeout"
D="$TMP/elastic"; mkdir -p "$D"; P=$(free_port)
start e0 --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$P $FAST "$WORKER" --out="$D"
[ "$(finish e0)" = 0 ] || fail "elastic: $(cat "$TMP/e0.err")"
[ "$(env_of "$D" 1 0 WORLD_SIZE)" = 2 ] || fail "elastic WORLD_SIZE"
[ "$(env_of "$D" 1 0 GROUP_WORLD_SIZE)" = 1 ] || fail "elastic GROUP_WORLD_SIZE"

echo "=== c10d --nnodes 1:2: a second node that comes later joins a re-formed group (not a restart)"
D="$TMP/grow"; mkdir -p "$D"; P=$(free_port)
start g0 --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$P $FAST \
  "$WORKER" --out="$D" --grow_to=4
wait_for 30 test -f "$D/env.1.0" || fail "the first node's workers did not start"
[ "$(env_of "$D" 1 0 WORLD_SIZE)" = 2 ] || fail "first group WORLD_SIZE"
start g1 --nnodes 1:2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$P $FAST \
  "$WORKER" --out="$D" --grow_to=4
[ "$(finish g0)" = 0 ] || fail "grow node 0: $(cat "$TMP/g0.err")"
[ "$(finish g1)" = 0 ] || fail "grow node 1: $(cat "$TMP/g1.err")"
expect_in "$TMP/g0.err" "1 node(s) waiting to join; re-forming the group (not counted as a restart)"
for r in 0 1 2 3; do
  [ "$(env_of "$D" $r 0 WORLD_SIZE)" = 4 ] || fail "grown rank $r WORLD_SIZE"
  [ "$(env_of "$D" $r 0 GROUP_RANK)" = $((r / 2)) ] || fail "grown rank $r GROUP_RANK"
done

echo "=== SIGKILL of node 1's agent: its workers and their children die, node 0 stops its own and fails"
D="$TMP/kill1"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "k$n" --nnodes 2 --node_rank $n --nproc_per_node 2 --master_port $P $FAST \
    "$WORKER" --out="$D" --fail_rank=99 --others_wait="$D/never" --spawn_child
done
wait_for 30 test -f "$D/env.3.0" -a -f "$D/env.2.0" -a -f "$D/env.0.0" || fail "workers did not start"
agent1=$(pgrep -f -- "^$RUN --nnodes 2 --node_rank 1 --nproc_per_node 2 --master_port $P" | head -1)
kill -KILL "$agent1"
[ "$(finish k0)" = 1 ] || fail "node 0 after node 1 died: $(cat "$TMP/k0.err")"
expect_in "$TMP/k0.err" "sent no heartbeat"
expect_in "$TMP/k0.err" "[lockstep-run] FAILED ("
expect_in "$TMP/k0.err" "first failure: the agent of node rank 1 on host"
for r in 0 1 2 3; do
  pid=$(env_of "$D" $r 0 PID)
  wait_for 10 gone "$pid" || fail "worker rank $r (pid $pid) outlived the failure"
  # The worker's own child, on the killed node too (the worker guard).
  child=$(env_of "$D" $r 0 CHILD_PID)
  wait_for 10 gone "$child" || fail "the child (pid $child) of worker rank $r outlived the failure"
done

echo "=== SIGKILL of node 0's agent (the store's host): node 1 fails with a clear error"
D="$TMP/kill0"; mkdir -p "$D"; P=$(free_port)
for n in 0 1; do
  start "h$n" --nnodes 2 --node_rank $n --nproc_per_node 1 --master_port $P $FAST \
    "$WORKER" --out="$D" --fail_rank=99 --others_wait="$D/never"
done
wait_for 30 test -f "$D/env.1.0" -a -f "$D/env.0.0" || fail "workers did not start"
agent0=$(pgrep -f -- "^$RUN --nnodes 2 --node_rank 0 --nproc_per_node 1 --master_port $P" | head -1)
kill -KILL "$agent0"
[ "$(finish h1)" = 1 ] || fail "node 1 after node 0 died: $(cat "$TMP/h1.err")"
expect_in "$TMP/h1.err" "rendezvous store at 127.0.0.1:$P stopped answering"
expect_in "$TMP/h1.err" "[lockstep-run] FAILED ("
expect_in "$TMP/h1.err" "the job ended: the rendezvous store at 127.0.0.1:$P is gone"
for r in 0 1; do
  pid=$(env_of "$D" $r 0 PID)
  wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || fail "worker rank $r (pid $pid) outlived its agent"
done

echo "=== SIGTERM to an agent reaches its workers (SIGKILL after the grace period); the agent exits 128+15"
D="$TMP/term"; mkdir -p "$D"
LOCKSTEP_STOP_GRACE_SECONDS=0.5 start t0 --standalone --nproc_per_node 2 $FAST "$WORKER" --out="$D" --fail_rank=99 --others_wait="$D/never" \
  --ignore_term
wait_for 30 test -f "$D/env.0.0" -a -f "$D/env.1.0" || fail "workers did not start"
kill -TERM "$(pgrep -f -- "^$RUN --standalone --nproc_per_node 2 $FAST $WORKER --out=$D" | head -1)"
[ "$(finish t0)" = 143 ] || fail "SIGTERM exit code $(cat "$TMP/t0.rc"): $(cat "$TMP/t0.err")"
for r in 0 1; do
  pid=$(env_of "$D" $r 0 PID)
  wait_for 10 bash -c "! kill -0 $pid 2>/dev/null" || fail "worker rank $r survived SIGTERM"
done

echo "=== --log_dir and --redirects: per-attempt per-rank files"
D="$TMP/logs"; mkdir -p "$D"
start l0 --standalone --nproc_per_node 2 --log_dir "$D/logs" --redirects 0:1 --rdzv_id logrun "$WORKER" --print=logged
[ "$(finish l0)" = 0 ] || fail "log_dir run: $(cat "$TMP/l0.err")"
for lr in 0 1; do
  f=$(ls "$D"/logs/logrun_*/attempt_0/$lr/stdout.log 2>/dev/null | head -1)
  [ -n "$f" ] && expect_in "$f" "logged from rank $lr"
done
grep -qF "[0]:logged from rank 0" "$TMP/l0.out" && fail "redirected stdout of local rank 0 reached the console"
expect_in "$TMP/l0.out" "[1]:logged from rank 1"
expect_in "$TMP/l0.err" "[0]:logged from rank 0"

echo "=== a line without a newline: the console gets it in parts, the log file byte for byte"
D="$TMP/longlog"; mkdir -p "$D"
start ll0 --standalone --nproc_per_node 1 --log_dir "$D/logs" --tee 1 --rdzv_id longlog \
  "$WORKER" --print=logged --print_line_bytes=200000
[ "$(finish ll0)" = 0 ] || fail "long line with --log_dir: $(cat "$TMP/ll0.err")"
f=$(ls "$D"/logs/longlog_*/attempt_0/0/stdout.log 2>/dev/null | head -1)
if [ -z "$f" ]; then
  fail "no stdout.log for the long line"
else
  # The worker's bytes as written: its line, then 200000 x and no newline.
  [ "$(head -c 19 "$f")" = "logged from rank 0" ] || fail "long-line log starts with $(head -c 40 "$f")"
  [ "$(stat -c %s "$f")" = $((19 + 200000)) ] || fail "long-line log has $(stat -c %s "$f") bytes, not $((19 + 200000))"
fi
# 200000 bytes: three parts of 64 KiB that continue, and the rest at EOF.
[ "$(grep -c '^\[0\]:x*x \[lockstep-run: line continues\]$' "$TMP/ll0.out")" = 3 ] || fail "long line on the console: $(cut -c1-80 "$TMP/ll0.out")"
[ "$(tr -cd x <"$TMP/ll0.out" | wc -c)" = 200000 ] || fail "long line: console payload is not 200000 bytes"

echo "=== a 1 GiB line without a newline: the agent passes it on in linear time and bounded memory"
# The attack: a worker that never ends its line. The agent used to hold the
# whole line and rescan it on every read (quadratic: 128 MiB took 17 s and
# 268 MB; 1 GiB did not end in 90 s). The console is counted, not stored: wc
# for its lines and bytes, tr for the payload (prefixes and markers have no 'x').
# Peak memory: /usr/bin/time's %M is the ru_maxrss that wait4 reports for
# timeout, the largest peak RSS (VmHWM) among it, the agent and every process
# they reaped (the worker guard, test_worker: a few MB each). It bounds the
# agent's own from above, taken at its exit: no sampling of /proc to miss a
# late peak.
# Sanitizer builds hold freed memory in quarantine and run several times
# slower: a smaller line there, and no memory bound.
D="$TMP/longline"; mkdir -p "$D"
LINE=$((1 << 30)); PART=65536; MAX_RSS_KB=$((64 << 10))
if grep -qaE '__(a|t)san_init' "$RUN"; then LINE=$((64 << 20)); MAX_RSS_KB=""; fi
MARK=" [lockstep-run: line continues]"
begin=$SECONDS
(
  /usr/bin/time -f %M -o "$D/rss" timeout -s KILL 90 "$RUN" --standalone --nproc_per_node 1 \
    "$WORKER" --print_line_bytes=$LINE 2>"$D/err" | tee >(tr -cd x | wc -c >"$D/payload") | wc -lc >"$D/count"
  echo "${PIPESTATUS[0]}" >"$D/rc"
) &
PIDS+=($!)
if ! wait_for 120 test -s "$D/rc" -a -s "$D/payload"; then
  fail "the 1 GiB line did not finish"
elif [ "$(cat "$D/rc")" != 0 ]; then
  # 137: timeout killed it (then %M lost the agent's peak: it was not reaped by timeout).
  fail "1 GiB line: exit code $(cat "$D/rc") after $((SECONDS - begin)) s: $(tail -5 "$D/err")"
else
  rss=$(tail -1 "$D/rss")
  echo "  $LINE bytes in $((SECONDS - begin)) s, peak RSS $rss KB (the agent and the processes it reaped)"
  parts=$(((LINE + PART - 1) / PART))
  # Each part: "[0]:" and "\n"; each but the last: the marker.
  expected="$parts $((LINE + parts * 5 + (parts - 1) * ${#MARK}))"
  [ "$(echo $(cat "$D/count"))" = "$expected" ] || fail "1 GiB line: console lines and bytes $(cat "$D/count"), not $expected"
  [ "$(echo $(cat "$D/payload"))" = "$LINE" ] || fail "1 GiB line: console payload $(cat "$D/payload") bytes, not $LINE"
  if [ -n "$MAX_RSS_KB" ]; then
    [ "$rss" -le "$MAX_RSS_KB" ] 2>/dev/null || fail "1 GiB line: the agent's peak RSS $rss KB is over $MAX_RSS_KB KB"
  fi
fi

echo "=== bad input"
"$RUN" --bogus 2 "$WORKER" >"$TMP/b.out" 2>"$TMP/b0.err"; [ $? = 2 ] || fail "unknown flag accepted"
expect_in "$TMP/b0.err" "unknown flag '--bogus'"
expect_in "$TMP/b0.err" "--help"
"$RUN" --nnodes 2 --node_rank 2 "$WORKER" 2>"$TMP/b1.err"; [ $? = 2 ] || fail "node_rank 2 accepted"
expect_in "$TMP/b1.err" "--node_rank: 2 is not below --nnodes 2"
LOCKSTEP_STOP_GRACE_SECONDS=soon "$RUN" --standalone "$WORKER" 2>"$TMP/bg.err"; [ $? = 2 ] || fail "bad grace accepted"
expect_in "$TMP/bg.err" "LOCKSTEP_STOP_GRACE_SECONDS='soon' is not a number of seconds"
"$RUN" --help >"$TMP/help.out"; expect_in "$TMP/help.out" "LOCKSTEP_STOP_GRACE_SECONDS"
"$RUN" --standalone /nonexistent/prog 2>"$TMP/b2.err"; [ $? = 2 ] || fail "missing program accepted"
expect_in "$TMP/b2.err" "'/nonexistent/prog' does not exist"
printf '#!/bin/sh\nexit 0\n' >"$TMP/noexec.sh"; chmod -x "$TMP/noexec.sh"
"$RUN" --standalone "$TMP/noexec.sh" 2>"$TMP/b3.err"; [ $? = 2 ] || fail "non-executable program accepted"
expect_in "$TMP/b3.err" "is not executable"
P=$(free_port)
timeout -s KILL 30 "$RUN" --nnodes 2 --node_rank 1 --master_port $P --rdzv_conf timeout=1 "$WORKER" 2>"$TMP/b4.err"
[ $? = 1 ] || fail "unreachable rendezvous: $(cat "$TMP/b4.err")"
expect_in "$TMP/b4.err" "cannot reach the rendezvous store at 127.0.0.1:$P"
# Port in use: a first node 0 holds it while it waits for node 1.
P=$(free_port)
export LOCKSTEP_RDZV_TOKEN=right
start u0 --nnodes 2 --node_rank 0 --master_port $P --rdzv_conf timeout=30 "$WORKER"
unset LOCKSTEP_RDZV_TOKEN
wait_for 20 bash -c "exec 3<>/dev/tcp/127.0.0.1/$P" 2>/dev/null || fail "first agent did not listen"
timeout -s KILL 30 "$RUN" --nnodes 2 --node_rank 0 --master_port $P "$WORKER" 2>"$TMP/b5.err"
[ $? = 1 ] || fail "port in use: $(cat "$TMP/b5.err")"
expect_in "$TMP/b5.err" "cannot host the rendezvous store on port $P"
# Wrong token: node 1 presents another token than node 0's store wants.
LOCKSTEP_RDZV_TOKEN=wrong timeout -s KILL 30 "$RUN" --nnodes 2 --node_rank 1 --master_port $P \
  --rdzv_conf timeout=5 "$WORKER" 2>"$TMP/b6.err"
[ $? = 1 ] || fail "wrong token: $(cat "$TMP/b6.err")"
expect_in "$TMP/b6.err" "refused this agent's join token"

# Under --config=asan/tsan the agents report here (their exit codes alone
# would not tell a report from an expected failure).
if grep -l "Sanitizer" "$TMP"/*.err 2>/dev/null; then
  fail "sanitizer reports: $(grep -h -A30 "Sanitizer" "$TMP"/*.err | head -80)"
fi

if [ $FAILED != 0 ]; then
  echo "launcher_test: FAILED"
  exit 1
fi
echo "launcher_test: all passed"
