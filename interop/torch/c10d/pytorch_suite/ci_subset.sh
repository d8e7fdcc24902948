#!/usr/bin/env bash
# CI's part of PyTorch's distributed suite on lockstep (the whole suite and
# its comparison with gloo: run_all.sh, docs/TORCH_SUITE.md): every test in
# ci_subset.txt ("MODE WORLD_SIZE TEST", MODE lockstep or asgloo) must pass;
# a skip, failure or error fails this test, naming it. At least one test
# of every collective, of DDP and of subgroups; about 2 minutes (4 under
# AddressSanitizer).
set -uo pipefail
here="$TEST_SRCDIR/$TEST_WORKSPACE/interop/torch/c10d"
python=/usr/bin/python3  # Run through ../python_test.sh: PYTHONPATH (and ASan's preload) set there.
export OMP_NUM_THREADS=1
out="${TEST_UNDECLARED_OUTPUTS_DIR:-${TEST_TMPDIR:-/tmp}}"
fail=0
for group in $(awk '!/^#/ && NF == 3 {print $1 ":" $2}' "$here/pytorch_suite/ci_subset.txt" | sort -u); do
  mode=${group%%:*} world=${group##*:}
  names=$(awk -v m="$mode" -v w="$world" '!/^#/ && $1 == m && $2 == w {print $3}' "$here/pytorch_suite/ci_subset.txt")
  args=()
  for n in $names; do args+=(-k "$n\$"); done
  backend=lockstep as_gloo=0
  [[ $mode == asgloo ]] && backend=gloo as_gloo=1
  temp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/suite.XXXXXX")
  json="$out/${mode}_${world}.json"
  start=$(date +%s)
  BACKEND=$backend LOCKSTEP_AS_GLOO=$as_gloo WORLD_SIZE=$world TEMP_DIR=$temp \
    timeout -k 10 900 "$python" "$here/pytorch_suite/run_distributed_suite.py" --json "$json" "${args[@]}" \
    >"$out/${mode}_${world}.log" 2>&1
  echo "=== $mode, world size $world: $(echo $names | wc -w) tests in $(( $(date +%s) - start )) s"
  "$python" - "$json" $names <<'PY' || fail=1
import json, sys
path, wanted = sys.argv[1], sys.argv[2:]
try:
    got = {t["name"]: t for t in json.load(open(path))["tests"]}
except OSError:
    print(f"FAIL: no results in {path} (the suite did not finish; see its log beside it)")
    sys.exit(1)
bad = 0
for name in wanted:
    t = got.get(name)
    if t is None:
        print(f"FAIL {name}: not run (no such test in this PyTorch?)"); bad = 1
    elif t["status"] != "passed":
        detail = [l for l in t["detail"].strip().splitlines() if l.strip()][-3:]
        print(f"FAIL {name}: {t['status']}: " + " / ".join(detail)); bad = 1
    else:
        print(f"ok   {name} ({t['seconds']} s)")
sys.exit(bad)
PY
  rm -rf "$temp"
done
exit $fail
