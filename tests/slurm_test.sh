#!/usr/bin/env bash
# Real Slurm: starts a one-node Slurm cluster of its own (Debian's slurm-wlm
# and munge; a generated slurm.conf with its own free ports and a temporary
# state directory, passed by SLURM_CONF), waits until sinfo shows the node
# idle, checks what `srun -n 2` gives each task (SLURM_PROCID 0/1, NTASKS 2,
# LOCALID 0/1), runs `srun -n 2` of the DDP trainer (which reads Slurm's
# variables) to completion and checks that it trained as ranks 0 and 1 of 2.
# munged runs as the munge user (one already running is used and left
# running); every daemon this test started is stopped whatever happens.
# Needs root (daemons, SlurmUser=root) and tools/setup.sh's packages.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "a Slurm cluster (slurmctld, slurmd, munged)"
export PATH="$PATH:/usr/sbin:/sbin"
for tool in slurmctld slurmd srun sinfo scancel munged munge unmunge; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool not found; install Slurm and munge with: bash tools/setup.sh (apt-get install slurm-wlm munge)"
    exit 1
  fi
done
trainer="$runfiles/trainers/ddp_trainer"
# The state directory is outside Bazel's tree: slurmd and the job steps must
# reach it whatever user they run as, and unix socket paths must stay short.
dir=$(mktemp -d /tmp/lockstep-slurm.XXXXXX)
chmod 755 "$dir"
out="${TEST_UNDECLARED_OUTPUTS_DIR:-$dir}"
ctld_pid= slurmd_pid= munged_pid= srun_pid=

