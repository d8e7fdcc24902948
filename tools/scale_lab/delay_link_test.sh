#!/bin/bash
# delay_link end to end, as root (network namespaces, TUN devices):
#  1. three hosts, D = 2000 us: addresses and MTU are set; a UDP echo from
#     host 0 to host 1 and to host 2 takes at least 2 D (the delay applies
#     both ways; a packet never leaves before its deadline, so there is no
#     upper bound to assert); 4 MiB over TCP from host 0 to host 2 and
#     from host 1 to host 0 arrive byte-exact; on SIGTERM the forwarder
#     exits 0 and its stats JSON has every field, packets > 0.
#  2. --selftest, two hosts, D = 200 us: a TCP bulk transfer completes
#     byte-checked and reports selftest_gbps.
#  3. SIGKILL: the TUN devices vanish with the process (nothing persists).
#  4. A namespace that does not exist: exit 1, and the message names it and
#     says how to create it.
# Every command runs under `timeout`, every wait polls against a deadline,
# and the trap removes whatever is left; the end checks that nothing is.
set -u

fail=0
runfiles="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-lockstep}"
bin="$runfiles/tools/scale_lab/delay_link"
probe="$runfiles/tools/scale_lab/lab_probe.py"

if [[ $(id -u) -ne 0 ]]; then
  if [[ "${LOCKSTEP_SKIP_ROOT_TESTS:-}" == 1 ]]; then
    echo "SKIP: delay_link_test needs root (network namespaces, TUN); skipped because LOCKSTEP_SKIP_ROOT_TESTS=1"
    exit 0
  fi
  echo "FAIL: delay_link_test needs root (network namespaces, TUN devices; CI runs as root): run as root" \
    "(sudo bazel test //tools/scale_lab:delay_link_test), or set LOCKSTEP_SKIP_ROOT_TESTS=1" \
    "(bazel test --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1) to skip the root-only tests" >&2
  exit 1
fi

