#!/usr/bin/env bash
# The README's libtorch example on 2 ranks under lockstep-run: both ranks end
# with the same model, and the loss fell.
set -euo pipefail
dir="$TEST_SRCDIR/$TEST_WORKSPACE"
run=$(find -L "$TEST_SRCDIR" -path '*tools/launch/lockstep-run' -type f | head -1)
out=$("$run" --standalone --nproc_per_node 2 "$dir/libtorch_ddp" 2>&1)
echo "$out"
sums=$(echo "$out" | grep -o 'checksum .*' | sort -u | wc -l)
[[ $(echo "$out" | grep -c 'checksum') -eq 2 && $sums -eq 1 ]] || { echo "the ranks' models differ"; exit 1; }
first=$(echo "$out" | grep 'rank 0 step 0 loss' | awk '{print $NF}')
last=$(echo "$out" | grep 'rank 0 step 19 loss' | awk '{print $NF}')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "loss did not fall: $first -> $last"; exit 1; }
echo ok
