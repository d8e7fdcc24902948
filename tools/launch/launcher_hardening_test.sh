#!/bin/bash
# lockstep-run against another local user (docs/ARCHITECTURE.md, threat
# model): a standalone job started without LOCKSTEP_RDZV_TOKEN. The
# attacker is store_probe run as uid 65534 (setpriv, so root: CI runs as
# root), and root itself without the token; they try to read the master
# record (which once held the workers' secret) and to forge a failure
# record, on every TCP port the agent listens on. Each try is refused and
# the job completes. With a token given, the workers never see it.
#
# Every agent runs under `timeout`, every wait has a deadline, and the trap
# kills whatever is left.
set -u

# The temporary directory under /tmp: uid 65534 must reach the probe in it.
LAUNCH_TEST_NAME=launcher_hardening_test LAUNCH_TEST_TMP_ROOT=/tmp
source "${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-lockstep}/tools/launch/testing/launch_test_lib.sh"

[ "$(id -u)" = 0 ] || { echo "FAIL: needs root to act as another user (setpriv); CI runs as root" >&2; exit 1; }

# The probe where uid 65534 can run it.
chmod 755 "$TMP"
cp "$RUNFILES/tools/launch/store_probe" "$TMP/store_probe"
chmod 755 "$TMP/store_probe"
AS_NOBODY="setpriv --reuid=65534 --regid=65534 --clear-groups"

echo "=== standalone without a token: another user cannot read the rendezvous store or forge a failure"
D="$TMP/standalone"; mkdir -p "$D"
( env -u LOCKSTEP_RDZV_TOKEN timeout -s KILL 60 "$RUN" --standalone --nproc_per_node 2 --monitor_interval 0.1 \
    "$WORKER" --out="$D" --wait_file="$D/go" --exit=0 >"$TMP/a.out" 2>"$TMP/a.err"; echo $? >"$TMP/a.rc" ) &
PIDS+=($!)
wait_for 30 test -f "$D/env.0.0" -a -f "$D/env.1.0" || fail "the workers did not start: $(cat "$TMP/a.err")"
# The agent: the worker's nearest ancestor named lockstep-run (a guard
# process sits between them).
AGENT_PID=$(sed -n 's/^PID=//p' "$D/env.0.0")
for _ in 1 2 3 4; do
  [ "$(ps -o comm= -p "$AGENT_PID")" = lockstep-run ] && break
  AGENT_PID=$(ps -o ppid= -p "$AGENT_PID" | tr -d ' ')
done
PORTS=$(ss -Hltnp | grep "pid=$AGENT_PID," | awk '{print $4}' | sed 's/.*://' | sort -u)
[ -n "$PORTS" ] || fail "found no port of the agent (pid $AGENT_PID)"
for port in $PORTS; do
  for who in nobody root; do
    if [ $who = nobody ]; then probe="$AS_NOBODY $TMP/store_probe"; else probe="$TMP/store_probe"; fi
    out=$($probe 127.0.0.1 "$port" "" "lockstep-run/none//a0/master" 2>&1); rc=$?
    [ $rc = 3 ] || fail "$who read the master record on port $port (rc $rc): $out"
    echo "$out" | grep -q "token" || fail "$who on port $port: refused, but not for the token: $out"
    out=$($probe 127.0.0.1 "$port" "" "lockstep-run/none//a0/failure" \
          "0|attacker|1.2.3.4|forged|0" 2>&1); rc=$?
    [ $rc = 3 ] || fail "$who wrote a failure record on port $port (rc $rc): $out"
  done
done
touch "$D/go"
wait_for 60 test -s "$TMP/a.rc" || fail "the job did not finish"
[ "$(cat "$TMP/a.rc" 2>/dev/null)" = 0 ] || fail "the job failed: $(cat "$TMP/a.err")"
grep -q "warning: this job has no join token" "$TMP/a.err" && fail "a one-node job warned of an open endpoint"

echo "=== --fault_tolerant: the workers' store the agent now holds refuses a forged join and a forged 'gone' mark"
D="$TMP/ft"; mkdir -p "$D"
( env -u LOCKSTEP_RDZV_TOKEN timeout -s KILL 60 "$RUN" --standalone --fault_tolerant --nproc_per_node 2 \
    --monitor_interval 0.1 "$WORKER" --agent_store --out="$D" --wait_file="$D/go" --exit=0 >"$TMP/f.out" 2>"$TMP/f.err";
  echo $? >"$TMP/f.rc" ) &
