#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/$TEST_WORKSPACE/train_mlp")
expected=$'loss fell: yes\ncheckpoint: ok'
if [[ "$out" != "$expected" ]]; then
  echo "train_mlp printed:"; echo "$out"; echo "expected:"; echo "$expected"
  exit 1
fi
echo "ok"
