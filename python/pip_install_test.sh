#!/usr/bin/env bash
# `pip install ./python` as a PyTorch user meets it, with Debian's torch 1.13:
# a venv with the system site packages, offline, nothing of lockstep installed
# first but the libraries Bazel built (LOCKSTEP_PREFIX, the python_deps tree:
# setup.py would otherwise run Bazel itself, which a test inside Bazel cannot).
# Installs, imports from elsewhere, runs the backend client test at world 2
# and 3 (TCP and shared memory) and PyTorch's own DDP on "lockstep" against
# "gloo" (bit-identical), builds the wheel, uninstalls, and checks that the
# module is gone.
set -euo pipefail
export PATH="/usr/local/bin:/usr/bin:/bin"
here="$TEST_SRCDIR/$TEST_WORKSPACE"
work="$TEST_TMPDIR"
# A checkout with what the build reads: python/ and interop/torch's sources.
checkout="$work/checkout"
mkdir -p "$checkout"
for path in python/pyproject.toml python/setup.py python/README.md interop/torch/bridge interop/torch/c10d; do
  mkdir -p "$checkout/$(dirname "$path")"
  cp -rL "$here/$path" "$checkout/$path"
done
touch "$checkout/WORKSPACE"
export LOCKSTEP_PREFIX="$here/tools/install/python_deps" PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1

/usr/bin/python3 -m venv --system-site-packages "$work/venv"
py="$work/venv/bin/python"
(cd "$checkout" && timeout 600 "$py" -m pip install --no-build-isolation ./python) >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; echo "pip install failed"; exit 1; }
tail -2 "$work/install.log"

cd "$work"  # not the checkout: the installed module must be the one found
module=$("$py" -c 'import lockstep_torch, torch.distributed as d; assert "LOCKSTEP" in d.Backend._plugins; print(lockstep_torch.__file__)')
[[ $module == "$work/venv/lib/"*/site-packages/lockstep_torch* ]] || { echo "imported from $module, not the venv"; exit 1; }
echo "installed: $module"

tests="$here/interop/torch/c10d"
export PYTHONWARNINGS=ignore
timeout 300 "$py" "$tests/torch_backend_test.py" --only 2:tcp:env
timeout 300 "$py" "$tests/torch_backend_test.py" --only 3:shm:file
timeout 300 "$py" "$tests/torch_ddp_parity_test.py" --only mlp_buckets

# The wheel, offline (ninja finds the extension's objects up to date).
(cd "$checkout" && timeout 600 "$py" -m pip wheel --no-deps --no-build-isolation -w "$work/wheels" ./python) \
  >"$work/wheel.log" 2>&1 || { cat "$work/wheel.log"; echo "pip wheel failed"; exit 1; }
wheel=$(ls "$work/wheels"/lockstep_torch-0.4.0-*.whl)
"$py" -m zipfile -l "$wheel" | grep -q 'lockstep_torch\..*\.so' || { echo "$wheel has no extension"; exit 1; }
echo "wheel: $(basename "$wheel")"

"$py" -m pip uninstall -y lockstep-torch
if "$py" -c 'import lockstep_torch' 2>/dev/null; then echo "lockstep_torch still imports after uninstall"; exit 1; fi
[[ -z $(ls "$work"/venv/lib/*/site-packages | grep -i lockstep || true) ]] || { echo "uninstall left files"; exit 1; }
echo ok
