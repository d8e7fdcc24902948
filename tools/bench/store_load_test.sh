#!/usr/bin/env bash
# store_load at 256 clients, lockstep and PyTorch's TCPStore: both complete
# the start-up pattern (each client checks every value it reads), and the
# tool prints both durations and the ratio last.
set -euo pipefail
here="$TEST_SRCDIR/$TEST_WORKSPACE/tools/bench"
out=$(timeout 300 "$here/store_load" --clients=256 --peer=torch --peer_timeout_s=200 \
  --torch_script="$here/store_load_torch.py" 2>&1) || { echo "$out"; echo "store_load failed"; exit 1; }
echo "$out"
grep -q '^lockstep TcpStore: [0-9.]* s (server: [0-9.]* s CPU, peak RSS [0-9.]* MiB' <<<"$out" || { echo "no lockstep line"; exit 1; }
grep -q '^torch TCPStore: *[0-9.]* s' <<<"$out" || { echo "no TCPStore line"; exit 1; }
[[ $(tail -1 <<<"$out") =~ ^ratio\ [0-9.]+$ ]] || { echo "the last line is not 'ratio R'"; exit 1; }
# Bad arguments: an error naming the flag, nothing run.
if "$here/store_load" --clients=0 2>"$TEST_TMPDIR/err"; then echo "--clients=0 was accepted"; exit 1; fi
grep -q -- '--clients must be' "$TEST_TMPDIR/err" || { cat "$TEST_TMPDIR/err"; exit 1; }
echo ok