PIDS+=($!)
wait_for 30 test -f "$D/env.0.0" -a -f "$D/env.1.0" || fail "the workers did not start: $(cat "$TMP/f.err")"
grep -q "^TORCHELASTIC_USE_AGENT_STORE=True$" "$D/env.0.0" || fail "--fault_tolerant: the workers do not use the agent's store"
AGENT_PID=$(sed -n 's/^PID=//p' "$D/env.0.0")
for _ in 1 2 3 4; do
  [ "$(ps -o comm= -p "$AGENT_PID")" = lockstep-run ] && break
  AGENT_PID=$(ps -o ppid= -p "$AGENT_PID" | tr -d ' ')
done
WORKER_PORT=$(sed -n 's/^MASTER_PORT=//p' "$D/env.0.0")
PORTS=$(ss -Hltnp | grep "pid=$AGENT_PID," | awk '{print $4}' | sed 's/.*://' | sort -u)
echo "$PORTS" | grep -qx "$WORKER_PORT" || fail "the agent does not hold the workers' store (port $WORKER_PORT; it listens on $PORTS)"
for port in $PORTS; do
  for who in nobody root; do
    if [ $who = nobody ]; then probe="$AS_NOBODY $TMP/store_probe"; else probe="$TMP/store_probe"; fi
    for key in /worker/attempt_0/elastic/join/1 /worker/attempt_0/elastic/gone/0; do
      out=$($probe 127.0.0.1 "$port" "" "$key" 99 2>&1); rc=$?
      [ $rc = 3 ] || fail "$who wrote $key on port $port (rc $rc): $out"
      echo "$out" | grep -q "token" || fail "$who on port $port: refused, but not for the token: $out"
    done
  done
done
touch "$D/go"
wait_for 60 test -s "$TMP/f.rc" || fail "the fault-tolerant job did not finish"
[ "$(cat "$TMP/f.rc" 2>/dev/null)" = 0 ] || fail "the fault-tolerant job failed: $(cat "$TMP/f.err")"

echo "=== with a token: the workers never see it"
D="$TMP/token"; mkdir -p "$D"
LOCKSTEP_RDZV_TOKEN=given timeout -s KILL 60 "$RUN" --standalone --nproc_per_node 2 --monitor_interval 0.1 \
    "$WORKER" --out="$D" >"$TMP/b.out" 2>"$TMP/b.err"
rc=$?
[ $rc = 0 ] || fail "with a token: rc $rc: $(cat "$TMP/b.err")"
grep -q "LOCKSTEP_RDZV_TOKEN" "$D"/env.* && fail "a worker's recorded environment holds LOCKSTEP_RDZV_TOKEN"

echo "=== several nodes without a token: warned at start and in the summary; LOCKSTEP_REQUIRE_TOKEN=1 refuses"
P=$(free_port)
env -u LOCKSTEP_RDZV_TOKEN LOCKSTEP_REQUIRE_TOKEN=1 timeout -s KILL 30 "$RUN" --nnodes 2 --node_rank 0 \
    --nproc_per_node 1 --master_port "$P" "$WORKER" >"$TMP/c.out" 2>"$TMP/c.err"
rc=$?
[ $rc = 2 ] || fail "LOCKSTEP_REQUIRE_TOKEN=1 without a token: rc $rc, expected 2"
grep -q "LOCKSTEP_REQUIRE_TOKEN=1 but this job of up to 2 nodes has no join token" "$TMP/c.err" ||
  fail "no refusal message: $(cat "$TMP/c.err")"
D="$TMP/open"; mkdir -p "$D"
for n in 0 1; do
  ( env -u LOCKSTEP_RDZV_TOKEN timeout -s KILL 60 "$RUN" --nnodes 2 --node_rank $n --nproc_per_node 1 \
      --master_port "$P" --monitor_interval 0.1 "$WORKER" --out="$D" >"$TMP/o$n.out" 2>"$TMP/o$n.err";
    echo $? >"$TMP/o$n.rc" ) &
  PIDS+=($!)
done
for n in 0 1; do
  wait_for 60 test -s "$TMP/o$n.rc" || fail "open node $n did not finish"
  [ "$(cat "$TMP/o$n.rc" 2>/dev/null)" = 0 ] || fail "open node $n failed: $(cat "$TMP/o$n.err")"
  [ "$(grep -c "warning: this job has no join token" "$TMP/o$n.err")" = 2 ] ||
    fail "open node $n: expected the warning at start and in the summary: $(cat "$TMP/o$n.err")"
done

[ $FAILED = 0 ] && echo PASS
exit $FAILED
