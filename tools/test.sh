#!/usr/bin/env bash
# The whole test suite, as the README's quick start and CI run it:
#   1. installs missing packages (tools/setup.sh),
#   2. bazel test //...            (CUDA code is compiled when the toolkit is
#                                   present; GPU tests skip without a device),
#   3. the same under AddressSanitizer (--config=asan) and the concurrent
#      code under ThreadSanitizer (--config=tsan),
#   4. the golden and equivalence tests under each OpenBLAS kernel the CPU
#      can execute (OPENBLAS_CORETYPE=Prescott, Haswell, SkylakeX, Cooperlake,
#      Zen; a kernel whose instructions the CPU lacks is skipped, with a line
#      saying so),
#   5. the external consumer workspace in tests/consumer,
#   6. formatting: C++ (clang-format) and Bazel files (buildifier), checked
#      by tools/format.sh --check (one result in the count).
# Ends with the line `N passed, M failed` (plus `, K skipped` when some were
# skipped), counted from Bazel's per-target results. Exits non-zero on any
# failure.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

bash tools/setup.sh || { echo "setup failed"; echo "0 passed, 1 failed"; exit 1; }

logdir=$(mktemp -d)
passed=0 failed=0 skipped=0
failures=()

# count LABEL_PREFIX LOG BAZEL_EXIT: adds the per-target results in LOG.
count() {
  local prefix=$1 log=$2 rc=$3 n=0
  while read -r target result; do
    n=$((n + 1))
    case "$result" in
      PASSED) passed=$((passed + 1)) ;;
      SKIPPED) skipped=$((skipped + 1)) ;;
      *) failed=$((failed + 1)); failures+=("$prefix$target $result") ;;
    esac
  done < <(awk '$1 ~ /^(\/\/|@)[^ ]*:/ {
      line = $0; sub(/^[^ ]+[ ]+/, "", line); sub(/^\(cached\) /, "", line); sub(/ in [0-9.]+s.*$/, "", line)
      if (line ~ /^(PASSED|FAILED TO BUILD|FAILED|TIMEOUT|FLAKY|SKIPPED|NO STATUS|INCOMPLETE)/) print $1, line
    }' "$log")
  # Exit 3 means "some tests failed" (counted above); any other non-zero exit
  # is a build or infrastructure failure, even if every listed test passed.
  if [[ $rc -ne 0 && $rc -ne 3 ]] || [[ $n -eq 0 && $rc -ne 0 ]]; then
    failed=$((failed + 1)); failures+=("${prefix}build (bazel exit $rc)")
  fi
}

run_step() {
  local name=$1; shift
  echo "=== $name: $*"
  local log="$logdir/$name.log"
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  count "$name:" "$log" "$rc"
}

echo "=== format: bash tools/format.sh --check"
if bash tools/format.sh --check; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  failures+=("format: files not formatted (bash tools/format.sh fixes them)")
fi

run_step main bazel test //...
# The scale lab runs plain only (namespaces and many ranks; its own
# forwarder's unit tests do run under ASan). So does the install package: a
# CMake project links it without the sanitizer's runtime.
run_step asan bazel test --config=asan //core/... //data/... //collectives/... //nn/... //amp/... //ddp/... \
  //fsdp/... //dp/... //trainers/... //tests/... //tools/... //interop/... -- -//collectives:communicator_test \
  -//tools/scale_lab:lab_test -//tools/scale_lab:delay_link_test \
  -//tools/install/... -//tests/cmake_consumer/... -//python/... -//tests:header_examples_check \
  -//interop/torch/c10d:pytorch_suite_test -//interop/torch/trainers:torch_trainers_test \
  -//trainers:fault_tolerant_kill_test
# The libtorch trainers under ASan without the full-width ResNet-18 resume
# (3 minutes alone under ASan on a quiet machine; it runs in the plain step,
# and the Transformer's resume covers the same code under ASan).
run_step asan-trainers bazel test --config=asan //interop/torch/trainers:torch_trainers_test \
  "--test_arg=--gtest_filter=-*ResNet18Resumes*"