id=$$
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/delay_link_test.XXXXXX") || exit 1
ns=("dlt${id}a" "dlt${id}b" "dlt${id}c")
ifname="dlt${id}"   # unique, so a leftover device is ours
pids=()             # every background process started here

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 20 ms until it
# succeeds (0) or SECONDS pass (1, with a message).
wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$(( $(date +%s%N) + seconds * 1000000000 ))
  while (( $(date +%s%N) < deadline )); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.02
  done
  echo "TIMEOUT after ${seconds}s waiting for: $what" >&2
  return 1
}
alive() { kill -0 "$1" 2>/dev/null && [[ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
dead() { ! alive "$1"; }
check() {  # check 'CONDITION' [LOG...]
  local cond=$1; shift
  if ! eval "$cond"; then
    echo "FAIL: $cond"
    local f
    for f in "$@"; do echo "---- $f (last 30 lines)"; tail -n 30 "$f" 2>/dev/null; done
    fail=1
    return 1
  fi
  echo "ok: $cond"
}
json() {  # json FILE EXPR: EXPR over the parsed JSON object `d`, printed
  timeout 10 python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}
# Our processes, however started: their command lines hold $tmp or $ifname.
our_pids() { pgrep -f -- "$tmp|--ifname=$ifname" 2>/dev/null | grep -vx "$$"; }

cleanup() {
  local p
  for p in "${pids[@]}" $(our_pids); do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  for p in "${ns[@]}"; do ip netns del "$p" 2>/dev/null; done
  return 0
}
trap 'cleanup; rm -rf "$tmp"' EXIT
trap 'echo "interrupted"; exit 1' INT TERM

for n in "${ns[@]}"; do
  timeout 10 ip netns add "$n" && timeout 10 ip -n "$n" link set lo up || { echo "FAIL: ip netns add $n"; exit 1; }
done

# start_forwarder NAME ARGS...: starts delay_link (under a hard timeout) with
# its output in $tmp/NAME.{out,err}; sets fwd_pid.
start_forwarder() {
  local name=$1; shift
  timeout -s KILL 240 "$bin" --ifname="$ifname" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  fwd_pid=$!
  pids+=("$fwd_pid")
}
# stop_forwarder: SIGTERM, then wait (bounded) for it to exit; sets fwd_rc.
stop_forwarder() {
  kill -TERM "$fwd_pid" 2>/dev/null
  wait_for 20 "the forwarder to exit after SIGTERM" dead "$fwd_pid"
  wait "$fwd_pid"
  fwd_rc=$?
}
ready_or_died() { [[ -e "$1" ]] || dead "$fwd_pid"; }
device_gone() { ! timeout 10 ip -n "$1" link show dev "$ifname"; }

# ---- 1. three hosts, D = 2000 us.
D=2000
start_forwarder three --netns="${ns[0]},${ns[1]},${ns[2]}" --delay_us=$D \
  --ready_file="$tmp/three.ready" --stats_json="$tmp/three.json"
wait_for 30 "the forwarder's ready file" ready_or_died "$tmp/three.ready"
check '[[ -e $tmp/three.ready ]] && alive $fwd_pid' "$tmp/three.err"
check 'grep -qx ready "$tmp/three.out"' "$tmp/three.out"
for i in 0 1 2; do
  check "timeout 10 ip -n ${ns[$i]} addr show dev $ifname | grep -q 'inet 10.77.0.$((i + 1))/16'"
  check "timeout 10 ip -n ${ns[$i]} link show dev $ifname | grep -q 'mtu 65000'"
  check "timeout 10 ip -n ${ns[$i]} link show dev $ifname | grep -q ',UP'"
done

# UDP echo servers on hosts 1 and 2; host 0 pings each 20 times.
for i in 1 2; do
  ip netns exec "${ns[$i]}" timeout 120 python3 "$probe" udp-echo --bind "10.77.0.$((i + 1))" --port 7777 \
    --ready "$tmp/echo$i.ready" --seconds 100 >"$tmp/echo$i.log" 2>&1 &
  pids+=($!)
done
for i in 1 2; do
  wait_for 30 "the UDP echo server on host $i" test -e "$tmp/echo$i.ready"
  ip netns exec "${ns[0]}" timeout 60 python3 "$probe" udp-ping --to "10.77.0.$((i + 1))" --port 7777 \
    --count 20 --interval 0.01 --timeout 5 >"$tmp/ping$i.json" 2>"$tmp/ping$i.err"
  check "[[ \$(json $tmp/ping$i.json 'd[\"received\"]') == 20 ]]" "$tmp/ping$i.json" "$tmp/ping$i.err"
  echo "host 0 -> host $i RTT (us): $(json "$tmp/ping$i.json" '"min %.0f, max %.0f" % (d["min_us"], d["max_us"])')"
  # Each direction waits at least D: the round trip takes at least 2 D.
  check "json $tmp/ping$i.json 'd[\"min_us\"] >= 2 * $D' | grep -qx True" "$tmp/ping$i.json"
done

# 4 MiB over TCP, byte-exact: host 0 -> host 2 and host 1 -> host 0.
transfer() {  # transfer SRC DST
  local src=$1 dst=$2 tag="tcp$1$2"
  ip netns exec "${ns[$dst]}" timeout 90 python3 "$probe" tcp-sink --bind "10.77.0.$((dst + 1))" --port 5001 \
    --ready "$tmp/$tag.ready" --out "$tmp/$tag.sink.json" --seconds 80 >"$tmp/$tag.sink.log" 2>&1 &
  local sink=$!
  pids+=("$sink")
  wait_for 30 "the TCP sink on host $dst" test -e "$tmp/$tag.ready"
  ip netns exec "${ns[$src]}" timeout 90 python3 "$probe" tcp-source --to "10.77.0.$((dst + 1))" --port 5001 \
    --bytes $((4 << 20)) --seed "$src$dst" --timeout 60 >"$tmp/$tag.source.json" 2>"$tmp/$tag.source.err"
  wait_for 30 "the TCP sink on host $dst to finish" dead "$sink"
  check "[[ -s $tmp/$tag.sink.json ]] && [[ \$(json $tmp/$tag.sink.json 'd[\"bytes\"], d[\"sha256\"]') == \$(json $tmp/$tag.source.json 'd[\"bytes\"], d[\"sha256\"]') ]]" \
    "$tmp/$tag.sink.log" "$tmp/$tag.source.err" "$tmp/$tag.source.json"
}
transfer 0 2
transfer 1 0

stop_forwarder
check '[[ $fwd_rc == 0 ]]' "$tmp/three.err"
check '[[ -s $tmp/three.json ]]' "$tmp/three.err"
fields="hosts delay_us packets bytes dropped lateness_p50_us lateness_p99_us lateness_max_us valid"
fields+=" ceiling_gbps ceiling_pps avg_gbps timer_wake_late_p99_us write_p99_us"
check "json $tmp/three.json '[f for f in \"$fields\".split() if f not in d]' | grep -qx '\[\]'" "$tmp/three.json"
check "json $tmp/three.json 'd[\"hosts\"] == 3 and d[\"packets\"] > 0 and d[\"bytes\"] > 2 * (4 << 20) and isinstance(d[\"valid\"], bool) and d[\"lateness_p99_us\"] >= 0' | grep -qx True" "$tmp/three.json"
# The same object on stdout, after "ready".
check "tail -n 1 $tmp/three.out | python3 -c 'import json,sys; assert json.load(sys.stdin)[\"packets\"] > 0'" "$tmp/three.out"
echo "stats: $(cat "$tmp/three.json")"
check "wait_for 20 'the TUN device in ${ns[0]} to vanish' device_gone ${ns[0]}" "$tmp/three.err"

# ---- 2. --selftest, two hosts, D = 200 us.
timeout -s KILL 120 "$bin" --ifname="$ifname" --netns="${ns[0]},${ns[1]}" --delay_us=200 --selftest --selftest_s=1 \
  --stats_json="$tmp/selftest.json" >"$tmp/selftest.out" 2>"$tmp/selftest.err"
rc=$?
check '[[ $rc == 0 ]]' "$tmp/selftest.err"
check "json $tmp/selftest.json 'd[\"selftest_completed\"] and d[\"selftest_bytes\"] > 0 and d[\"selftest_gbps\"] > 0' | grep -qx True" \
  "$tmp/selftest.json" "$tmp/selftest.err"
echo "selftest: $(json "$tmp/selftest.json" '"%.2f Gbit/s achieved, ceiling %.2f Gbit/s" % (d["selftest_gbps"], d["ceiling_gbps"])')"

# ---- 3. SIGKILL leaves no device behind.
start_forwarder killed --netns="${ns[0]},${ns[1]}" --delay_us=50 --ready_file="$tmp/killed.ready"
wait_for 30 "the forwarder's ready file" ready_or_died "$tmp/killed.ready"
check "timeout 10 ip -n ${ns[1]} link show dev $ifname" "$tmp/killed.err"
# fwd_pid is `timeout`'s; SIGKILL the forwarder itself, its child.
fwd_child=$(pgrep -P "$fwd_pid")
check '[[ -n $fwd_child ]]'
kill -9 $fwd_child
wait_for 20 "the killed forwarder to go" dead "$fwd_pid"
wait "$fwd_pid" 2>/dev/null
check "wait_for 20 'the TUN device in ${ns[0]} to vanish' device_gone ${ns[0]}"
check "wait_for 20 'the TUN device in ${ns[1]} to vanish' device_gone ${ns[1]}"

# ---- 4. A missing namespace: a clear error.
timeout -s KILL 30 "$bin" --ifname="$ifname" --netns="${ns[0]},dlt${id}missing" --delay_us=10 \
  >"$tmp/missing.out" 2>"$tmp/missing.err"
rc=$?
check '[[ $rc == 1 ]]' "$tmp/missing.err"
check "grep -q 'dlt${id}missing' $tmp/missing.err && grep -q 'ip netns add' $tmp/missing.err" "$tmp/missing.err"
check "wait_for 20 'the TUN device in ${ns[0]} to vanish' device_gone ${ns[0]}"

# ---- Nothing left: no process, no namespace, no device.
cleanup
leftover_ns() { ip netns list | grep -q "dlt${id}"; }
check '[[ -z "$(our_pids)" ]]'
check '! leftover_ns'
check "! ip link show dev $ifname >/dev/null 2>&1"
check "! grep -rqs . /sys/class/net/$ifname"

if [[ $fail -eq 0 ]]; then echo "PASS"; else echo "FAILED"; fi
exit $fail
