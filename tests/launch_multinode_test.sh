#!/usr/bin/env bash
# Two "nodes" as network namespaces joined by a veth pair (each its own
# address), one lockstep-run agent in each, 2 workers per node:
#  1. static rendezvous (--node_rank 0/1, --master_addr = node 0's address):
#     an env-recording worker (tests/testdata/env_worker.sh) checks torchrun's
#     variables on every worker and the rank layout node 0 -> ranks 0,1,
#     node 1 -> ranks 2,3 (each worker records its namespace's address);
#     output lines come back prefixed "[rank]:".
#  2. c10d rendezvous (--rdzv_endpoint), rank 3 failing in the first attempt
#     (--max_restarts 1): the group re-forms and every worker of attempt 1 has
#     the same variables with TORCHELASTIC_RESTART_COUNT=1; group ranks are
#     handed out by the rendezvous, so the layout is checked as ranks
#     {2g, 2g+1} on the node with GROUP_RANK g, MASTER_ADDR on group rank 0's.
#  3. 2 x 2 workers of the DDP trainer train to completion across the nodes.
# Needs root (ip netns); namespaces and processes are removed whatever happens.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "ip netns"
launcher="$runfiles/tools/launch/lockstep-run"
worker="$runfiles/tests/testdata/env_worker.sh"
trainer="$runfiles/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/launch_multinode_test"
rm -rf "$tmp" && mkdir -p "$tmp"
lib_netns_for_agents

# run_pair NAME [LAUNCHER FLAGS...] -- PROGRAM...: one agent per namespace
# (node_rank 0 in a, 1 in b), both bounded by 120 s; sets rc0 and rc1.
run_pair() {
  local name=$1; shift
  local flags=() prog=()
  while [[ $1 != -- ]]; do flags+=("$1"); shift; done
  shift; prog=("$@")
  agents=()
  lib_in_ns "$ns_a" timeout -k 5 120 "$launcher" --node_rank 0 "${flags[@]}" "${prog[@]}" >"$tmp/$name.0.log" 2>&1 &
  agents+=($!)
  lib_in_ns "$ns_b" timeout -k 5 120 "$launcher" --node_rank 1 "${flags[@]}" "${prog[@]}" >"$tmp/$name.1.log" 2>&1 &
  agents+=($!)
  wait "${agents[0]}"; rc0=$?
  wait "${agents[1]}"; rc1=$?
  agents=()
  lib_check '[[ $rc0 -eq 0 && $rc1 -eq 0 ]]' "$tmp/$name.0.log" "$tmp/$name.1.log" ||
    echo "$name: agents exited with $rc0 and $rc1 (124: timed out after 120 s)"
}

# var FILE NAME: the value recorded by env_worker.sh.
var() { sed -n "s/^$2=//p" "$1"; }

# node_of FILE: "a" or "b", the namespace whose address the worker saw.
node_of() {
  local addrs=" $(var "$1" ADDRS 2>/dev/null) "
  if [[ $addrs == *" $ip_a/24 "* ]]; then echo a; elif [[ $addrs == *" $ip_b/24 "* ]]; then echo b; else echo none; fi
}

# check_env DIR RDZV_PORT RUN_ID MASTER_ADDR RESTART_COUNT: every worker's variables.
check_env() {
  local d=$1 rdzv_port=$2 run_id=$3 master=$4 restart=$5 r
  local logs=("$d.0.log" "$d.1.log")
  for r in 0 1 2 3; do
    local f="$d/env.$r"
    lib_check '[[ -f "$f" ]]' "${logs[@]}" || continue
    lib_check '[[ $(var "$f" RANK) == '$r' && $(var "$f" LOCAL_RANK) == $(( '$r' % 2 )) ]]' "$f"
    lib_check '[[ $(var "$f" WORLD_SIZE) == 4 && $(var "$f" LOCAL_WORLD_SIZE) == 2 ]]' "$f"
    lib_check '[[ $(var "$f" GROUP_RANK) == $(( '$r' / 2 )) && $(var "$f" GROUP_WORLD_SIZE) == 2 ]]' "$f"
    lib_check '[[ $(var "$f" ROLE_RANK) == '$r' && $(var "$f" ROLE_NAME) == default && $(var "$f" ROLE_WORLD_SIZE) == 4 ]]' "$f"
    lib_check '[[ $(var "$f" TORCHELASTIC_RESTART_COUNT) == "$restart" && $(var "$f" TORCHELASTIC_MAX_RESTARTS) == 1 ]]' "$f"
    lib_check '[[ $(var "$f" TORCHELASTIC_RUN_ID) == "$run_id" ]]' "$f"
    # Workers make their own store at MASTER_ADDR:MASTER_PORT: not the agents'.
    lib_check '[[ $(var "$f" TORCHELASTIC_USE_AGENT_STORE) == "<unset>" ]]' "$f"
    lib_check '[[ $(var "$f" OMP_NUM_THREADS) == 1 ]]' "$f"
    lib_check '[[ $(var "$f" MASTER_PORT) =~ ^[0-9]+$ && $(var "$f" MASTER_PORT) != "$rdzv_port" ]]' "$f"
    lib_check '[[ $(var "$f" MASTER_PORT) == $(var "$d/env.0" MASTER_PORT) ]]' "$f" "$d/env.0"
    # MASTER_ADDR: the address of the node that holds rank 0.
    lib_check '[[ $(var "$f" MASTER_ADDR) == "$master" ]]' "$f"
  done
  # Layout: ranks 0,1 on one node, 2,3 on the other (which one: the caller checks).
  lib_check '[[ $(node_of "$d/env.0") == $(node_of "$d/env.1") && $(node_of "$d/env.2") == $(node_of "$d/env.3") && $(node_of "$d/env.0") != $(node_of "$d/env.2") ]]' "$d"/env.*
}

