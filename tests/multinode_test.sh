#!/usr/bin/env bash
# Two "hosts" as network namespaces joined by a veth pair (each its own
# address), the collective benchmark on each with only the variables a
# launcher sets (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT): every collective with 1 and 2 ranks per host, results
# checked (--check); the same with LOCKSTEP_SOCKET_IFNAME set and over IPv6;
# and a rank that advertises a wrong (loopback) address is reported within
# seconds although the operation timeout is 10 minutes. Needs root (ip
# netns); the namespaces are removed whatever happens.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
bench="$runfiles/tools/bench/collectives"
lib_require_root "ip netns"
tmp="${TEST_TMPDIR:-/tmp}/multinode"
rm -rf "$tmp" && mkdir -p "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  lib_netns_cleanup
}
trap cleanup EXIT
lib_netns_setup || { echo "FAIL: could not make the namespaces"; exit 1; }
a=$ns_a b=$ns_b va=$veth_a vb=$veth_b ip4a=$ip_a ip6a=$ip6_a

# run_group NAME MASTER PER_HOST EXTRA_ENV... : one benchmark process per rank,
# ranks [0, PER_HOST) in namespace a, the rest in b; every op, checked.
run_group() {
  local name=$1 master=$2 per_host=$3; shift 3
  local world=$(( 2 * per_host )) port=$(( 29500 + RANDOM % 1000 ))
  for op in all_reduce all_gather reduce_scatter broadcast reduce gather scatter; do
    local group_pids=()
    for rank in $(seq 0 $(( world - 1 ))); do
      local ns=$a
      (( rank >= per_host )) && ns=$b
      local ifname_env=()
      if [[ " $* " == *" LOCKSTEP_SOCKET_IFNAME=ANY_VETH "* ]]; then
        [[ $ns == "$a" ]] && ifname_env=(LOCKSTEP_SOCKET_IFNAME="$va") || ifname_env=(LOCKSTEP_SOCKET_IFNAME="$vb")
      fi
      ip netns exec "$ns" env -i PATH="$PATH" "${ifname_env[@]}" RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$(( rank % per_host )) \
        LOCAL_WORLD_SIZE=$per_host MASTER_ADDR="$master" MASTER_PORT=$port \
        timeout -k 5 120 "$bench" --op=$op --min_bytes=4K --max_bytes=1M --step_factor=16 --iters=3 --warmup=1 \
        --check --timeout=60 >"$tmp/$name.$op.$rank.log" 2>&1 &
      group_pids+=($!)
    done
    local rc_all=0
    for p in "${group_pids[@]}"; do wait "$p" || rc_all=1; done
    if [[ $rc_all -ne 0 ]] || grep -q "wrong elements" "$tmp/$name.$op.0.log"; then
      echo "FAIL: $name $op"; tail -n 5 "$tmp/$name.$op".*.log; fail=1
    fi
    port=$(( port + 1 ))
  done
  echo "ok: $name"
}
run_group "ipv4-1-per-host" "$ip4a" 1
run_group "ipv4-2-per-host" "$ip4a" 2
run_group "ifname" "$ip4a" 1 LOCKSTEP_SOCKET_IFNAME=ANY_VETH
run_group "ipv6" "$ip6a" 1

# A wrong address: rank 1 advertises loopback. Rank 0 must say so long
# before the 10-minute operation timeout.
port=$(( 30600 + RANDOM % 1000 ))
start=$(date +%s)
ip netns exec "$a" env -i PATH="$PATH" RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR="$ip4a" \
  MASTER_PORT=$port timeout -k 5 60 "$bench" --min_bytes=4K --max_bytes=4K --timeout=600 >"$tmp/wrong.0.log" 2>&1 &
r0=$!
ip netns exec "$b" env -i PATH="$PATH" RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR="$ip4a" \
  MASTER_PORT=$port timeout -k 5 60 "$bench" --min_bytes=4K --max_bytes=4K --timeout=600 --host=127.0.0.1 \
  >"$tmp/wrong.1.log" 2>&1 &
pids+=($!)
wait "$r0"; rc=$?
elapsed=$(( $(date +%s) - start ))
if [[ $rc -eq 0 || $rc -eq 124 ]] || ! grep -q "cannot connect to rank 1 at 127.0.0.1:" "$tmp/wrong.0.log" ||
   ! grep -q "loopback" "$tmp/wrong.0.log"; then
  echo "FAIL: wrong address (rc $rc after ${elapsed}s)"; cat "$tmp/wrong.0.log"; fail=1
else
  echo "ok: wrong address reported after ${elapsed}s: $(grep -o 'cannot connect to rank 1 at [^ ]*' "$tmp/wrong.0.log" | head -1)"
fi
[[ $fail -eq 0 ]] && echo PASS
exit $fail
