#!/bin/sh
# A launcher's worker that records its environment: writes
# OUT_DIR/env.<RANK> with the torchrun variables (one NAME=VALUE a line, unset
# ones as NAME=<unset>) plus its network namespace's addresses, prints one
# line to stdout and one to stderr, and exits 0 -- except the worker with
# RANK=FAIL_RANK in the first attempt (TORCHELASTIC_RESTART_COUNT=0), which
# exits 3 after recording, so that the group must restart.
#   lockstep-run --nproc_per_node 2 --no_python /bin/sh env_worker.sh OUT_DIR [FAIL_RANK]
out=${1:?usage: env_worker.sh OUT_DIR [FAIL_RANK]}
fail_rank=${2:-}
rank=${RANK:-unset}
{
  for v in RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK GROUP_WORLD_SIZE ROLE_RANK \
           ROLE_NAME ROLE_WORLD_SIZE MASTER_ADDR MASTER_PORT TORCHELASTIC_RESTART_COUNT \
           TORCHELASTIC_MAX_RESTARTS TORCHELASTIC_RUN_ID TORCHELASTIC_USE_AGENT_STORE OMP_NUM_THREADS; do
    eval "val=\${$v-<unset>}"
    echo "$v=$val"
  done
  echo "ADDRS=$(ip -4 -o addr show 2>/dev/null | awk '{print $4}' | tr '\n' ' ')"
} >"$out/env.$rank.tmp" && mv "$out/env.$rank.tmp" "$out/env.$rank"
echo "env_worker stdout rank=$rank"
echo "env_worker stderr rank=$rank" >&2
if [ -n "$fail_rank" ] && [ "$rank" = "$fail_rank" ] && [ "${TORCHELASTIC_RESTART_COUNT:-}" = 0 ]; then
  echo "env_worker rank=$rank fails on purpose in attempt 0" >&2
  exit 3
fi
exit 0
