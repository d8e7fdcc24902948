#!/usr/bin/env bash
# single_trainer's command line: bad flags exit with 2 and the usage; a tiny
# synthetic run trains, writes metrics, a trace and a checkpoint, and resumes.
set -uo pipefail
bin="${TEST_SRCDIR}/${TEST_WORKSPACE}/trainers/single_trainer"
tmp="${TEST_TMPDIR:-/tmp}/single_trainer_test"
rm -rf "$tmp" && mkdir -p "$tmp"
fail=0

expect_usage_error() {  # expect_usage_error "what it must say" args...
  local want="$1"; shift
  "$bin" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 ]]; then echo "FAIL: $* exited $rc, want 2"; cat "$tmp/err"; fail=1; return; fi
  if ! grep -q -- "$want" "$tmp/err"; then echo "FAIL: $*: stderr lacks '$want'"; cat "$tmp/err"; fail=1; fi
  if ! grep -q "usage: single_trainer" "$tmp/err"; then echo "FAIL: $*: no usage"; fail=1; fi
}

expect_usage_error "unknown flag --bogus" --bogus=1
expect_usage_error "--epochs=abc" --epochs=abc
expect_usage_error "expected sgd, adam or adamw" --optimizer=rmsprop
expect_usage_error "expected off, fp16 or bf16" --amp=fp8
expect_usage_error "expected mlp, mlp:784,...,10 or cnn" --model=resnet
expect_usage_error "starts at 784 inputs and ends at 10 classes" --model=mlp:784,100,5
expect_usage_error "is not a layer size" --model=mlp:784,x,10
expect_usage_error "--epochs must be at least 1" --epochs=0
expect_usage_error "expected cpu or cuda" --device=tpu
expect_usage_error "--resume needs --checkpoint_dir" --resume
expect_usage_error "unexpected argument" extra
expect_usage_error "/no/such/dir is not a directory" --dataset=/no/such/dir

small=(--dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64 --batch_size=32
       --num_workers=1 --epochs=2 --checkpoint_dir="$tmp/ckpt" --metrics="$tmp/m.jsonl" --trace="$tmp/trace")
if ! "$bin" "${small[@]}" --max_steps=5 >"$tmp/out" 2>&1; then echo "FAIL: stopped run"; cat "$tmp/out"; fail=1; fi
grep -q "stopped at --max_steps=5" "$tmp/out" || { echo "FAIL: no stop line"; cat "$tmp/out"; fail=1; }
if ! "$bin" "${small[@]}" --resume >"$tmp/out" 2>&1; then echo "FAIL: resumed run"; cat "$tmp/out"; fail=1; fi
grep -q "resumed from .*step-0000000005.safetensors" "$tmp/out" || { echo "FAIL: did not resume"; cat "$tmp/out"; fail=1; }
grep -q "final test accuracy" "$tmp/out" || { echo "FAIL: no final line"; cat "$tmp/out"; fail=1; }
[[ $(grep -c '"event":"epoch"' "$tmp/m.jsonl") -eq 2 ]] || { echo "FAIL: metrics"; cat "$tmp/m.jsonl"; fail=1; }
grep -q '"name":"forward"' "$tmp/trace/trace_rank0.json" || { echo "FAIL: trace"; fail=1; }
# A frozen first layer and clipped gradients train (frozen parameters'
# behaviour is tested in nn and ddp; here the flags reach the loop).
rm -rf "$tmp/frozen"
if ! "$bin" "${small[@]}" --checkpoint_dir="$tmp/frozen" --freeze=1 --clip_grad_norm=1 >"$tmp/out" 2>&1; then
  echo "FAIL: --freeze/--clip_grad_norm run"; cat "$tmp/out"; fail=1
fi
grep -q "final test accuracy" "$tmp/out" || { echo "FAIL: no final line with --freeze"; cat "$tmp/out"; fail=1; }
expect_usage_error "no parameter of this Sequential is named '7'" --freeze=7
expect_usage_error "clip_grad_norm" --clip_grad_norm=nan

[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