# PyTorch's suite subset runs plain only (3 minutes under ASan; the backend's
# own Python tests run under ASan above). The communicator grids (TCP and
# shared memory) without their 1M-element cases: ASan makes them several
# minutes long.
run_step asan-grid bazel test --config=asan //collectives:communicator_test "--test_arg=--gtest_filter=-*LargeCounts*"
# TSan leaves out interop/torch: libtorch's OpenMP runtime is not
# instrumented, so TSan would report its thread pool's own synchronization.
run_step tsan bazel test --config=tsan //core:thread_pool_test //core:subprocess_test //data:data_loader_test \
  //collectives:fault_test //collectives/store:store_test //collectives/store:tcp_store_test //collectives:work_test \
  //collectives:point_to_point_test //collectives/testing:fake_transport_test //collectives/transport/tcp:tcp_transport_test \
  //collectives/bootstrap:init_from_env_test //collectives/algorithms:all_reduce_test //collectives/algorithms:ring_all_reduce_test \
  //collectives/algorithms:rabenseifner_all_reduce_test //collectives/algorithms:bruck_all_gather_test \
  //collectives/algorithms:pipelined_tree_broadcast_test //collectives/algorithms:pipelined_tree_reduce_test \
  //collectives/algorithms:tree_all_reduce_test //collectives/algorithms:bruck_all_to_all_test //collectives/algorithms:all_to_all_test \
  //collectives/algorithms:recursive_halving_reduce_scatter_test \
  //fsdp:flat_unit_test //fsdp:sharded_optimizer_test \
  //ddp:ddp_test //trainers:train_loop_test //trainers:grad_accum_test //dp:parallel_apply_test //dp:data_parallel_test \
  //collectives/transport/shm:shm_transport_test //collectives/transport/shm:shm_fault_test //collectives/algorithms:ring_in_place_test \
  //collectives/transport/shm:shm_stranger_test //ddp:replica_sync_test //collectives:chained_work_test //collectives:monitored_barrier_test \
  //collectives/hierarchical:hierarchical_backend_test //collectives/bootstrap:communicator_factory_test //tools/launch:all \
  //collectives/transport/shm:shm_single_copy_process_test //collectives/nccl:nccl_watchdog_test //collectives/nccl:nccl_backend_test \
  //collectives:recv_any_source_test //collectives:subgroup_test //collectives:objects_test \
  //collectives/store:file_store_test //collectives/bootstrap:init_method_test \
  //ddp:join_test //ddp:sync_batch_norm_test //ddp:powersgd_hook_test //ddp:zero_redundancy_optimizer_test \
  //ddp:local_sgd_test //collectives:worker_wake_test //collectives/internal:op_queue_test \
  //collectives/store/etcd:etcd_store_test //collectives/elastic:elastic_group_test //ddp:heal_test \
  //trainers:fault_tolerant_loop_test
# The communicator grids without their large cases (TSan is ~10x slower).
run_step tsan-grid bazel test --config=tsan //collectives:communicator_test \
  "--test_arg=--gtest_filter=CommunicatorTest.*:*EveryOpDtypeAndReduceOp/?"
run_step tsan-grid-v bazel test --config=tsan //collectives:collectives_v_test "--test_arg=--gtest_filter=-*LargeCounts*"
# FSDP's concurrency (prefetched all-gathers, reduce-scatters in flight,
# the hooks) on the MLP: the CNN's cases run oneDNN's convolutions from two
# ranks' threads, and oneDNN is not instrumented, so TSan would report its
# primitive cache's own locking.
run_step tsan-fsdp bazel test --config=tsan //fsdp:fully_shard_test \
  "--test_arg=--gtest_filter=-*Cnn*:*WorldThree*:*TheFullStateDict*"
# The golden and equivalence tests once more under each OpenBLAS kernel this
# CPU can execute: another kernel sums in another order, so a tolerance that
# holds for one CPU's kernel alone fails here on any machine.
golden_tests=(//nn:golden_test //nn:batch_norm_test //nn/testing:error_bound_test //ddp:golden_test
  //ddp:ddp_test //dp:data_parallel_test //tests:mixed_precision_test //amp:grad_scaler_test)
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { local f; for f in "$@"; do [[ "$cpu_flags" == *" $f "* ]] || return 1; done; }
for kernel in Prescott Haswell SkylakeX Cooperlake Zen; do
  case $kernel in
    Prescott) needs=(pni) ;;                                   # SSE3
    Haswell|Zen) needs=(avx2 fma) ;;
    SkylakeX) needs=(avx512f avx512bw avx512dq avx512vl) ;;
    Cooperlake) needs=(avx512f avx512bw avx512dq avx512vl avx512_bf16) ;;
  esac
  if ! has "${needs[@]}"; then
    echo "=== kernel-$kernel: skipped, this CPU lacks ${needs[*]}"
    continue
  fi
  run_step "kernel-$kernel" bazel test "--test_env=OPENBLAS_CORETYPE=$kernel" "${golden_tests[@]}"
done

pushd tests/consumer >/dev/null
run_step consumer bazel test //...
bazel shutdown >/dev/null 2>&1  # Frees the consumer's Bazel server.
popd >/dev/null

if [[ ${#failures[@]} -gt 0 ]]; then
  echo "=== failures:"
  printf '  %s\n' "${failures[@]}"
fi
rm -rf "$logdir"
summary="$passed passed, $failed failed"
[[ $skipped -gt 0 ]] && summary+=", $skipped skipped"
echo "$summary"
[[ $failed -eq 0 ]]
