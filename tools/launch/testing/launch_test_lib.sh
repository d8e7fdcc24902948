# Sourced by tools/launch's shell tests: the paths of lockstep-run and
# test_worker in the runfiles, a temporary directory, and the helpers that
# keep a test from hanging or leaking processes (every wait has a deadline;
# the trap kills every agent started in the background and every worker
# that recorded its pid).
#   LAUNCH_TEST_NAME=launcher_test; source "$(dirname "$0")/testing/launch_test_lib.sh"
RUNFILES="${TEST_SRCDIR:-$0.runfiles}/${TEST_WORKSPACE:-lockstep}"
RUN="$RUNFILES/tools/launch/lockstep-run"
WORKER="$RUNFILES/tools/launch/test_worker"
# Under /tmp when LAUNCH_TEST_TMP_ROOT=/tmp (a directory other users reach).
TMP="$(mktemp -d "${LAUNCH_TEST_TMP_ROOT:-${TEST_TMPDIR:-/tmp}}/${LAUNCH_TEST_NAME:-launch_test}.XXXXXX")"
PIDS=()
FAILED=0

cleanup() {
  for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  # Workers recorded their pids; none may outlive the test.
  for f in "$TMP"/*/env.*; do
    [ -f "$f" ] || continue
    for pid in $(sed -n 's/^\(CHILD_\)\{0,1\}PID=//p' "$f"); do kill -KILL "$pid" 2>/dev/null; done
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  FAILED=1
}

# A free TCP port on loopback (bound and closed; the test owns the machine's
# loopback for the instant it takes).
free_port() {
  /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# wait_for SECONDS COMMAND...: until COMMAND succeeds, or fail.
wait_for() {
  local limit=$1
  shift
  local end=$((SECONDS + limit))
  until "$@"; do
    if [ $SECONDS -ge $end ]; then return 1; fi
    sleep 0.05
  done
}
