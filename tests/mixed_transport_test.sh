#!/usr/bin/env bash
# A mixed group: two network-namespace "hosts" (a veth pair between them) x
# 2 ranks each, the collective benchmark on every rank with only a
# launcher's variables. With --transport=auto the ranks must choose the
# hierarchical transport (shared memory inside each namespace, TCP across:
# the host identity includes the network namespace) and the benchmark must
# say so; every collective, checked element by element (--check, integer-
# valued data, so results are exact whatever the order of additions), must
# give the same results as the pure-TCP run (--transport=tcp) of the same
# cases: both report 0 wrong elements. Rooted ops run with a root that leads
# its host and one that does not. Forcing shm across the two hosts fails on
# every rank with an error that says to use auto or tcp. A rank killed
# (SIGKILL) mid 64 MiB all-reduce fails every other rank with an error
# before the deadline. Needs root (ip netns); the namespaces and every
# process are removed whatever happens.
set -uo pipefail
bench="$TEST_SRCDIR/$TEST_WORKSPACE/tools/bench/collectives"
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "ip netns"
tmp="${TEST_TMPDIR:-/tmp}/mixed_transport"
rm -rf "$tmp" && mkdir -p "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  lib_netns_cleanup
}
trap cleanup EXIT
lib_netns_setup || { echo "FAIL: could not create the two network namespaces"; exit 1; }
a=$ns_a b=$ns_b ip4a=$ip_a

fail=0
port=$(( 31700 + RANDOM % 1000 ))
# run_case NAME BENCH_FLAGS...: 4 ranks, 0-1 in namespace a, 2-3 in b; sets
# rc (0 when every rank succeeded) and leaves each rank's log in
# $tmp/NAME.<rank>.log.
run_case() {
  local name=$1; shift
  local group_pids=() rank ns
  for rank in 0 1 2 3; do
    ns=$a
    (( rank >= 2 )) && ns=$b
    ip netns exec "$ns" env -i PATH="$PATH" RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$(( rank % 2 )) \
      LOCAL_WORLD_SIZE=2 MASTER_ADDR="$ip4a" MASTER_PORT=$port \
      timeout -k 5 120 "$bench" --min_bytes=4K --max_bytes=4M --step_factor=32 --iters=2 --warmup=1 \
      --check --timeout=60 "$@" >"$tmp/$name.$rank.log" 2>&1 &
    group_pids+=($!)
    pids+=($!)
  done
  rc=0
  for p in "${group_pids[@]}"; do wait "$p" || rc=1; done
  port=$(( port + 1 ))
}

# expect_ok NAME TRANSPORT_NAME FLAGS...: the run succeeds, checks clean,
# and rank 0's header names TRANSPORT_NAME.
expect_ok() {
  local name=$1 transport=$2; shift 2
  run_case "$name" "$@"
  if [[ $rc -ne 0 ]] || grep -q "wrong elements" "$tmp/$name".*.log; then
    echo "FAIL: $name ($*)"; tail -n 5 "$tmp/$name".*.log; fail=1; return
  fi
  if ! grep -q "^# lockstep collectives benchmark: .*, transport $transport\$" "$tmp/$name.0.log"; then
    echo "FAIL: $name: expected transport $transport:"; head -n 1 "$tmp/$name.0.log"; fail=1; return
  fi
  # Every size ran and reported 0 wrong (the last column).
  local rows
  rows=$(grep -v '^#' "$tmp/$name.0.log" | awk '$NF == "0"' | wc -l)
  if [[ $rows -ne 3 ]]; then
    echo "FAIL: $name: expected 3 checked rows with 0 wrong:"; cat "$tmp/$name.0.log"; fail=1; return
  fi
  echo "ok: $name ($transport)"
}

