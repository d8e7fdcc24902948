#!/usr/bin/env bash
# An unchanged PyTorch DDP script (tests/testdata/torch_ddp_script.py:
# init_process_group("gloo", init_method="env://"), an all_reduce check, a
# few DDP steps of a tiny model, parameters compared across ranks) runs
# under `lockstep-run --nproc_per_node 2 script.py` with Debian's
# python3-torch (LOCKSTEP_PYTHON=/usr/bin/python3) and finishes; both ranks'
# lines come back prefixed with their rank. Needs python3-torch
# (tools/setup.sh installs it; this is the one test that uses it).
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "the launch tests (exclusive use of the machine's ports)"
launcher="$runfiles/tools/launch/lockstep-run"
script="$runfiles/tests/testdata/torch_ddp_script.py"
python=/usr/bin/python3
if ! "$python" -c "import torch.distributed" 2>/dev/null; then
  echo "FAIL: $python cannot import torch.distributed; install PyTorch with: bash tools/setup.sh (apt-get install python3-torch)"
  exit 1
fi
tmp="${TEST_TMPDIR:-/tmp}/launch_pytorch_test"
rm -rf "$tmp" && mkdir -p "$tmp"
agent=
cleanup() { [[ -n "$agent" ]] && lib_kill_all "$agent"; }
trap cleanup EXIT

port=$(lib_free_port) || exit 1
log="$tmp/agent.log"
LOCKSTEP_PYTHON="$python" timeout -k 5 180 "$launcher" --nproc_per_node 2 --master_port "$port" \
  --max_restarts 0 "$script" >"$log" 2>&1 &
agent=$!
wait "$agent"; rc=$?
agent=
lib_check '[[ $rc -eq 0 ]]' "$log" || echo "lockstep-run exited with $rc (124: timed out after 180 s)"
for r in 0 1; do
  lib_check 'grep -Eq "^\['$r'\]: ?torch_ddp_script: rank '$r' of 2 local '$r' all_reduce 3 loss [0-9.]+ params identical ok$" "$log"' "$log"
done
lib_check '! grep -q "FAILED\|Traceback" "$log"' "$log"
[[ $fail -eq 0 ]] && grep "torch_ddp_script" "$log"
lib_finish
