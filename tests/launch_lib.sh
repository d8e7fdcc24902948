# Shared helpers of the end-to-end tests (tests/launch_*_test.sh,
# tests/slurm_test.sh, tests/mpirun_test.sh, tests/multinode_test.sh,
# tests/mixed_transport_test.sh). Sourced, never run.
#
#   source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
#   lib_require_root "ip netns"          # fails when not root (skips only with LOCKSTEP_SKIP_ROOT_TESTS=1)
#   port=$(lib_free_port)
#   lib_wait_for 30 "checkpoint exists" test -e "$dir/step-0000000005.safetensors"
#   lib_check 'grep -q "4 ranks" "$log"' "$log"   # sets fail=1 and prints the log
#   lib_netns_for_agents                 # two namespaces, removed (with the pids in `agents`) on exit
#   lib_in_ns "$ns_a" "$launcher" ...    # a clean environment inside one
#
# Every wait polls a condition against a deadline; nothing sleeps to synchronize.

fail=0
runfiles="${TEST_SRCDIR:?run under bazel test}/${TEST_WORKSPACE:?}"

# A root-only test fails when not root: a skip that Bazel shows as PASSED
# would say it ran. LOCKSTEP_SKIP_ROOT_TESTS=1 (bazel test
# --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1) skips it instead, and says so.
lib_require_root() {
  [[ $(id -u) -eq 0 ]] && return 0
  if [[ "${LOCKSTEP_SKIP_ROOT_TESTS:-}" == 1 ]]; then
    echo "SKIP: $1 needs root; skipped because LOCKSTEP_SKIP_ROOT_TESTS=1"
    exit 0
  fi
  echo "FAIL: $1 needs root (CI runs as root): run as root (sudo bazel test ${TEST_TARGET:-this test}), or set" \
    "LOCKSTEP_SKIP_ROOT_TESTS=1 (bazel test --test_env=LOCKSTEP_SKIP_ROOT_TESTS=1) to skip the root-only tests" >&2
  exit 1
}

# A TCP port with no listener in this network namespace, from 20000..29999
# (below the kernel's ephemeral range, so an outgoing connection does not take it).
lib_free_port() {
  local p
  for _ in $(seq 200); do
    p=$(( 20000 + RANDOM % 10000 ))
    if [[ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]]; then echo "$p"; return 0; fi
  done
  echo "lib_free_port: no free port found in 200 tries" >&2
  return 1
}

# lib_wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 50 ms until it
# succeeds (0) or SECONDS pass (1, with a message naming DESCRIPTION).
lib_wait_for() {
  local seconds=$1 what=$2; shift 2
  local deadline=$(( $(date +%s%N) + seconds * 1000000000 ))
  while (( $(date +%s%N) < deadline )); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "TIMEOUT after ${seconds}s waiting for: $what" >&2
  return 1
}

lib_alive() { kill -0 "$1" 2>/dev/null && [[ "$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null)" != Z ]]; }
lib_dead() { ! lib_alive "$1"; }

# Every descendant of a process (children first found, then theirs), by pid.
lib_descendants() {
  local p c
  for c in $(pgrep -P "$1" 2>/dev/null); do
    echo "$c"
    lib_descendants "$c"
  done
}

