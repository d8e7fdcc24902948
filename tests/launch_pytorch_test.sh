#!/usr/bin/env bash
# An unchanged PyTorch DDP script (tests/testdata/torch_ddp_script.py:
# init_process_group(BACKEND, init_method="env://"), an all_reduce check, a
# few DDP steps of a tiny model, parameters compared across ranks) runs
# under `lockstep-run --nproc_per_node 2 script.py` with Debian's
# python3-torch (LOCKSTEP_PYTHON=/usr/bin/python3) over gloo and over
# lockstep's torch.distributed backend (interop/torch:lockstep_torch); each
# finishes and both ranks' lines come back prefixed with their rank. Needs
# python3-torch (tools/setup.sh installs it).
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "the launch tests (exclusive use of the machine's ports)"
launcher="$runfiles/tools/launch/lockstep-run"
script="$runfiles/tests/testdata/torch_ddp_script.py"
module_dir="$runfiles/interop/torch"  # lockstep_torch.so
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

# One launch: its agent, log and the two ranks' lines.
#   launch NAME BACKEND REGEX_PREFIX COMMAND...
launch() {
  local name=$1 backend=$2 prefix=$3 log="$tmp/$1.log" r
  shift 3
  TORCH_DDP_BACKEND="$backend" timeout -k 5 180 "$@" >"$log" 2>&1 &
  agent=$!
  wait "$agent"; rc=$?
  agent=
  lib_check '[[ $rc -eq 0 ]]' "$log" || echo "$name exited with $rc (124: timed out after 180 s)"
  for r in 0 1; do
    lib_check 'grep -Eq "^'"${prefix//R/$r}"'torch_ddp_script: rank '$r' of 2 local '$r' backend '$backend' all_reduce 3 loss [0-9.]+ params identical ok$" "$log"' "$log"
  done
  lib_check '! grep -q "FAILED\|Traceback" "$log"' "$log"
  grep "torch_ddp_script" "$log"
}

# lockstep-run over gloo, then over lockstep's own backend (the module from
# interop/torch on PYTHONPATH).
port=$(lib_free_port) || exit 1
LOCKSTEP_PYTHON="$python" launch lockstep-run-gloo gloo '\[R\]: ?' "$launcher" --nproc_per_node 2 \
  --master_port "$port" --max_restarts 0 "$script"
export PYTHONPATH="$module_dir${PYTHONPATH:+:$PYTHONPATH}"
source "$runfiles/interop/torch/c10d/asan_python_env.sh"
asan_python_env "$module_dir/lockstep_torch.so"
port=$(lib_free_port) || exit 1
LOCKSTEP_PYTHON="$python" launch lockstep-run-lockstep lockstep '\[R\]: ?' "$launcher" --nproc_per_node 2 \
  --master_port "$port" --max_restarts 0 "$script"
# Debian's torchrun (python3 -m torch.distributed.run) does not start on
# Python 3.11: its agent reads --redirects as None ("'NoneType' object has
# no attribute 'get'" in elastic/multiprocessing/api.py's to_map) before any
# worker runs, whatever the script or backend.
lib_finish
