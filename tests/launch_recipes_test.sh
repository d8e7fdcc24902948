#!/usr/bin/env bash
# The data-parallel recipes' trainer flags under lockstep-run
# (--nproc_per_node 2 --no_python ddp_trainer): --uneven_shards with
# --freeze and --clip_grad_norm (ranks of 257 examples' shares take
# different step counts, Join lets both finish, and both print the same
# parameter sum), --model=cnn --sync_bn, --zero with --comm_hook=powersgd,
# and --local_sgd_period; then the libtorch trainers (resnet18_trainer,
# char_transformer_trainer), small. Each run bounded (timeout).
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "the launch tests (exclusive use of the machine's ports)"
launcher="$runfiles/tools/launch/lockstep-run"
trainer="$runfiles/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/launch_recipes_test"
rm -rf "$tmp" && mkdir -p "$tmp"
agent=
cleanup() { [[ -n "$agent" ]] && lib_kill_all "$agent"; }
trap cleanup EXIT

# run NAME TRAINER_FLAGS...: one launch of 2 local workers; rc = its exit code.
run() {
  local name=$1 port
  shift
  port=$(lib_free_port) || exit 1
  timeout -k 5 120 "$launcher" --nproc_per_node 2 --master_port "$port" --max_restarts 0 --no_python "$trainer" \
    --dataset=synthetic --synthetic_train_size=257 --synthetic_test_size=64 --batch_size=64 --epochs=2 \
    --num_workers=0 --timeout=60 "$@" >"$tmp/$name.log" 2>&1 &
  agent=$!
  wait "$agent"; rc=$?
  agent=
}

run uneven --uneven_shards --freeze=1 --clip_grad_norm=1
lib_check '[[ $rc -eq 0 ]]' "$tmp/uneven.log"
lib_check 'grep -q "ddp_trainer: 2 ranks (torchrun)" "$tmp/uneven.log"' "$tmp/uneven.log"
lib_check 'grep -Eq "rank 0: 6 steps, the last epoch shadowed 0 steps" "$tmp/uneven.log"' "$tmp/uneven.log"
lib_check 'grep -Eq "rank 1: 4 steps, the last epoch shadowed 1 steps" "$tmp/uneven.log"' "$tmp/uneven.log"
lib_check '[[ $(grep -o "parameter sum .*" "$tmp/uneven.log" | sort -u | wc -l) -eq 1 ]]' "$tmp/uneven.log"

run syncbn --model=cnn --sync_bn --epochs=1
lib_check '[[ $rc -eq 0 ]]' "$tmp/syncbn.log"
lib_check 'grep -q "SyncBatchNorm: 2 BatchNorm layers synchronized" "$tmp/syncbn.log"' "$tmp/syncbn.log"
lib_check 'grep -q "final test accuracy" "$tmp/syncbn.log"' "$tmp/syncbn.log"
run part2 --zero --optimizer=adam --lr=0.001 --comm_hook=powersgd --powersgd_rank=2 --powersgd_start_iter=2
lib_check '[[ $rc -eq 0 ]]' "$tmp/part2.log"
lib_check 'grep -q "ZeRO: 1 of 6 parameters" "$tmp/part2.log" && grep -q "PowerSGD: .* compressed to" "$tmp/part2.log"' "$tmp/part2.log"

run localsgd --local_sgd_period=2 --local_sgd_start_iter=2 --local_sgd_group_size=1
lib_check '[[ $rc -eq 0 ]] && grep -q "post-local SGD from iteration 2" "$tmp/localsgd.log"' "$tmp/localsgd.log"

# The libtorch trainers (interop/torch/trainers), small, as lockstep-run's workers.
for t in resnet18 char_transformer; do
  port=$(lib_free_port) || exit 1
  if [[ $t == resnet18 ]]; then
    args=(--dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64 --batch_size=32 --width=8)
  else
    args=(--layers=1 --dim=32 --heads=2 --context=32 --batch_size=8 --max_steps=4 --sample_length=10)
  fi
  timeout -k 5 120 "$launcher" --nproc_per_node 2 --master_port "$port" --max_restarts 0 --no_python \
    "$runfiles/interop/torch/trainers/${t}_trainer" "${args[@]}" --num_workers=0 --timeout=60 >"$tmp/$t.log" 2>&1 &
  agent=$!
  wait "$agent"; rc=$?
  agent=
  lib_check '[[ $rc -eq 0 ]]' "$tmp/$t.log"
  lib_check 'grep -q "${t}_trainer: 2 ranks (torchrun)" "$tmp/$t.log"' "$tmp/$t.log"
  lib_check 'grep -q "${t}_trainer: final test loss .* over 2 ranks, 4 steps" "$tmp/$t.log"' "$tmp/$t.log"
done
lib_finish
