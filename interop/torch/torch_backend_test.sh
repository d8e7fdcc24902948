#!/usr/bin/env bash
# torch.distributed over the backend "lockstep" (torch_backend_test.py):
# every operation and dtype at world sizes 2 and 3 over TCP and shared
# memory, rendezvous through file://, a TCPStore and env://, and the error
# cases (a mismatch, a dead peer, the timeout). Needs python3-torch
# (tools/setup.sh installs it: in CI this runs, never skips).
set -uo pipefail
here="$TEST_SRCDIR/$TEST_WORKSPACE/interop/torch"
python=/usr/bin/python3
if ! "$python" -c "import torch.distributed" 2>/dev/null; then
  echo "FAIL: $python cannot import torch.distributed; install PyTorch with: bash tools/setup.sh"
  exit 1
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS=ignore
cd "${TEST_TMPDIR:-/tmp}"
exec timeout -k 5 600 "$python" "$here/torch_backend_test.py" "$@"
