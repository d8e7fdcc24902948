#!/usr/bin/env bash
set -euo pipefail
out=$("$TEST_SRCDIR/$TEST_WORKSPACE/old_names")
if [[ "$out" != "42 both" ]]; then
  echo "old_names printed: $out (expected: 42 both)"
  exit 1
fi
echo "ok"