# Processes whose command line contains STRING (a path unique to this test
# run) and whose executable is EXE (resolved), by pid.
lib_pids_of() {
  local needle=$1 exe; exe=$(readlink -f "$2")
  local p
  for p in $(pgrep -f -- "$needle" 2>/dev/null); do
    [[ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" == "$exe" ]] && echo "$p"
  done
}

# The value of variable NAME in process PID's environment.
lib_env_of() {
  tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n "s/^$2=//p" | head -1
}

# lib_kill_all PID...: SIGKILL each pid and every descendant it has now.
lib_kill_all() {
  local p all=()
  for p in "$@"; do all+=("$p" $(lib_descendants "$p")); done
  for p in "${all[@]}"; do kill -9 "$p" 2>/dev/null; done
  return 0
}

# lib_check 'CONDITION' [LOG...]: eval CONDITION; on failure print it and the logs.
lib_check() {
  local cond=$1; shift
  if ! eval "$cond"; then
    echo "FAIL: $cond"
    local f
    for f in "$@"; do echo "---- $f (last 40 lines)"; tail -n 40 "$f" 2>/dev/null; done
    fail=1
    return 1
  fi
  return 0
}

lib_finish() {
  if [[ $fail -eq 0 ]]; then echo "PASS"; else echo "FAILED"; fi
  exit $fail
}

# Two "hosts": network namespaces joined by a veth pair, each end with an
# IPv4 and an IPv6 address. Sets ns_a, ns_b, veth_a, veth_b, ip_a, ip_b,
# ip6_a, ip6_b; lib_netns_cleanup removes both (call it from the EXIT trap).
lib_netns_setup() {
  local id=$$
  ns_a="lla$id" ns_b="llb$id"
  veth_a="vla$id" veth_b="vlb$id"
  local net=$(( id % 200 + 20 ))
  ip_a="10.78.$net.1" ip_b="10.78.$net.2"
  ip6_a="fd78:$net::1" ip6_b="fd78:$net::2"
  ip netns add "$ns_a" && ip netns add "$ns_b" &&
    ip link add "$veth_a" type veth peer name "$veth_b" &&
    ip link set "$veth_a" netns "$ns_a" && ip link set "$veth_b" netns "$ns_b" &&
    ip -n "$ns_a" addr add "$ip_a/24" dev "$veth_a" && ip -n "$ns_b" addr add "$ip_b/24" dev "$veth_b" &&
    ip -n "$ns_a" addr add "$ip6_a/64" dev "$veth_a" nodad && ip -n "$ns_b" addr add "$ip6_b/64" dev "$veth_b" nodad &&
    ip -n "$ns_a" link set lo up && ip -n "$ns_b" link set lo up &&
    ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up
}
lib_netns_cleanup() {
  [[ -n "${ns_a:-}" ]] && ip netns del "$ns_a" 2>/dev/null
  [[ -n "${ns_b:-}" ]] && ip netns del "$ns_b" 2>/dev/null
  return 0
}

# The two "hosts" for agents: lib_netns_setup, and an EXIT trap that kills
# every pid in the array `agents` (with its descendants) and removes the
# namespaces; exits 1 when they cannot be made.
lib_netns_for_agents() {
  agents=()
  trap '[[ ${#agents[@]} -gt 0 ]] && lib_kill_all "${agents[@]}"; lib_netns_cleanup' EXIT
  if ! lib_netns_setup; then
    echo "FAIL: could not create the two network namespaces and their veth pair (ip netns, ip link)"
    exit 1
  fi
}

# lib_in_ns NS COMMAND...: COMMAND inside namespace NS with a clean
# environment (no launcher variables from outside), HOME=$tmp.
lib_in_ns() { local ns=$1; shift; ip netns exec "$ns" env -i PATH="/usr/sbin:/usr/bin:/sbin:/bin" HOME="$tmp" "$@"; }

# A real etcd (Debian's etcd-server) on free loopback ports, data in DIR:
# lib_etcd_start DIR [SCHEME [ETCD FLAGS...]] sets etcd_pid and
# etcd_endpoint (127.0.0.1:PORT) once etcd says it serves clients;
# lib_etcd_stop (call it from the EXIT trap too) stops it and removes DIR.
lib_etcd_start() {
  local dir=$1 scheme=${2:-http}; shift; [[ $# -gt 0 ]] && shift
  local client peer
  client=$(lib_free_port) && peer=$(lib_free_port) || return 1
  mkdir -p "$dir"
  etcd_dir=$dir
  etcd_endpoint="127.0.0.1:$client"
  etcd --name=lab --data-dir="$dir/data" \
    --listen-client-urls="$scheme://127.0.0.1:$client" --advertise-client-urls="$scheme://127.0.0.1:$client" \
    --listen-peer-urls="http://127.0.0.1:$peer" --initial-advertise-peer-urls="http://127.0.0.1:$peer" \
    --initial-cluster="lab=http://127.0.0.1:$peer" "$@" >"$dir/etcd.log" 2>&1 &
  etcd_pid=$!
  lib_wait_for 60 "etcd to serve clients ($dir/etcd.log)" grep -q "ready to serve client requests" "$dir/etcd.log" ||
    { tail -20 "$dir/etcd.log"; return 1; }
}
lib_etcd_stop() {
  if [[ -n "${etcd_pid:-}" ]]; then
    kill "$etcd_pid" 2>/dev/null
    lib_wait_for 10 "etcd (pid $etcd_pid) to stop" lib_dead "$etcd_pid" || kill -9 "$etcd_pid" 2>/dev/null
    wait "$etcd_pid" 2>/dev/null
    etcd_pid=
  fi
  [[ -n "${etcd_dir:-}" ]] && rm -rf "$etcd_dir"
  return 0
}