for transport in auto tcp; do
  expected="hierarchical(shm+tcp)"
  [[ $transport == tcp ]] && expected="host over tcp"
  for op in all_reduce all_gather reduce_scatter broadcast reduce gather scatter; do
    expect_ok "$transport.$op" "$expected" --transport=$transport --op=$op
  done
  # Roots that do not lead their host (1 on a, 3 on b) and one that leads b.
  for root in 1 2 3; do
    expect_ok "$transport.broadcast.root$root" "$expected" --transport=$transport --op=broadcast --root=$root
    expect_ok "$transport.reduce.root$root" "$expected" --transport=$transport --op=reduce --root=$root
  done
  for rop in avg prod min max; do
    for dtype in f64 i32 bf16; do
      [[ $rop == avg && $dtype != f64 ]] && continue  # An integer mean is not exact; bf16 rounds it.
      expect_ok "$transport.all_reduce.$rop.$dtype" "$expected" --transport=$transport --op=all_reduce \
        --reduce_op=$rop --dtype=$dtype
      expect_ok "$transport.reduce.$rop.$dtype" "$expected" --transport=$transport --op=reduce \
        --reduce_op=$rop --dtype=$dtype --root=3
    done
  done
done

# Shared memory cannot join the two namespaces: every rank says why (rank
# 0, which serves the store, waits until all have read the hosts).
run_case forced_shm --transport=shm
if [[ $rc -eq 0 ]]; then
  echo "FAIL: --transport=shm across two hosts succeeded"; fail=1
else
  for rank in 0 1 2 3; do
    if ! grep -q "transport shm was forced but the ranks run on 2 hosts" "$tmp/forced_shm.$rank.log" ||
       ! grep -q "use auto or tcp" "$tmp/forced_shm.$rank.log"; then
      echo "FAIL: rank $rank's error does not explain the forced shm:"; cat "$tmp/forced_shm.$rank.log"; fail=1
    fi
  done
  [[ $fail -eq 0 ]] && echo "ok: forced shm across hosts refused: $(grep -o 'transport shm was forced[^;]*' "$tmp/forced_shm.0.log" | head -1)"
fi
# SIGKILL of rank 3 (not a leader: it talks only to rank 2 through shared
# memory) in the middle of 64 MiB all-reduces: every other rank fails with
# an error, none waits for its 60 s deadline; rank 2 names the level.
started=()
for rank in 0 1 2 3; do
  ns=$a
  (( rank >= 2 )) && ns=$b
  ip netns exec "$ns" env -i PATH="$PATH" RANK=$rank WORLD_SIZE=4 LOCAL_RANK=$(( rank % 2 )) LOCAL_WORLD_SIZE=2 \
    MASTER_ADDR="$ip4a" MASTER_PORT=$port timeout -k 5 120 "$bench" --min_bytes=64M --max_bytes=64M --iters=100000 \
    --warmup=0 --timeout=60 >"$tmp/kill.$rank.log" 2>&1 &
  started+=($!)
  pids+=($!)
done
# Rank 0 prints its header once the group is built; the ranks then spend
# their time inside all-reduces.
for _ in $(seq 600); do
  grep -q '^# lockstep collectives benchmark' "$tmp/kill.0.log" && break
  sleep 0.1
done
victim=$(pgrep -P "${started[3]}" | head -n 1)  # The benchmark under `timeout`.
if [[ -z $victim ]] || ! grep -q '^# lockstep collectives benchmark' "$tmp/kill.0.log"; then
  echo "FAIL: the group for the kill case did not start:"; cat "$tmp/kill.0.log"; fail=1
else
  kill -9 "$victim"
  for rank in 0 1 2; do
    wait "${started[$rank]}"; rc=$?
    if [[ $rc -eq 0 || $rc -eq 124 || $rc -eq 137 ]] || grep -q "DEADLINE_EXCEEDED" "$tmp/kill.$rank.log" ||
       ! grep -q "collectives: rank $rank: " "$tmp/kill.$rank.log"; then
      echo "FAIL: rank $rank after rank 3 was killed (rc $rc):"; tail -n 5 "$tmp/kill.$rank.log"; fail=1
    fi
  done
  if ! grep -q "inside host 1" "$tmp/kill.2.log"; then
    echo "FAIL: rank 2 does not name the level it lost rank 3 in:"; cat "$tmp/kill.2.log"; fail=1
  else
    echo "ok: rank 3 killed; rank 2: $(grep -o 'inside host 1.*' "$tmp/kill.2.log" | cut -c1-200)"
  fi
fi
[[ $fail -eq 0 ]] && echo PASS
exit $fail
