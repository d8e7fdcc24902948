#!/usr/bin/env bash
# The benchmark tool runs every op (and send_recv) on 3 local ranks with
# --check and reports no wrong elements; its JSON carries the mean, the percentiles and the tail;
# bad flags are refused with a clear message.
set -euo pipefail
# Text is matched with here-strings, not `echo | grep -q`: under pipefail a
# grep that exits at its first match can fail the pipeline with the writer's
# SIGPIPE.
bin="$TEST_SRCDIR/$TEST_WORKSPACE/tools/bench/collectives"
for op in all_reduce all_gather all_gather_v reduce_scatter broadcast reduce gather scatter all_to_all send_recv; do
  out=$("$bin" --op=$op --nproc=3 --min_bytes=1K --max_bytes=1M --step_factor=32 --iters=2 --warmup=1 --check)
  echo "$out"
  rows=$(echo "$out" | grep -v '^#' | wc -l)
  [[ $rows -eq 3 ]] || { echo "expected 3 rows for $op"; exit 1; }
  # #wrong is the last column (p50 and p95 sit beside the time before it).
  if echo "$out" | grep -v '^#' | awk '{print $NF}' | grep -qv '^0$'; then
    echo "wrong elements for $op"; exit 1
  fi
done
json=$("$bin" --op=all_reduce --dtype=bf16 --nproc=2 --min_bytes=64K --max_bytes=64K --iters=1 --warmup=0 --check --json)
grep -q '"wrong": 0' <<<"$json" || { echo "json: $json"; exit 1; }
# The percentiles in order, and the tail's figures consistent with them.
json=$("$bin" --op=all_reduce --nproc=2 --min_bytes=4K --max_bytes=4K --iters=50 --warmup=2 --json)
echo "$json"
/usr/bin/python3 - "$json" <<'PY' || { echo "bad p50/p95 in json: $json"; exit 1; }
import json, sys
row = json.loads(sys.argv[1])
for key in ("time_us", "p50_us", "p95_us", "busbw_gbps"):
    assert isinstance(row[key], (int, float)) and row[key] > 0, key
assert row["p50_us"] <= row["p95_us"] <= row["p99_us"] <= row["max_us"], row
# Stalls: iterations slower than 10 x p50; each adds more than 9 x p50 to
# the stall share (per iteration, 50 of them), none: no share. The slack is
# the printing's rounding: stall_us to 0.0001 (x 50), p50_us to 0.001 (x 9
# per stall).
assert row["stalls"] == int(row["stalls"]) and 0 <= row["stalls"] <= 50, row
assert row["stall_us"] >= 0 and (row["stalls"] > 0) == (row["stall_us"] > 0), row
slack = 0.00005 * 50 + 0.0005 * 9 * row["stalls"]
assert row["stall_us"] * 50 >= row["stalls"] * 9 * row["p50_us"] - slack, row
for key in ("caller_vcsw", "caller_ivcsw", "other_vcsw", "other_ivcsw"):
    assert row[key] == int(row[key]) and row[key] >= 0, key
PY
# Sizes above --large_bytes run --iters_large iterations (the rows say how many).
json=$("$bin" --op=all_reduce --nproc=2 --min_bytes=4K --max_bytes=16K --large_bytes=8K --iters=5 --iters_large=2 \
  --warmup_large=0 --json)
iters=$(/usr/bin/python3 -c 'import json, sys; print(" ".join(str(json.loads(l)["iters"]) for l in sys.stdin if l.startswith("{")))' <<<"$json")
[[ $iters == "5 5 2" ]] || { echo "iterations per size: $iters, expected 5 5 2: $json"; exit 1; }
# A list of ops sweeps each in turn on one group: every op's rows, in order,
# checked, all with the one set-up the group had.
json=$("$bin" --op=all_reduce,all_to_all,broadcast --nproc=3 --min_bytes=3K --max_bytes=12K --step_factor=4 --iters=2 \
  --warmup=1 --check --json)
/usr/bin/python3 - "$json" <<'PY' || { echo "bad rows for a list of ops: $json"; exit 1; }
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]
assert [(r["op"], r["bytes"]) for r in rows] == [(op, b) for op in ("all_reduce", "all_to_all", "broadcast")
                                                 for b in (3072, 12288)], rows
assert all(r["wrong"] == 0 for r in rows), rows
assert len({r["setup_s"] for r in rows}) == 1, rows
PY
out=$("$bin" --op=all_reduce,broadcast --nproc=2 --min_bytes=4K --max_bytes=4K --iters=1 --warmup=0)
[[ $(grep -c '^# lockstep collectives benchmark: op ' <<<"$out") -eq 2 ]] || { echo "a header per op expected: $out"; exit 1; }
if err=$("$bin" --op=all_reduce,,broadcast --nproc=2 2>&1); then echo "an empty op name accepted"; exit 1; fi
grep -q "an empty name" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" --iters_large=0 --large_bytes=8K --nproc=2 2>&1); then echo "--iters_large=0 accepted"; exit 1; fi
grep -q "iters_large=0" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" --op=all_reduce_x --nproc=2 2>&1); then echo "bad --op accepted"; exit 1; fi
grep -q "is not a collective" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" --bind_to=socket --nproc=2 2>&1); then echo "bad --bind_to accepted"; exit 1; fi
grep -q "expected core or none" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if err=$("$bin" --timeout=0 --nproc=2 --min_bytes=4K --max_bytes=4K 2>&1); then echo "--timeout=0 accepted"; exit 1; fi
grep -q "timeout=0" <<<"$err" || { echo "unclear error: $err"; exit 1; }
# Shared memory's options reach the transport, and the header names its copy
# path: with single copy off, the ring only.
out=$("$bin" --transport=shm --shm_single_copy_bytes=0 --nproc=2 --min_bytes=4M --max_bytes=4M --iters=2 --warmup=1 --check)
echo "$out"
grep -q '^# shared-memory copy path (rank 0): ring only (single copy off)' <<<"$out" || { echo "no copy path: $out"; exit 1; }
echo "$out" | grep -v '^#' | awk '{print $NF}' | grep -qx 0 || { echo "wrong elements over the ring: $out"; exit 1; }
if err=$("$bin" --op=send_recv --nproc=1 2>&1); then echo "send_recv on one rank accepted"; exit 1; fi
grep -q "needs at least 2 ranks" <<<"$err" || { echo "unclear error: $err"; exit 1; }
# Backend choice: the header says what ran and why; NCCL on CPU tensors and
# CUDA without a device are refused with what to do.
out=$("$bin" --nproc=2 --min_bytes=4K --max_bytes=4K --iters=1 --warmup=0)
grep -q '^# device cpu:0; backend host' <<<"$out" || { echo "no backend line: $out"; exit 1; }
if err=$("$bin" --backend=nccl --nproc=2 --min_bytes=4K --max_bytes=4K 2>&1); then echo "nccl on cpu accepted"; exit 1; fi
grep -q "NCCL needs CUDA tensors" <<<"$err" || { echo "unclear error: $err"; exit 1; }
if [[ ! -e /dev/nvidia0 ]]; then
  if err=$("$bin" --device=cuda --nproc=2 --min_bytes=4K --max_bytes=4K 2>&1); then echo "cuda without a GPU accepted"; exit 1; fi
  grep -q "no CUDA device is visible" <<<"$err" || { echo "unclear error: $err"; exit 1; }
fi
echo ok
