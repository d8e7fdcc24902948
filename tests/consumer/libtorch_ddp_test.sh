#!/usr/bin/env bash
# The README's libtorch examples on 2 ranks under lockstep-run: both ranks end
# with the same model, and the loss on a held-out batch fell (one training
# batch's loss goes up now and then: the earlier check of it was flaky).
set -euo pipefail
dir="$TEST_SRCDIR/$TEST_WORKSPACE"
run=$(find -L "$TEST_SRCDIR" -path '*tools/launch/lockstep-run' -type f | head -1)
# The program: libtorch_ddp, or the one named (libtorch_fsdp).
out=$("$run" --standalone --nproc_per_node 2 "$dir/${1:-libtorch_ddp}" 2>&1)
echo "$out"
sums=$(echo "$out" | grep -o 'checksum .*' | sort -u | wc -l)
[[ $(echo "$out" | grep -c 'checksum') -eq 2 && $sums -eq 1 ]] || { echo "the ranks' models differ"; exit 1; }
# On a held-out batch (one training batch's loss goes up now and then).
read -r first last < <(echo "$out" | sed -nE 's/.*rank 0 held-out loss ([0-9.]+) -> ([0-9.]+).*/\1 \2/p')
[[ -n ${first:-} && -n ${last:-} ]] || { echo "no held-out loss from rank 0"; exit 1; }
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' || { echo "held-out loss did not fall: $first -> $last"; exit 1; }
echo ok
