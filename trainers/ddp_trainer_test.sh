#!/usr/bin/env bash
# ddp_trainer: bad flags exit with 2 and the usage; 2 local ranks train on
# synthetic data, evaluate each of 1001 test examples once, trace every
# bucket all-reduce on both ranks, and resume from a mid-epoch checkpoint;
# the recipes' flags: --uneven_shards (ranks of 129 and 128 examples take 3
# and 2 steps an epoch and end with the same parameters), --sync_bn,
# --freeze, --clip_grad_norm, --zero, --comm_hook=powersgd,
# --local_sgd_period, --grad_accum_steps with --log_every's breakdown, and
# the combinations PyTorch (or lockstep) refuses.
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

small=(--nproc=2 --dataset=synthetic --synthetic_train_size=257 --synthetic_test_size=64 --batch_size=64
       --epochs=2 --num_workers=0)
"$bin" "${small[@]}" --uneven_shards >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "final test accuracy .* 6 steps" "$tmp/out"'
check 'grep -q "rank 0: 6 steps, the last epoch shadowed 0 steps" "$tmp/out" && grep -q "rank 1: 4 steps, the last epoch shadowed 1 steps" "$tmp/out"'
check '[[ $(grep -o "parameter sum .*" "$tmp/out" | sort -u | wc -l) -eq 1 ]]'
"$bin" "${small[@]}" --model=cnn --sync_bn --epochs=1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "SyncBatchNorm: 2 BatchNorm layers synchronized" "$tmp/out" && grep -q "final test accuracy" "$tmp/out"'
# Autocast on the CNN: bf16 convolutions (oneDNN), SyncBatchNorm on bf16
# activations, bf16 Linear layers.
"$bin" "${small[@]}" --model=cnn --sync_bn --amp=bf16 --epochs=1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "precision bf16" "$tmp/out" && grep -q "bf16 operands with f32 accumulation" "$tmp/out" && grep -q "final test accuracy" "$tmp/out"'
"$bin" "${small[@]}" --freeze=1 --clip_grad_norm=0.5 --amp=fp16 --uneven_shards >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "final test accuracy" "$tmp/out"'
check '[[ $(grep -o "parameter sum .*" "$tmp/out" | sort -u | wc -l) -eq 1 ]]'
"$bin" "${small[@]}" --model=mlp:784,64,32,10 --epochs=1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "model mlp:784,64,32,10 (52650 parameters)" "$tmp/out" && grep -q "bytes sent to the other ranks" "$tmp/out"'
# Refused, with the reason and the usage (exit 2).
"$bin" "${small[@]}" --sync_bn >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "has no BatchNorm layer" "$tmp/out" && grep -q "usage: ddp_trainer" "$tmp/out"'
"$bin" "${small[@]}" --model=cnn --sync_bn --uneven_shards >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "cannot shadow" "$tmp/out"'
"$bin" "${small[@]}" --uneven_shards --checkpoint_every=2 --checkpoint_dir="$tmp/c2" >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "drop --checkpoint_every" "$tmp/out"'
"$bin" "${small[@]}" --freeze=9 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "its parameters are: 1.weight, 1.bias" "$tmp/out"'
"$bin" "${small[@]}" --freeze=1,3,5 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "nothing would train" "$tmp/out"'
"$bin" "${small[@]}" --clip_grad_norm=-1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "clip_grad_norm" "$tmp/out"'
# Part 2 of the recipes: ZeRO, PowerSGD, post-local SGD.
"$bin" "${small[@]}" --zero --optimizer=adam --lr=0.001 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "rank 0: ZeRO: 1 of 6 parameters" "$tmp/out" && grep -q "rank 1: ZeRO: 5 of 6 parameters" "$tmp/out"'
"$bin" "${small[@]}" --comm_hook=powersgd --powersgd_rank=2 --powersgd_start_iter=3 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "PowerSGD: .* compressed to" "$tmp/out" && grep -q "final test accuracy" "$tmp/out"'
"$bin" "${small[@]}" --comm_hook=batched_powersgd --powersgd_rank=2 --powersgd_start_iter=3 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "PowerSGD: .* compressed to" "$tmp/out"'
"$bin" "${small[@]}" --local_sgd_period=2 --local_sgd_start_iter=2 --local_sgd_group_size=1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "post-local SGD from iteration 2: gradients averaged in groups of 1 ranks" "$tmp/out"'
"$bin" "${small[@]}" --comm_hook=powersgd --powersgd_start_iter=1 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "Expect .start_powerSGD_iter. > 1" "$tmp/out"'
"$bin" "${small[@]}" --powersgd_rank=4 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "need --comm_hook=powersgd" "$tmp/out"'
"$bin" "${small[@]}" --local_sgd_period=2 --comm_hook=fp16_compress >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "post-local SGD is DDP.s comm hook itself" "$tmp/out"'
"$bin" "${small[@]}" --local_sgd_period=2 --local_sgd_group_size=3 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -ne 0 ]] && grep -q "must be divisible by .group_size." "$tmp/out"'
"$bin" "${small[@]}" --zero --uneven_shards >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "shadow ZeRO" "$tmp/out"'
# Gradient accumulation (--grad_accum_steps): 129 examples a rank in
# micro-batches of 64 is 3 micro-batches an epoch, one step of 2 and one of
# 1; step lines with the breakdown every step (--log_every), and the last
# line the breakdown with its exposed communication.
"$bin" "${small[@]}" --grad_accum_steps=2 --log_every=1 --metrics="$tmp/accum.jsonl" >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 0 ]] && grep -q "final test accuracy .* 4 steps" "$tmp/out"'
check 'grep -q "^step 1  loss .* samples/s  data wait [0-9]* %  forward [0-9]* %  backward [0-9]* %  exposed communication [0-9]* %  optimizer [0-9]* %  [0-9]* bytes sent per sample" "$tmp/out"'
check '[[ $(tail -n 1 "$tmp/out" | grep -c "ddp_trainer: step time: .*exposed communication [0-9]* %.*bytes sent per sample; .*-bound") -eq 1 ]]'
check '[[ $(grep -c "\"event\":\"step\"" "$tmp/accum.jsonl") -eq 4 ]] && grep -q "\"exposed_comm_s\"" "$tmp/accum.jsonl" && grep -q "\"grad_accum_steps\":2" "$tmp/accum.jsonl"'
"$bin" "${small[@]}" --grad_accum_steps=0 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "grad_accum_steps=0: must be at least 1" "$tmp/out"'
"$bin" "${small[@]}" --grad_accum_steps=2 --uneven_shards >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "uneven_shards with --grad_accum_steps" "$tmp/out"'
# --fsdp with what it cannot combine: refused before any rank starts.
"$bin" "${small[@]}" --fsdp --zero >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--fsdp with --zero" "$tmp/out" && grep -q "usage: ddp_trainer" "$tmp/out"'
"$bin" "${small[@]}" --fsdp --amp=fp16 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q "ShardedGradScaler" "$tmp/out"'
"$bin" "${small[@]}" --fsdp_units=1,3 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--fsdp_units needs --fsdp" "$tmp/out"'
"$bin" "${small[@]}" --fsdp --fsdp_units=2 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -ne 0 ]] && grep -q "bad units: .2. has no parameters" "$tmp/out"'
# --fault_tolerant with what it cannot honour: refused before any rank starts.
"$bin" "${small[@]}" --fault_tolerant --checkpoint_dir="$tmp/ft" --metrics="$tmp/m.jsonl" >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--fault_tolerant: --checkpoint_dir, --metrics cannot be honoured" "$tmp/out" && grep -q "usage: ddp_trainer" "$tmp/out"'
"$bin" "${small[@]}" --fault_tolerant --zero >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--fault_tolerant with --zero" "$tmp/out"'
"$bin" "${small[@]}" --ft_log_dir="$tmp" >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--ft_log_dir needs --fault_tolerant" "$tmp/out"'
"$bin" "${small[@]}" --fault_tolerant --ft_admit_every=0 >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 2 ]] && grep -q -- "--ft_admit_every must be at least 1" "$tmp/out"'
# The launcher's variables of a fault-tolerant rank, malformed: named before
# anything connects (no store is reached: MASTER_PORT 1 is never listened on).
rank_env=(RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1)
env "${rank_env[@]}" LOCKSTEP_ELASTIC_MEMBER=three timeout 60 "$bin" "${small[@]}" --fault_tolerant >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 1 ]] && grep -q "LOCKSTEP_ELASTIC_MEMBER=.three. is not a member id" "$tmp/out"'
env "${rank_env[@]}" LOCKSTEP_FT_KILL=explode@3:1 timeout 60 "$bin" "${small[@]}" --fault_tolerant >"$tmp/out" 2>&1; rc=$?
check '[[ $rc -eq 1 ]] && grep -q "LOCKSTEP_FT_KILL: .explode@3:1. is not" "$tmp/out"'
"$bin" --help >"$tmp/out" 2>&1
check 'grep -q -- "--uneven_shards  --sync_bn  --zero" "$tmp/out" && grep -q -- "--freeze=NAME" "$tmp/out" && grep -q -- "--local_sgd_period=N" "$tmp/out"'

[[ $fail -eq 0 ]] && echo "PASS"
exit $fail
