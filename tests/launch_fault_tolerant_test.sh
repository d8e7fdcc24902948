#!/usr/bin/env bash
# A lost node in a fault-tolerant job: two "nodes" as network namespaces
# joined by a veth pair, one `lockstep-run --fault_tolerant` agent in each,
# 2 workers of `ddp_trainer --fault_tolerant` per node (4 ranks). Once the
# group has committed step 30, node 1's agent is SIGKILLed: its workers die
# with it (parent-death signal), node 0's two workers re-form a group of 2
# and train to the end, and node 0's agent, which holds the workers' store,
# says the node was lost and ends the job successfully. Both survivors end
# with one parameter checksum. (Node 0's own loss ends the job: its agent
# holds the store; an etcd rendezvous does not change that for the workers'
# store, see README "Multi-node launch".)
# Needs root (ip netns); namespaces and processes are removed whatever happens.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "ip netns"
launcher="$runfiles/tools/launch/lockstep-run"
trainer="$runfiles/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/launch_fault_tolerant_test"
rm -rf "$tmp" && mkdir -p "$tmp/ftlog"
lib_netns_for_agents

port=$(lib_free_port) || exit 1
flags=(--nnodes 2 --nproc_per_node 2 --master_addr "$ip_a" --master_port "$port" --rdzv_backend static
  --rdzv_id ftnodes --fault_tolerant --max_restarts 1 --monitor_interval 0.1 --rdzv_conf heartbeat_timeout=2)
prog=(--no_python "$trainer" --fault_tolerant --ft_settle=1 --ft_log_dir="$tmp/ftlog" --dataset=synthetic
  --synthetic_train_size=6400 --synthetic_test_size=100 --batch_size=16 --epochs=1 --max_steps=160)
lib_in_ns "$ns_a" timeout -k 5 120 "$launcher" --node_rank 0 "${flags[@]}" "${prog[@]}" >"$tmp/node0.log" 2>&1 &
agents+=($!)
lib_in_ns "$ns_b" timeout -k 5 120 "$launcher" --node_rank 1 "${flags[@]}" "${prog[@]}" >"$tmp/node1.log" 2>&1 &
agents+=($!)
committed() { [[ -f "$tmp/ftlog/member-0.jsonl" && $(wc -l <"$tmp/ftlog/member-0.jsonl") -ge 30 ]]; }
lib_wait_for 60 "the group to commit step 30" committed || fail=1
# Node 1's agent (not its workers' guards, which are the same binary).
agent1=""
for p in $(lib_descendants "${agents[1]}"); do
  if [[ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" == "$(readlink -f "$launcher")" ]] &&
    ! tr '\0' ' ' <"/proc/$p/cmdline" | grep -q worker_guard; then
    agent1=$p
  fi
done
lib_check '[[ -n "$agent1" ]]' "$tmp/node1.log"
[[ -n "$agent1" ]] && kill -9 "$agent1"
wait "${agents[0]}"; rc0=$?
wait "${agents[1]}" 2>/dev/null
agents=()
lib_check '[[ $rc0 -eq 0 ]]' "$tmp/node0.log"
# Node 0's agent: the node lost, the job goes on and succeeds.
lib_check 'grep -q "sent no heartbeat for 2 s: its workers leave the group, which goes on without them" "$tmp/node0.log"' "$tmp/node0.log"
lib_check 'grep -q "every worker on every node succeeded" "$tmp/node0.log"' "$tmp/node0.log"
# The survivors re-formed as 2 of 4 ranks and ended with one checksum.
lib_check '[[ $(grep -c "group re-formed with 2 of 4 ranks" "$tmp/node0.log") -eq 2 ]]' "$tmp/node0.log"
sums=$(grep -Eo "rank [01]: parameter checksum [0-9a-f]{16}" "$tmp/node0.log" | awk '{print $5}' | sort -u)
lib_check '[[ $(grep -Ec "rank [01]: parameter checksum" "$tmp/node0.log") -eq 2 && $(echo "$sums" | wc -l) -eq 1 ]]' "$tmp/node0.log"
lib_check 'grep -Eq "ddp_trainer: 160 steps" "$tmp/node0.log"' "$tmp/node0.log"
lib_check 'grep -Eq "final test accuracy .* over 2 ranks" "$tmp/node0.log"' "$tmp/node0.log"
[[ $fail -eq 0 ]] && echo "ok: node 1's agent killed at step 30+; node 0's ranks went on to step 160 with one checksum"
lib_finish