cleanup() {
  [[ -n "$srun_pid" ]] && lib_kill_all "$srun_pid"
  if [[ -n "$ctld_pid" ]] && lib_alive "$ctld_pid"; then
    SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --user=root >/dev/null 2>&1
  fi
  # slurmd first (it owns the job steps), then slurmctld; SIGTERM, then SIGKILL.
  local p
  for p in "$slurmd_pid" "$ctld_pid"; do
    [[ -z "$p" ]] && continue
    local kids; kids=$(lib_descendants "$p")
    kill -TERM "$p" 2>/dev/null
    lib_wait_for 10 "slurm daemon $p to exit" lib_dead "$p" || kill -9 "$p" 2>/dev/null
    for k in $kids; do kill -9 "$k" 2>/dev/null; done
  done
  if [[ -n "$munged_pid" ]]; then
    kill -TERM "$munged_pid" 2>/dev/null
    lib_wait_for 10 "munged $munged_pid to exit" lib_dead "$munged_pid" || kill -9 "$munged_pid" 2>/dev/null
  fi
  # Keep the daemons' logs for a failed run, then remove the state.
  cp "$dir"/*.log "$out"/ 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT

# munge: use the running munged if there is one, else start ours as the munge
# user (it refuses root-owned directories, hence the chown).
if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  echo "munged already running; using it"
else
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 0755 /run/munge
  rm -f /run/munge/munged.pid
  if ! runuser -u munge -- /usr/sbin/munged; then
    echo "FAIL: munged did not start; see /var/log/munge/munged.log:"; tail -n 20 /var/log/munge/munged.log
    exit 1
  fi
  lib_wait_for 10 "munged's pid file" test -s /run/munge/munged.pid || exit 1
  munged_pid=$(cat /run/munge/munged.pid)
  if ! lib_wait_for 10 "munge -n | unmunge to succeed" sh -c 'munge -n | unmunge'; then
    echo "FAIL: munged (pid $munged_pid) started but credentials do not decode; see /var/log/munge/munged.log"
    exit 1
  fi
fi

host=$(hostname -s)
ctld_port=$(lib_free_port) || exit 1
slurmd_port=$(lib_free_port) || exit 1
while [[ "$slurmd_port" == "$ctld_port" ]]; do slurmd_port=$(lib_free_port) || exit 1; done
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<CONF
ClusterName=lockstep$$
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=YES
CONF
export SLURM_CONF="$dir/slurm.conf"
# In the foreground (-D) as children of this script, so their pids are known
# at once; -i ignores state left by nobody (the directory is new).
slurmctld -D -i -f "$SLURM_CONF" -L "$dir/slurmctld.log" >"$dir/slurmctld.out.log" 2>&1 &
ctld_pid=$!
slurmd -D -f "$SLURM_CONF" -L "$dir/slurmd.log" >"$dir/slurmd.out.log" 2>&1 &
slurmd_pid=$!
node_idle() { [[ "$(sinfo -h -N -n "$host" -o %T 2>/dev/null)" == idle ]]; }
if ! lib_wait_for 60 "sinfo to show node $host idle" node_idle; then
  echo "FAIL: the one-node cluster did not come up (sinfo: $(sinfo -h -N -o '%N %T' 2>&1))"
  lib_alive "$ctld_pid" || echo "slurmctld (pid $ctld_pid) exited"
  lib_alive "$slurmd_pid" || echo "slurmd (pid $slurmd_pid) exited"
  tail -n 20 "$dir/slurmctld.log" "$dir/slurmd.log" "$dir"/*.out.log
  exit 1
fi
echo "ok: cluster up (slurmctld :$ctld_port, slurmd :$slurmd_port, node $host idle)"

# What srun gives each task.
timeout -k 5 60 srun -n 2 -t 2 sh -c 'echo "task $SLURM_PROCID/$SLURM_NTASKS local $SLURM_LOCALID nodes $SLURM_JOB_NODELIST"' \
  >"$dir/env.out" 2>&1; rc=$?
lib_check '[[ $rc -eq 0 ]]' "$dir/env.out"
lib_check '[[ "$(sort "$dir/env.out" | tr "\n" ";")" == "task 0/2 local 0 nodes $host;task 1/2 local 1 nodes $host;" ]]' "$dir/env.out"

# The DDP trainer: MASTER_ADDR is the step's first node; MASTER_PORT (else
# 29500 + job id % 1000) is set to a free port so that this test never meets
# another job's port. srun passes the environment on (--export=ALL).
export MASTER_PORT; MASTER_PORT=$(lib_free_port) || exit 1
log="$dir/srun.log"
timeout -k 5 180 srun -n 2 -t 3 "$trainer" --dataset=synthetic --synthetic_train_size=256 \
  --synthetic_test_size=64 --batch_size=32 --epochs=2 --num_workers=0 --timeout=60 \
  --metrics="$dir/m.jsonl" --trace="$dir/trace" >"$log" 2>&1 &
srun_pid=$!
wait "$srun_pid"; rc=$?
srun_pid=
cp "$log" "$out/" 2>/dev/null
lib_check '[[ $rc -eq 0 ]]' "$log" || echo "srun exited with $rc (124: timed out after 180 s)"
lib_check 'grep -q "ddp_trainer: 2 ranks (slurm)" "$log"' "$log"
lib_check 'grep -q "ddp_trainer: final test accuracy .* over 2 ranks, 8 steps" "$log"' "$log"
lib_check '[[ $(grep -c "\"world_size\":2,.*\"train_examples\":256,.*\"test_examples\":64," "$dir/m.jsonl") -eq 2 ]]' "$dir/m.jsonl"
for r in 0 1; do
  lib_check 'grep -q "\"args\":{\"name\":\"rank '$r'\"}" "$dir/trace/trace_rank'$r'.json"' "$log"
done
[[ $fail -eq 0 ]] && grep "final test accuracy" "$log"

# The libtorch trainers, small (interop/torch/trainers), as Slurm's 2 tasks.
resnet="$runfiles/interop/torch/trainers/resnet18_trainer"
transformer="$runfiles/interop/torch/trainers/char_transformer_trainer"
for t in resnet transformer; do
  MASTER_PORT=$(lib_free_port) || exit 1
  if [[ $t == resnet ]]; then
    args=("$resnet" --dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64 --batch_size=32 --width=8)
  else
    args=("$transformer" --layers=1 --dim=32 --heads=2 --context=32 --batch_size=8 --max_steps=4 --sample_length=10)
  fi
  timeout -k 5 180 srun -n 2 -t 3 "${args[@]}" --num_workers=0 --timeout=60 >"$dir/$t.log" 2>&1 &
  srun_pid=$!
  wait "$srun_pid"; rc=$?
  srun_pid=
  cp "$dir/$t.log" "$out/" 2>/dev/null
  lib_check '[[ $rc -eq 0 ]]' "$dir/$t.log"
  lib_check 'grep -q "_trainer: 2 ranks (slurm)" "$dir/$t.log"' "$dir/$t.log"
  lib_check 'grep -q "_trainer: final test loss .* over 2 ranks, 4 steps" "$dir/$t.log"' "$dir/$t.log"
done
lib_finish
