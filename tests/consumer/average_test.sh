#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/$TEST_WORKSPACE/average")
expected=$'2 3 4 5 \nerror reported'
if [[ "$out" != "$expected" ]]; then
  echo "average printed:"; echo "$out"; echo "expected:"; echo "$expected"
  exit 1
fi
echo "ok"
