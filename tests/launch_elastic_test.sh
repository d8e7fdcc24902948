#!/usr/bin/env bash
# Elastic restart with lockstep-run: 2 agents on this machine (--nnodes 2,
# --node_rank 0/1, static rendezvous at 127.0.0.1), 1 DDP-trainer worker each,
# checkpoints every 20 steps, workers started with --resume (a fresh start
# when there is no checkpoint yet, so every attempt runs the same command).
#  a. --max_restarts 2: SIGKILL rank 1 once a checkpoint exists; the group
#     restarts, rank 0 resumes from the checkpoint and the run ends with a
#     final checkpoint (model + optimizer) byte-identical (cmp) to an
#     uninterrupted run of the same configuration.
#  b. --max_restarts 0: the same kill; both agents exit non-zero and both
#     print the failure summary naming rank 1 and its signal.
#  c. --max_restarts 1, SIGKILL agent 1: its worker does not survive it;
#     agent 0 stops its own worker and exits non-zero with an error within
#     the configured rendezvous timeout instead of waiting for ever, and its
#     failure summary names agent 1 (node rank 1) as the (likely) cause.
# Every process is bounded (timeout) and killed at exit whatever happens.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "the launch tests (exclusive use of the machine's ports)"
launcher="$runfiles/tools/launch/lockstep-run"
trainer="$runfiles/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/launch_elastic_test"
rm -rf "$tmp" && mkdir -p "$tmp"
agents=()
cleanup() {
  [[ ${#agents[@]} -gt 0 ]] && lib_kill_all "${agents[@]}"
  # Workers that outlived their agent (a defect the checks report) still go.
  local p
  for p in $(lib_pids_of "$tmp" "$trainer"); do kill -9 "$p" 2>/dev/null; done
}
trap cleanup EXIT

final=step-0000000512.safetensors  # 8192 examples / 2 ranks / batch 32 = 128 steps x 4 epochs
# start_pair NAME MAX_RESTARTS [EXTRA LAUNCHER FLAGS...]: two agents in the
# background, logs NAME.<node>.log. agents[0], agents[1] are subshells that
# run `timeout ... lockstep-run` and exit with its status (a subshell with
# stderr closed off, so that no shell reports "Killed" when (c) kills an agent;
# the agent's own output goes to its log).
start_pair() {
  local name=$1 restarts=$2; shift 2
  local port; port=$(lib_free_port) || exit 1
  mkdir -p "$tmp/$name"
  agents=()
  local node
  for node in 0 1; do
    { timeout -k 5 180 "$launcher" --nnodes 2 --nproc_per_node 1 --node_rank $node \
      --master_addr 127.0.0.1 --master_port "$port" --max_restarts "$restarts" --monitor_interval 0.1 "$@" \
      --no_python "$trainer" --dataset=synthetic --synthetic_train_size=8192 --synthetic_test_size=100 \
      --batch_size=32 --epochs=4 --num_workers=0 --checkpoint_every=20 --resume --timeout=30 \
      --checkpoint_dir="$tmp/$name/ckpt" --metrics="$tmp/$name/m.jsonl" >"$tmp/$name.$node.log" 2>&1
      exit $?; } 2>/dev/null &
    agents+=($!)
  done
}
# wait_pair: rc0, rc1 = the agents' exit codes.
wait_pair() { wait "${agents[0]}"; rc0=$?; wait "${agents[1]}"; rc1=$?; agents=(); }
has_checkpoint() { compgen -G "$1/step-*.safetensors" >/dev/null; }
# worker_of NAME RANK: the pid of the trainer with that RANK in run NAME.
worker_of() {
  local p
  for p in $(lib_pids_of "$tmp/$1/ckpt" "$trainer"); do
    [[ $(lib_env_of "$p" RANK) == "$2" ]] && { echo "$p"; return 0; }
  done
  return 1
}
# kill_worker_after_checkpoint NAME RANK: SIGKILLs that worker once run NAME
# has a checkpoint; says which step the newest one was.
kill_worker_after_checkpoint() {
  lib_wait_for 60 "$1: a first checkpoint" has_checkpoint "$tmp/$1/ckpt" || return 1
  local pid; pid=$(worker_of "$1" "$2") || { echo "FAIL: $1: no worker with RANK=$2 running"; return 1; }
  kill -9 "$pid"
  echo "$1: killed rank $2 (pid $pid) after $(ls "$tmp/$1/ckpt" | grep -o 'step-[0-9]*' | tail -1)"
}

# a. Uninterrupted reference, then the same run with rank 1 killed once.
start_pair base 2
wait_pair
lib_check '[[ $rc0 -eq 0 && $rc1 -eq 0 ]]' "$tmp/base.0.log" "$tmp/base.1.log" || echo "base: agents exited with $rc0 and $rc1"
lib_check '[[ -f "$tmp/base/ckpt/$final" ]]' "$tmp/base.0.log"

start_pair restart 2
kill_worker_after_checkpoint restart 1 || fail=1
wait_pair
lib_check '[[ $rc0 -eq 0 && $rc1 -eq 0 ]]' "$tmp/restart.0.log" "$tmp/restart.1.log" ||
  echo "restart: agents exited with $rc0 and $rc1 (124: timed out after 180 s)"
# Rank 0 of the second attempt resumed from a checkpoint before the end.
resumed=$(grep -E "^\[0\]: ?.*resumed from " "$tmp/restart.0.log" | grep -Eo "step-[0-9]+" | head -1)
resumed=${resumed#step-}; resumed=$(( 10#${resumed:-0} ))
lib_check '(( resumed > 0 && resumed < 512 ))' "$tmp/restart.0.log"
lib_check 'grep -Eq "^\[0\]: ?ddp_trainer: final test accuracy .* over 2 ranks, 512 steps" "$tmp/restart.0.log"' "$tmp/restart.0.log"
lib_check 'cmp "$tmp/base/ckpt/$final" "$tmp/restart/ckpt/$final"' "$tmp/restart.0.log"
[[ $fail -eq 0 ]] && echo "ok: a. restarted after SIGKILL of rank 1, $(grep -o 'resumed from [^ ]*' "$tmp/restart.0.log" | head -1), final parameters identical"

# b. No restarts left: every agent fails and says who failed first.
fail_before=$fail
start_pair norestart 0
kill_worker_after_checkpoint norestart 1 || fail=1
wait_pair
lib_check '[[ $rc0 -ne 0 && $rc0 -ne 124 && $rc1 -ne 0 && $rc1 -ne 124 ]]' "$tmp/norestart.0.log" "$tmp/norestart.1.log" ||
  echo "norestart: agents exited with $rc0 and $rc1 (want non-zero, not the 124 of a timeout)"
for node in 0 1; do
  f="$tmp/norestart.$node.log"
  # The summary: the first failed rank (1, not rank 0 that failed after it)
  # and how it ended.
  lib_check 'grep -Eq "^\[lockstep-run\] FAILED \(.*\b0 of 0\)" "$f"' "$f"  # restarts used: 0 of 0
  lib_check 'grep -Eq "first failure: rank 1 \(local_rank 0, node rank 1\)" "$f" && grep -q "killed by signal 9" "$f"' "$f"
done
lib_check 'lib_wait_for 10 "norestart: no worker left" test -z "$(lib_pids_of "$tmp/norestart/" "$trainer")"'
[[ $fail -eq $fail_before ]] && echo "ok: b. --max_restarts 0: both agents exited non-zero ($rc0, $rc1) with the summary"

# c. An agent dies: nothing of it survives, and the other gives up in time.
fail_before=$fail
join_timeout=20 heartbeat_timeout=10
start_pair agentkill 1 --rdzv_conf "join_timeout=$join_timeout,heartbeat_timeout=$heartbeat_timeout"
lib_wait_for 60 "agentkill: a first checkpoint" has_checkpoint "$tmp/agentkill/ckpt" || fail=1
agent1=$(for p in $(lib_descendants "${agents[1]}"); do
  [[ "$(readlink -f "/proc/$p/exe")" == "$(readlink -f "$launcher")" ]] && echo "$p"; done | head -1)
w1=$(worker_of agentkill 1); w0=$(worker_of agentkill 0)
lib_check '[[ -n "$agent1" && -n "$w1" && -n "$w0" ]]' "$tmp/agentkill.1.log"
kill -9 "$agent1"
lib_check 'lib_wait_for 10 "agentkill: the killed agent'"'"'s worker (pid $w1) to die" lib_dead "$w1"' "$tmp/agentkill.1.log"
# Agent 0 must exit within the configured timeouts (the lost agent's
# heartbeat, the join window of a new attempt) plus a margin for the
# trainer's failure and the stop grace period: poll its exit against that.
lib_check 'lib_wait_for $(( join_timeout + heartbeat_timeout + 30 )) "agentkill: agent 0 to exit" lib_dead "${agents[0]}"' "$tmp/agentkill.0.log"
wait "${agents[0]}"; rc0=$?
wait "${agents[1]}"
agents=()
lib_check '[[ $rc0 -ne 0 && $rc0 -ne 124 ]]' "$tmp/agentkill.0.log" || echo "agentkill: agent 0 exited with $rc0"
lib_check 'lib_dead "$w0" && test -z "$(lib_pids_of "$tmp/agentkill/" "$trainer")"' "$tmp/agentkill.0.log"
# The error names node rank 1: missing from the new attempt's rendezvous,
# or lost (no heartbeat) while the workers still ran.
lost_node='missing node ranks?:? 1\b|agent of node rank 1\b'
lib_check 'grep -Eq "$lost_node" "$tmp/agentkill.0.log"' "$tmp/agentkill.0.log"
# Whichever way agent 0 ends, it prints the summary, and the summary names
# the lost agent: as the likely cause of its own worker's failure (that
# worker's peer vanished), or as the first failure itself.
lib_check 'grep -q "^\[lockstep-run\] FAILED (" "$tmp/agentkill.0.log"' "$tmp/agentkill.0.log"
lib_check 'grep -Eq "(likely cause|first failure): the agent of node rank 1\b" "$tmp/agentkill.0.log"' "$tmp/agentkill.0.log"
[[ $fail -eq $fail_before ]] && echo "ok: c. agent 1 SIGKILLed: its worker died; agent 0 exited with $rc0: $(grep -E "$lost_node" "$tmp/agentkill.0.log" | tail -1)"
lib_finish
