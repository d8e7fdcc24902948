#!/usr/bin/env bash
# Every line of each header's usage example (the first run of "//   " lines
# in its opening comment) must appear, in order, in header_examples_test.cc,
# which compiles and runs them.
set -euo pipefail
dir="$TEST_SRCDIR/$TEST_WORKSPACE"
examples="$dir/tests/header_examples_test.cc"
status=0
for header in nn/mlp.h nn/module.h ddp/distributed_data_parallel.h; do
  # The example: the first block of comment lines indented by 3+ spaces.
  mapfile -t lines < <(awk '/^\/\/   / {print substr($0, 6); found = 1; next} found {exit}' "$dir/$header")
  if [[ ${#lines[@]} -eq 0 ]]; then
    echo "$header: no example found"; status=1; continue
  fi
  at=0
  for line in "${lines[@]}"; do
    want=$(echo "$line" | sed -e 's/^ *//' -e 's/ *$//')
    n=$(awk -v from="$at" -v want="$want" 'NR > from { l = $0; sub(/^ */, "", l); sub(/ *$/, "", l); if (l == want) { print NR; exit } }' "$examples")
    if [[ -z "$n" ]]; then
      echo "$header: example line not in tests/header_examples_test.cc (after line $at): $want"
      status=1
      break
    fi
    at=$n
  done
  [[ $status -eq 0 ]] && echo "$header: ${#lines[@]} lines compiled"
done
exit $status
