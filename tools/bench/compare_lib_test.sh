#!/usr/bin/env bash
# compare_lib.py's unit tests under the system's Python 3 (the compare scripts' own).
set -euo pipefail
cd "$TEST_SRCDIR/$TEST_WORKSPACE/tools/bench"
exec /usr/bin/python3 -B -m unittest -v compare_lib_test
