#!/usr/bin/env bash
# Real Open MPI: `mpirun --allow-run-as-root -np 2` of the DDP trainer trains to
# completion with nothing but Open MPI's variables (OMPI_COMM_WORLD_RANK/SIZE,
# ..._LOCAL_RANK/LOCAL_SIZE; MASTER_ADDR defaults to 127.0.0.1 on one node),
# and the two processes really were ranks 0 and 1 of 2: the trainer names the
# source "openmpi" and 2 ranks, each rank writes its own trace labelled with
# its rank, the sampler split the 256 training examples over 2 ranks and the
# test examples were counted once. Needs openmpi-bin (tools/setup.sh) and root
# (mpirun refuses root without --allow-run-as-root; CI runs as root). Then
# the libtorch trainers (resnet18_trainer, char_transformer_trainer), small,
# the same way.
set -uo pipefail
source "$TEST_SRCDIR/$TEST_WORKSPACE/tests/launch_lib.sh"
lib_require_root "mpirun --allow-run-as-root"
if ! command -v mpirun >/dev/null; then
  echo "FAIL: mpirun not found; install Open MPI with: bash tools/setup.sh (apt-get install openmpi-bin)"
  exit 1
fi
trainer="$runfiles/trainers/ddp_trainer"
tmp="${TEST_TMPDIR:-/tmp}/mpirun_test"
rm -rf "$tmp" && mkdir -p "$tmp"
mpi_pid=
cleanup() { [[ -n "$mpi_pid" ]] && lib_kill_all "$mpi_pid"; }
trap cleanup EXIT

# Open MPI's ranks on one node meet at 127.0.0.1:MASTER_PORT (29500 unless set);
# a free port keeps this test off ports other jobs on the machine may hold.
port=$(lib_free_port) || exit 1
log="$tmp/mpirun.log"
# -x passes the variable to every rank; --oversubscribe allows 2 ranks on a
# machine with fewer cores; the trainer's own --timeout bounds every collective.
timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT="$port" \
  "$trainer" --dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64 \
  --batch_size=32 --epochs=2 --num_workers=0 --timeout=60 \
  --metrics="$tmp/m.jsonl" --trace="$tmp/trace" >"$log" 2>&1 &
mpi_pid=$!
wait "$mpi_pid"; rc=$?
mpi_pid=
lib_check '[[ $rc -eq 0 ]]' "$log" || echo "mpirun exited with $rc (124: timed out after 120 s)"
lib_check 'grep -q "ddp_trainer: 2 ranks (openmpi)" "$log"' "$log"
lib_check 'grep -q "ddp_trainer: final test accuracy .* over 2 ranks, 8 steps" "$log"' "$log"
# Metrics (rank 0): both epochs, world size 2, all 256 training examples seen
# (128 per rank), 64 test examples counted once, a peak RSS from each rank.
lib_check '[[ $(grep -c "\"event\":\"epoch\"" "$tmp/m.jsonl") -eq 2 ]]' "$tmp/m.jsonl"
lib_check '[[ $(grep -c "\"world_size\":2,.*\"train_examples\":256,.*\"test_examples\":64," "$tmp/m.jsonl") -eq 2 ]]' "$tmp/m.jsonl"
lib_check 'grep -q "\"peak_rss_bytes\":\[[0-9]*,[0-9]*\]" "$tmp/m.jsonl"' "$tmp/m.jsonl"
# Each rank's own trace, labelled with the rank it was given, with its DDP all-reduces.
for r in 0 1; do
  lib_check 'grep -q "\"args\":{\"name\":\"rank '$r'\"}" "$tmp/trace/trace_rank'$r'.json"' "$log"
  lib_check 'grep -q "\"name\":\"allreduce bucket 0\"" "$tmp/trace/trace_rank'$r'.json"' "$log"
done
lib_check '[[ $(ls "$tmp/trace" | wc -l) -eq 2 ]]' "$log"
[[ $fail -eq 0 ]] && grep "final test accuracy" "$log"

# The libtorch trainers, small (interop/torch/trainers), as ranks 0 and 1 of 2.
resnet="$runfiles/interop/torch/trainers/resnet18_trainer"
transformer="$runfiles/interop/torch/trainers/char_transformer_trainer"
for t in resnet transformer; do
  port=$(lib_free_port) || exit 1
  if [[ $t == resnet ]]; then
    args=("$resnet" --dataset=synthetic --synthetic_train_size=256 --synthetic_test_size=64 --batch_size=32 --width=8)
  else
    args=("$transformer" --layers=1 --dim=32 --heads=2 --context=32 --batch_size=8 --max_steps=4 --sample_length=10)
  fi
  timeout -k 5 120 mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_PORT="$port" "${args[@]}" \
    --num_workers=0 --timeout=60 >"$tmp/$t.log" 2>&1 &
  mpi_pid=$!
  wait "$mpi_pid"; rc=$?
  mpi_pid=
  lib_check '[[ $rc -eq 0 ]]' "$tmp/$t.log"
  lib_check 'grep -q "_trainer: 2 ranks (openmpi)" "$tmp/$t.log"' "$tmp/$t.log"
  lib_check 'grep -q "_trainer: final test loss .* over 2 ranks, 4 steps" "$tmp/$t.log"' "$tmp/$t.log"
done
lib_finish
