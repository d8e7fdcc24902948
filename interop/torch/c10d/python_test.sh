#!/usr/bin/env bash
# Runs one of interop/torch/c10d's Python tests with Debian's python3-torch:
#
#   python_test.sh torch_backend_test.py [ARGS]     (a Python script)
#   python_test.sh pytorch_suite/ci_subset.sh       (a shell script)
#
# PYTHONPATH holds the directory of lockstep_torch.so and pytorch_suite/.
# Under --config=asan the sanitizer's runtime is preloaded into the
# interpreter (asan_python_env.sh). Needs python3-torch
# (tools/setup.sh installs it: in CI these tests run, never skip).
set -uo pipefail
here="$TEST_SRCDIR/$TEST_WORKSPACE/interop/torch/c10d"
module_dir="$TEST_SRCDIR/$TEST_WORKSPACE/interop/torch"  # lockstep_torch.so
python=/usr/bin/python3
if ! "$python" -c "import torch.distributed" 2>/dev/null; then
  echo "FAIL: $python cannot import torch.distributed; install PyTorch with: bash tools/setup.sh"
  exit 1
fi
export PYTHONPATH="$module_dir:$here/pytorch_suite${PYTHONPATH:+:$PYTHONPATH}" PYTHONWARNINGS=ignore
source "$here/asan_python_env.sh"
asan_python_env "$module_dir/lockstep_torch.so"
cd "${TEST_TMPDIR:-/tmp}"
script=$1
shift
case $script in
  *.py) exec timeout -k 5 900 "$python" "$here/$script" "$@" ;;
  *) exec timeout -k 5 900 bash "$here/$script" "$@" ;;
esac
