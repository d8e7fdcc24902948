#!/usr/bin/env bash
# PyTorch DDP over "lockstep" against "gloo" (torch_ddp_parity_test.py):
# four training scenarios end with bit-identical losses and parameters.
# Needs python3-torch (tools/setup.sh installs it: in CI this runs, never
# skips).
set -uo pipefail
here="$TEST_SRCDIR/$TEST_WORKSPACE/interop/torch"
python=/usr/bin/python3
if ! "$python" -c "import torch.distributed" 2>/dev/null; then
  echo "FAIL: $python cannot import torch.distributed; install PyTorch with: bash tools/setup.sh"
  exit 1
fi
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS=ignore
cd "${TEST_TMPDIR:-/tmp}"
exec timeout -k 5 600 "$python" "$here/torch_ddp_parity_test.py" "$@"
