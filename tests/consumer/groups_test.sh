#!/usr/bin/env bash
# Rank 0 receives one copy of 10 * i from each rank i (AllToAllV), and is
# rank 0 of 2 in the even half, whose ranks 0 and 2 sum to 2 (Split).
set -euo pipefail
out=$("$TEST_SRCDIR/$TEST_WORKSPACE/groups")
expected="received 0 10 20 30
half: rank 0 of 2, sum 2"
if [[ "$out" != "$expected" ]]; then
  echo "groups printed: $out"; echo "expected: $expected"
  exit 1
fi
echo "ok"
