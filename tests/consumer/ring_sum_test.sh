#!/usr/bin/env bash
# Rank 0 prints elements 0, 1, 9 and 99999 of the sum of (r+1)*(i%10) over
# ranks 0 and 1: 3*(i%10).
set -euo pipefail
out=$("$TEST_SRCDIR/$TEST_WORKSPACE/ring_sum")
expected="0 3 27 27"
if [[ "$out" != "$expected" ]]; then
  echo "ring_sum printed: $out"; echo "expected: $expected"
  exit 1
fi
echo "ok"
