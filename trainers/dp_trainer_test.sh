#!/usr/bin/env bash
# dp_trainer's command line: bad --devices exit with 2 and the usage; a tiny
# synthetic run on cpu:0,cpu:1 trains, writes metrics, a trace with DP's
# phases and a checkpoint, and resumes from it.
set -uo pipefail
bin="${TEST_SRCDIR}/${TEST_WORKSPACE}/trainers/dp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/dp_trainer_test"
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0

expect_usage_error() {  # expect_usage_error "what it must say" args...
  local want="$1"; shift
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: $* exited $rc, want 2"; cat "$tmp/err"; fail=1; return; fi
  if ! grep -q -- "$want" "$tmp/err"; then echo "FAIL: $*: stderr lacks '$want'"; cat "$tmp/err"; fail=1; fi
  if ! grep -q "usage: dp_trainer" "$tmp/err"; then echo "FAIL: $*: no usage"; fail=1; fi
}

expect_usage_error "unknown flag --bogus" --bogus=1
expect_usage_error "--devices=gpu:0" --devices=gpu:0
expect_usage_error "--devices=cpu:0,: " --devices=cpu:0,
expect_usage_error "cpu:1 is listed twice" --devices=cpu:0,cpu:1,cpu:1
expect_usage_error "--epochs must be at least 1" --epochs=0

small=(--devices=cpu:0,cpu:1 --dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64
       --batch_size=32 --num_workers=1 --epochs=2 --checkpoint_dir="$tmp/ckpt" --metrics="$tmp/m.jsonl"
       --trace="$tmp/trace")
if ! "$bin" "${small[@]}" --max_steps=5 >"$tmp/out" 2>&1; then echo "FAIL: stopped run"; cat "$tmp/out"; fail=1; fi
grep -q "devices cpu:0,cpu:1" "$tmp/out" || { echo "FAIL: no devices line"; cat "$tmp/out"; fail=1; }
grep -q "stopped at --max_steps=5" "$tmp/out" || { echo "FAIL: no stop line"; cat "$tmp/out"; fail=1; }
if ! "$bin" "${small[@]}" --resume >"$tmp/out" 2>&1; then echo "FAIL: resumed run"; cat "$tmp/out"; fail=1; fi
grep -q "resumed from .*step-0000000005.safetensors" "$tmp/out" || { echo "FAIL: did not resume"; cat "$tmp/out"; fail=1; }
grep -q "final test accuracy .* on 2 devices" "$tmp/out" || { echo "FAIL: no final line"; cat "$tmp/out"; fail=1; }
[[ $(grep -c '"event":"epoch"' "$tmp/m.jsonl") -eq 2 ]] || { echo "FAIL: metrics"; cat "$tmp/m.jsonl"; fail=1; }
if ! "$bin" "${small[@]}" --checkpoint_dir="$tmp/frozen" --freeze=1 --clip_grad_norm=1 --epochs=1 >"$tmp/out" 2>&1; then
  echo "FAIL: --freeze/--clip_grad_norm run"; cat "$tmp/out"; fail=1
fi
for phase in "dp scatter" "dp replicate" "dp apply" "dp gather" "dp scatter grad" "dp apply backward" "dp reduce"; do
  grep -q "\"name\":\"$phase\"" "$tmp/trace/trace_rank0.json" || { echo "FAIL: trace lacks $phase"; fail=1; }
done

[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
