#!/usr/bin/env bash
# ddp_trainer: bad flags exit with 2 and the usage; 2 local ranks train on
# synthetic data, evaluate each of 1001 test examples once, trace every
# bucket all-reduce on both ranks, and resume from a mid-epoch checkpoint.
set -uo pipefail
bin="${TEST_SRCDIR}/${TEST_WORKSPACE}/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/ddp_trainer_test"
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $1"; cat "$tmp/out"; fail=1; fi; }

"$bin" --comm_hook=zip >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "comm_hook" "$tmp/out" && grep -q "usage: ddp_trainer" "$tmp/out"'
"$bin" --nproc=abc >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]]'

common=(--nproc=2 --dataset=synthetic --synthetic_train_size=1000 --synthetic_test_size=1001
        --batch_size=32 --epochs=2 --num_workers=1 --checkpoint_dir="$tmp/ckpt"
        --metrics="$tmp/m.jsonl" --trace="$tmp/trace")
"$bin" "${common[@]}" --max_steps=20 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "stopped at --max_steps=20" "$tmp/out"'
check 'grep -q "\"test_examples\":1001" "$tmp/m.jsonl"'
for r in 0 1; do
  check 'grep -q "\"name\":\"allreduce bucket" "$tmp/trace/trace_rank'$r'.json"'
done
"$bin" "${common[@]}" --resume >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "resumed from .*step-0000000020" "$tmp/out" && grep -q "final test accuracy" "$tmp/out"'
check '[[ $(grep -c "\"event\":\"epoch\"" "$tmp/m.jsonl") -eq 2 ]]'

[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
