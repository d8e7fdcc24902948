#!/usr/bin/env bash
# Installs the torch.distributed backend module for an interpreter:
#
#   bazel run //interop/torch:install_lockstep_torch             # /usr/bin/python3's user site-packages
#   bazel run //interop/torch:install_lockstep_torch -- DIR      # into DIR (a virtualenv's site-packages, ...)
#
# Copies lockstep_torch.so (built for Debian's python3-torch 1.13; it loads
# the CUDA runtime from /usr/local/cuda/lib64, where the build found it) and
# checks that `import lockstep_torch` then registers the backend.
set -euo pipefail
python=${LOCKSTEP_PYTHON:-/usr/bin/python3}
so="${RUNFILES_DIR:-$0.runfiles}/lockstep/interop/torch/lockstep_torch.so"
[[ -f $so ]] || { echo "install_lockstep_torch: $so is missing; run it with bazel run" >&2; exit 2; }
dest=${1:-$("$python" -c 'import site; print(site.getusersitepackages())')}
mkdir -p "$dest"
install -m 0755 "$so" "$dest/lockstep_torch.so"
if ! (cd / && PYTHONPATH="$dest" "$python" -c 'import torch.distributed as d, lockstep_torch; assert "LOCKSTEP" in d.Backend._plugins'); then
  echo "install_lockstep_torch: copied to $dest, but $python cannot import it (is $dest on its path?)" >&2
  exit 1
fi
echo "installed $dest/lockstep_torch.so: import lockstep_torch, then dist.init_process_group(\"lockstep\", ...)"