# 1. Static rendezvous.
port=$(lib_free_port) || exit 1
mkdir -p "$tmp/static"
run_pair static --nnodes 2 --nproc_per_node 2 --master_addr "$ip_a" --master_port "$port" \
  --rdzv_backend static --rdzv_id envtest --max_restarts 1 --monitor_interval 0.1 \
  -- --no_python /bin/sh "$worker" "$tmp/static"
check_env "$tmp/static" "$port" envtest "$ip_a" 0
lib_check '[[ $(node_of "$tmp/static/env.0") == a ]]' "$tmp/static/env.0"  # node_rank 0 -> ranks 0,1
for r in 0 1 2 3; do
  node=$(( r / 2 ))
  lib_check 'grep -Eq "^\['$r'\]: ?env_worker stdout rank='$r'$" "$tmp/static.'$node'.log"' "$tmp/static.$node.log"
  lib_check 'grep -Eq "^\['$r'\]: ?env_worker stderr rank='$r'$" "$tmp/static.'$node'.log"' "$tmp/static.$node.log"
done
[[ $fail -eq 0 ]] && echo "ok: static rendezvous, 2 nodes x 2 workers, environment and layout"

# 2. c10d rendezvous at node a's address. Which node gets group rank 0 is the
# rendezvous' choice; MASTER_ADDR must be that node's address. Rank 3 fails in
# the first attempt, so what is checked is the re-formed group of attempt 1
# (TORCHELASTIC_RESTART_COUNT=1 on every worker).
port=$(lib_free_port) || exit 1
mkdir -p "$tmp/c10d"
fail_before=$fail
run_pair c10d --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint "$ip_a:$port" \
  --rdzv_id envc10d --max_restarts 1 --monitor_interval 0.1 \
  -- --no_python /bin/sh "$worker" "$tmp/c10d" 3
rank0_addr=$ip_a
[[ -f "$tmp/c10d/env.0" && $(node_of "$tmp/c10d/env.0") == b ]] && rank0_addr=$ip_b
check_env "$tmp/c10d" "$port" envc10d "$rank0_addr" 1
lib_check 'grep -q "env_worker rank=3 fails on purpose in attempt 0" "$tmp"/c10d.[01].log' "$tmp"/c10d.[01].log
[[ $fail -eq $fail_before ]] && echo "ok: c10d rendezvous, 2 nodes x 2 workers, restarted once after rank 3 failed: environment and layout"

# 3. The DDP trainer, 2 x 2 workers across the namespaces.
port=$(lib_free_port) || exit 1
mkdir -p "$tmp/ddp"
fail_before=$fail
run_pair ddp --nnodes 2 --nproc_per_node 2 --master_addr "$ip_a" --master_port "$port" \
  --max_restarts 0 --monitor_interval 0.1 \
  -- --no_python "$trainer" --dataset=synthetic --synthetic_train_size=512 --synthetic_test_size=100 \
  --batch_size=32 --epochs=2 --num_workers=0 --timeout=60 \
  --metrics="$tmp/ddp/m.jsonl" --trace="$tmp/ddp/trace"
lib_check 'grep -Eq "^\[0\]: ?ddp_trainer: 4 ranks \(torchrun\)" "$tmp/ddp.0.log"' "$tmp/ddp.0.log"
lib_check 'grep -Eq "^\[0\]: ?ddp_trainer: final test accuracy .* over 4 ranks, 8 steps" "$tmp/ddp.0.log"' "$tmp/ddp.0.log"
lib_check '[[ $(grep -c "\"world_size\":4,.*\"train_examples\":512,.*\"test_examples\":100," "$tmp/ddp/m.jsonl") -eq 2 ]]' "$tmp/ddp/m.jsonl"
lib_check 'grep -q "\"peak_rss_bytes\":\[[0-9]*,[0-9]*,[0-9]*,[0-9]*\]" "$tmp/ddp/m.jsonl"' "$tmp/ddp/m.jsonl"
for r in 0 1 2 3; do
  lib_check 'grep -q "\"args\":{\"name\":\"rank '$r'\"}" "$tmp/ddp/trace/trace_rank'$r'.json"' "$tmp/ddp.0.log"
  lib_check 'grep -q "\"name\":\"allreduce bucket 0\"" "$tmp/ddp/trace/trace_rank'$r'.json"' "$tmp/ddp.0.log"
done
[[ $fail -eq $fail_before ]] && echo "ok: DDP trainer, 2 nodes x 2 workers: $(grep -o 'final test accuracy.*' "$tmp/ddp.0.log")"
lib_finish
