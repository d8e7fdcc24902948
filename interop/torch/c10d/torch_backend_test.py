"""torch.distributed over backend "lockstep": every operation, checked.

Run by torch_backend_test.sh (PYTHONPATH holds lockstep_torch.so):

    /usr/bin/python3 torch_backend_test.py            # every configuration
    /usr/bin/python3 torch_backend_test.py --only 3:tcp:file

The driver starts each configuration's ranks as processes (world size 2
and 3; LOCKSTEP_TRANSPORT tcp and shm; rendezvous through file://, a
TCPStore the driver serves, and env://) with a hard deadline, and fails
naming the configuration and the ranks' output. Each rank runs every case:
the results are computed here from the definitions (every rank's input is
a known function of its rank; small integers, exact in every dtype), never
by lockstep. The error cases (a mismatch, a dead peer, the timeout) run in
their own groups of 2.
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

DEADLINE_S = 240

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "int8", "bool"]


def lockstep_group(torch, dist, group=None):
    """The backend's own object for `group`: the group itself on PyTorch 1.13,
    the Backend PyTorch's ProcessGroup holds for CPU tensors on 2.x."""
    import lockstep_torch
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if isinstance(pg, lockstep_torch.ProcessGroupLockstep):
        return pg
    return pg._get_backend(torch.device("cpu"))


def log(rank, msg):
    print(f"[rank {rank}] {msg}", flush=True)


# ---------------------------------------------------------------- rank side

def rank_main(args):
    import torch
    import torch.distributed as dist
    import lockstep_torch  # noqa: F401  registers "lockstep"

    rank, world = args.rank, args.world
    timeout = datetime.timedelta(seconds=args.timeout)
    if args.init == "file":
        dist.init_process_group("lockstep", init_method=f"file://{args.path}", rank=rank, world_size=world,
                                timeout=timeout)
    elif args.init == "tcpstore":
        store = dist.TCPStore("127.0.0.1", args.port, world, False, timeout=timeout)
        dist.init_process_group("lockstep", store=store, rank=rank, world_size=world, timeout=timeout)
    else:  # env: MASTER_ADDR, MASTER_PORT (the driver's store), RANK, WORLD_SIZE
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group("lockstep", init_method="env://", timeout=timeout)
    assert dist.get_backend() == "lockstep", dist.get_backend()
    pg = lockstep_group(torch, dist)
    expected_transport = {"tcp": "host over tcp", "shm": "host over shm"}[os.environ["LOCKSTEP_TRANSPORT"]]
    assert pg.transport == expected_transport, (pg.transport, expected_transport)
    # The creator was given the group's global ranks and name (extended_api).
    assert pg.global_ranks == list(range(world)), pg.global_ranks
    assert isinstance(pg.group_name, str), pg.group_name

    if args.case == "ops":
        run_op_cases(torch, dist, rank, world)
    elif args.case == "mismatch":
        run_mismatch(torch, dist, rank)
    elif args.case == "dead_peer":
        run_dead_peer(torch, dist, rank)
    elif args.case == "timeout":
        run_timeout(torch, dist, rank, args.timeout)
    else:
        raise SystemExit(f"unknown case {args.case}")
    if args.case == "ops":
        # Operations still queued, on tensors Python has already dropped, when
        # the group is destroyed: its threads run them and free the tensors
        # (which takes the GIL) while destroy_process_group joins them.
        for _ in range(8):
            dist.all_reduce(torch.ones(1 << 16), async_op=True)
        dist.destroy_process_group()
    log(rank, "all cases passed")


def value(torch, dtype, rank, n, op="sum", offset=0):
    """Rank `rank`'s input: small integers (PRODUCT: factors that stay exact)."""
    i = torch.arange(offset, offset + n, dtype=torch.int64)
    if dtype == torch.bool:
        return ((i * 7 + rank * 3) % 11 + i // 3) % 2 == 1
    if op == "product":
        table = torch.tensor([1, 3, 2, 1, 2, 1, 3] if dtype == torch.uint8 else [1, -1, 2, 1, -1, 1, 2])
        return table[(i * 5 + rank * 3) % 7].to(dtype)
    v = (i * 7 + rank * 3) % 11
    return (v if dtype == torch.uint8 else v - 5).to(dtype)


def reduce_all(torch, dtype, op, inputs):
    """op over the ranks' inputs, from its definition."""
    world = len(inputs)
    if dtype == torch.bool:
        stacked = torch.stack(inputs)
        if op in ("sum", "max", "bor"):
            return stacked.any(0)
        if op in ("product", "min", "band"):
            return stacked.all(0)
        if op == "bxor":
            return (stacked.to(torch.int64).sum(0) % 2) == 1
    wide = torch.stack([t.to(torch.float64 if dtype.is_floating_point else torch.int64) for t in inputs])
    if op in ("sum", "avg"):
        out = wide.sum(0)
    elif op == "product":
        out = wide.prod(0)
    elif op == "min":
        out = wide.min(0).values
    elif op == "max":
        out = wide.max(0).values
    else:
        acc = wide[0].clone()
        for t in wide[1:]:
            acc = {"band": acc & t, "bor": acc | t, "bxor": acc ^ t}[op]
        out = acc
    if op == "avg":
        if dtype.is_floating_point:
            return (out / world).to(dtype)
        return torch.div(out.to(dtype).to(torch.int64), world, rounding_mode="trunc").to(dtype)
    return out.to(dtype)


def ops_for(torch, dtype):
    ops = ["sum", "product", "min", "max"]
    if dtype != torch.bool:
        ops.append("avg")
    if not dtype.is_floating_point:
        ops += ["band", "bor", "bxor"]
    return ops


def check(got, want, what):
    import torch
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.flatten()[:8].tolist()} ({got.dtype}, {tuple(got.shape)}), "
                             f"expected {want.flatten()[:8].tolist()} ({want.dtype}, {tuple(want.shape)})")


def run_op_cases(torch, dist, rank, world):
    R = dist.ReduceOp
    red = {"sum": R.SUM, "avg": R.AVG, "product": R.PRODUCT, "min": R.MIN, "max": R.MAX,
           "band": R.BAND, "bor": R.BOR, "bxor": R.BXOR}
    counts = [0, 1, 7, 1000, (1 << 16) + 3]

    for name in DTYPES:
        dtype = getattr(torch, name)
        for op in ops_for(torch, dtype):
            for n in counts:
                t = value(torch, dtype, rank, n, op)
                dist.all_reduce(t, op=red[op])
                want = reduce_all(torch, dtype, op, [value(torch, dtype, r, n, op) for r in range(world)])
                check(t, want, f"all_reduce {name} {op} n={n}")
            # reduce to the last rank
            n = 1000
            t = value(torch, dtype, rank, n, op)
            dist.reduce(t, dst=world - 1, op=red[op])
            if rank == world - 1:
                check(t, reduce_all(torch, dtype, op, [value(torch, dtype, r, n, op) for r in range(world)]),
                      f"reduce {name} {op}")
        # broadcast from the last rank, and a non-contiguous one from rank 0
        t = value(torch, dtype, rank, 1001)
        dist.broadcast(t, src=world - 1)
        check(t, value(torch, dtype, world - 1, 1001), f"broadcast {name}")
        m = value(torch, dtype, rank, 12 * 5).reshape(12, 5).t()
        dist.broadcast(m, src=0)
        check(m, value(torch, dtype, 0, 60).reshape(12, 5).t(), f"broadcast non-contiguous {name}")
        # all_gather, _all_gather_base, gather, scatter
        outs = [torch.zeros(257, dtype=dtype) for _ in range(world)]
        dist.all_gather(outs, value(torch, dtype, rank, 257))
        for r in range(world):
            check(outs[r], value(torch, dtype, r, 257), f"all_gather {name} block {r}")
        flat = torch.zeros(world * 100, dtype=dtype)
        dist._all_gather_base(flat, value(torch, dtype, rank, 100))
        check(flat, torch.cat([value(torch, dtype, r, 100) for r in range(world)]), f"_all_gather_base {name}")
        gathered = [torch.zeros(33, dtype=dtype) for _ in range(world)] if rank == 0 else None
        dist.gather(value(torch, dtype, rank, 33), gather_list=gathered, dst=0)
        if rank == 0:
            for r in range(world):
                check(gathered[r], value(torch, dtype, r, 33), f"gather {name} block {r}")
        part = torch.zeros(40, dtype=dtype)
        dist.scatter(part, scatter_list=[value(torch, dtype, 100 + r, 40) for r in range(world)] if rank == 1 else None,
                     src=1)
        check(part, value(torch, dtype, 100 + rank, 40), f"scatter {name}")
        # all_to_all_single: equal blocks, then uneven rows (rank r sends r + j + 1 rows of 3 to rank j)
        src = value(torch, dtype, rank, world * 6)
        dst = torch.zeros(world * 6, dtype=dtype)
        dist.all_to_all_single(dst, src)
        want = torch.cat([value(torch, dtype, r, world * 6)[rank * 6:(rank + 1) * 6] for r in range(world)])
        check(dst, want, f"all_to_all_single {name}")
        send = [rank + j + 1 for j in range(world)]
        recv = [r + rank + 1 for r in range(world)]
        src = value(torch, dtype, rank, sum(send) * 3).reshape(-1, 3)
        dst = torch.zeros(sum(recv), 3, dtype=dtype)
        dist.all_to_all_single(dst, src, output_split_sizes=recv, input_split_sizes=send)
        pieces = []
        for r in range(world):
            theirs = value(torch, dtype, r, sum(r + j + 1 for j in range(world)) * 3).reshape(-1, 3)
            start = sum(r + j + 1 for j in range(rank))
            pieces.append(theirs[start:start + r + rank + 1])
        check(dst, torch.cat(pieces), f"all_to_all_single uneven {name}")
        # all_to_all of lists, each block a different size
        ins = [value(torch, dtype, rank * 10 + j, rank + j + 2) for j in range(world)]
        outs = [torch.zeros(r + rank + 2, dtype=dtype) for r in range(world)]
        dist.all_to_all(outs, ins)
        for r in range(world):
            check(outs[r], value(torch, dtype, r * 10 + rank, r + rank + 2), f"all_to_all {name} from {r}")
        if dtype != torch.bool:
            # reduce_scatter (list) and _reduce_scatter_base, SUM
            ins = [value(torch, dtype, rank, 50, offset=50 * j) for j in range(world)]
            out = torch.zeros(50, dtype=dtype)
            dist.reduce_scatter(out, ins)
            want = reduce_all(torch, dtype, "sum", [value(torch, dtype, r, 50, offset=50 * rank) for r in range(world)])
            check(out, want, f"reduce_scatter {name}")
            out = torch.zeros(50, dtype=dtype)
            dist._reduce_scatter_base(out, value(torch, dtype, rank, 50 * world))
            check(out, want, f"_reduce_scatter_base {name}")
        log(rank, f"{name}: every collective ok")

    # Coalesced all-reduce and all-gather, several shapes of one dtype.
    ts = [value(torch, torch.float32, rank, n).reshape(-1) for n in (3, 0, 1000)]
    dist.all_reduce_coalesced(ts)
    for n, t in zip((3, 0, 1000), ts):
        check(t, reduce_all(torch, torch.float32, "sum", [value(torch, torch.float32, r, n) for r in range(world)]),
              f"all_reduce_coalesced n={n}")
    ins = [value(torch, torch.int64, rank, n) for n in (2, 5)]
    outs = [[torch.zeros(2, dtype=torch.int64), torch.zeros(5, dtype=torch.int64)] for _ in range(world)]
    dist.all_gather_coalesced(outs, ins)
    for r in range(world):
        check(outs[r][1], value(torch, torch.int64, r, 5), f"all_gather_coalesced from {r}")

    # Point to point: a ring of send/recv, isend/irecv, then a receive from any rank.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    got = torch.zeros(70001)
    if rank % 2 == 0:
        dist.send(value(torch, torch.float32, rank, 70001), dst=nxt, tag=7)
        dist.recv(got, src=prv, tag=7)
    else:
        dist.recv(got, src=prv, tag=7)
        dist.send(value(torch, torch.float32, rank, 70001), dst=nxt, tag=7)
    check(got, value(torch, torch.float32, prv, 70001), "send/recv ring")
    got = torch.zeros(10, dtype=torch.int64)
    reqs = [dist.isend(value(torch, torch.int64, rank, 10), dst=nxt), dist.irecv(got, src=prv)]
    for req in reqs:
        req.wait()
    check(got, value(torch, torch.int64, prv, 10), "isend/irecv")
    if rank == 0:
        senders = set()
        for _ in range(world - 1):
            t = torch.zeros(4, dtype=torch.int32)
            sender = dist.recv(t, tag=3)  # no src: from any rank
            check(t, torch.full((4,), sender, dtype=torch.int32), f"recv from any rank ({sender})")
            senders.add(sender)
        assert senders == set(range(1, world)), senders
    else:
        dist.send(torch.full((4,), rank, dtype=torch.int32), dst=0, tag=3)

    # Object collectives (bytes underneath), futures and async work.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "data": list(range(rank))})
    assert objs == [{"rank": r, "data": list(range(r))} for r in range(world)], objs
    lst = [f"from {world - 1}", 42] if rank == world - 1 else [None, None]
    dist.broadcast_object_list(lst, src=world - 1)
    assert lst == [f"from {world - 1}", 42], lst
    out = [None]
    dist.scatter_object_list(out, [f"part {r}" for r in range(world)] if rank == 0 else None, src=0)
    assert out == [f"part {rank}"], out
    work = dist.all_reduce(torch.ones(8) * rank, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    check(fut.wait(), torch.full((8,), float(sum(range(world)) * 2)), "future.then")
    # As gloo's: the future (with its then()) completes before the Work, so wait first.
    assert work.wait() and work.is_completed() and work.is_success()
    # wait with a timeout that the operation meets.
    t = torch.ones(8) * rank
    assert dist.all_reduce(t, async_op=True).wait(timeout=datetime.timedelta(seconds=30))
    check(t, torch.full((8,), float(sum(range(world)))), "wait(timeout) met")

    # The profiler sees each operation as an async event named for the backend.
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(torch.ones(16))
        dist.broadcast(torch.ones(4), src=0)
    names = [e.name for e in prof.function_events]
    for wanted in ("lockstep:all_reduce", "lockstep:broadcast"):
        events = [e for e in prof.function_events if e.name == wanted]
        assert len(events) == 1 and events[0].is_async, f"profiler events {names}: no async {wanted}"

    # Sequence numbers agree across ranks.
    seq = pg_seq = dist.distributed_c10d._get_default_group()._get_sequence_number_for_group()
    seqs = [None] * world
    dist.all_gather_object(seqs, seq)
    assert len(set(seqs)) == 1 and pg_seq > 0, seqs

    # A subgroup (ranks 0 and the last) interleaved with the whole group.
    members = [0, world - 1]
    sub = dist.new_group(members, backend="lockstep")
    for k in range(3):
        t = torch.full((5,), float(rank + k))
        whole = torch.full((5,), float(rank))
        if rank in members:
            dist.all_reduce(t, group=sub)
            check(t, torch.full((5,), float(sum(members) + 2 * k)), f"subgroup all_reduce {k}")
        dist.all_reduce(whole)
        check(whole, torch.full((5,), float(sum(range(world)))), f"whole group after subgroup {k}")
    if rank in members:
        assert lockstep_group(torch, dist, sub).global_ranks == members, lockstep_group(torch, dist, sub).global_ranks
    # lockstep has no pg_options: a group asked to take some is refused, on
    # every rank (all of them members: a non-member would go on to wait for
    # the others in new_group's barrier).
    try:
        dist.new_group(list(range(world)), backend="lockstep", pg_options=object())
        raise AssertionError("new_group with pg_options did not raise")
    except RuntimeError as e:
        assert "pg_options" in str(e), e

    dist.barrier()
    # 1.13's dist.monitored_barrier admits gloo only; the group's own method is the backend's.
    dist.distributed_c10d._get_default_group().monitored_barrier(datetime.timedelta(seconds=30), True)

    # Bad arguments raise at the call, naming the operation; the group goes on.
    for bad, needle in (
            (lambda: dist.all_gather([torch.zeros(3)], torch.zeros(3)), "allgather"),
            (lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND), "BAND"),
            (lambda: dist.all_to_all_single(torch.zeros(world * 2 + 1), torch.zeros(world * 2 + 1)),
             "alltoall_base"),
    ):
        try:
            bad()
        except (RuntimeError, ValueError) as e:
            assert needle in str(e), f"expected '{needle}' in: {e}"
        else:
            raise AssertionError(f"no error for a bad call ({needle})")
    t = torch.ones(3)
    dist.all_reduce(t)
    check(t, torch.full((3,), float(world)), "all_reduce after refused calls")


def run_mismatch(torch, dist, rank):
    """Rank 0 all-reduces 1000 floats where rank 1 all-reduces 999: both raise, naming the mismatch."""
    t = torch.ones(1000 if rank == 0 else 999)
    try:
        dist.all_reduce(t)
    except RuntimeError as e:
        msg = str(e)
        assert "mismatch" in msg or "expected" in msg, msg
        log(rank, f"mismatch raised: {msg.splitlines()[0][:200]}")
        return
    raise AssertionError("a mismatched all_reduce did not raise")


def run_dead_peer(torch, dist, rank):
    """Rank 1 dies (SIGKILL) in the middle; rank 0's next collective raises, naming it."""
    t = torch.ones(4)
    dist.all_reduce(t)
    if rank == 1:
        os.kill(os.getpid(), 9)
    try:
        for _ in range(100):
            dist.all_reduce(torch.ones(1 << 20))
    except RuntimeError as e:
        msg = str(e)
        assert "rank 1" in msg, msg
        log(rank, f"dead peer raised: {msg.splitlines()[0][:200]}")
        return
    raise AssertionError("collectives with a dead peer did not raise")


def run_timeout(torch, dist, rank, timeout_s):
    """Rank 1 never calls the all-reduce: rank 0 raises within init_process_group's timeout."""
    if rank == 1:
        time.sleep(timeout_s * 3)  # the peer that never comes (killed by the driver when rank 0 is done)
        return
    # wait with a short timeout raises c10d's "Operation timed out!"; the
    # operation goes on, to fail by the group's timeout.
    pending = dist.all_reduce(torch.ones(10), async_op=True)
    try:
        pending.wait(timeout=datetime.timedelta(milliseconds=200))
        raise AssertionError("wait(200 ms) on an all_reduce without its peer returned")
    except RuntimeError as e:
        assert "Operation timed out!" in str(e), str(e)
        log(rank, f"wait(timeout) raised: {str(e).splitlines()[0][:200]}")
    assert not pending.is_completed()
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(10))
    except RuntimeError as e:
        elapsed = time.monotonic() - start
        assert elapsed < timeout_s * 2 + 10, f"raised after {elapsed:.1f} s, timeout {timeout_s} s"
        log(rank, f"timeout raised after {elapsed:.1f} s: {str(e).splitlines()[0][:200]}")
        return
    raise AssertionError("an all_reduce without its peer did not raise")


# -------------------------------------------------------------- driver side

def run_config(world, transport, init, case="ops", timeout=60):
    tmp = tempfile.mkdtemp(prefix="lockstep_torch_test.")
    try:
        return run_config_in(tmp, world, transport, init, case, timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_config_in(tmp, world, transport, init, case, timeout):
    env = dict(os.environ, LOCKSTEP_TRANSPORT=transport, OMP_NUM_THREADS="1")
    args = [sys.executable, os.path.abspath(__file__), "--world", str(world), "--init", init, "--case", case,
            "--timeout", str(timeout), "--path", os.path.join(tmp, "store")]
    server = None
    if init in ("tcpstore", "env"):
        import torch.distributed as dist
        # The driver serves the store (port 0: the kernel picks one, nothing to race for).
        server = dist.TCPStore("127.0.0.1", 0, world + 1, True, timeout=datetime.timedelta(seconds=timeout),
                               wait_for_workers=False)
        args += ["--port", str(server.port)]
        # env:// with the store already served, as under torchrun's agent.
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(server.port), TORCHELASTIC_USE_AGENT_STORE="True",
                   TORCHELASTIC_RESTART_COUNT="0")
    procs = [subprocess.Popen(args + ["--rank", str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for r in range(world)]
    outputs, codes = [], []
    deadline = time.monotonic() + DEADLINE_S
    for r, p in enumerate(procs):
        wait_for = max(1.0, deadline - time.monotonic())
        if case == "timeout" and r == 1:
            wait_for = 1.0  # the sleeper: done with once rank 0 reported
        try:
            out, _ = p.communicate(timeout=wait_for)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += f"\n[driver] rank {r} killed at the deadline"
            if case == "timeout" and r == 1:
                out += " (expected: the peer that never comes)"
        outputs.append(out)
        codes.append(p.returncode)
    expected = [0] * world
    if case == "dead_peer":
        expected[1] = -9
    if case == "timeout":
        expected[1] = codes[1] if codes[0] == 0 else 0
    name = f"world {world}, LOCKSTEP_TRANSPORT={transport}, init {init}, case {case}"
    if codes != expected:
        print(f"FAIL {name}: exit codes {codes}, expected {expected}")
        for r, out in enumerate(outputs):
            print(f"--- rank {r} ---\n{out}")
        return False
    print(f"ok   {name}")
    for out in outputs:  # What the error cases raised, for the log.
        for line in out.splitlines():
            if " raised" in line:
                print(f"     {line}")
    return True


CONFIGS = [(2, "shm", "file"), (3, "tcp", "file"), (3, "shm", "tcpstore"), (2, "tcp", "env")]
ERROR_CASES = [(2, "shm", "file", "mismatch"), (2, "tcp", "file", "dead_peer"), (2, "shm", "file", "timeout")]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--init", default="file")
    parser.add_argument("--case", default="ops")
    parser.add_argument("--timeout", type=int, default=60)
    parser.add_argument("--path")
    parser.add_argument("--port", type=int)
    parser.add_argument("--only", help="WORLD:TRANSPORT:INIT[:CASE]")
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args)
        return
    if args.only:
        parts = args.only.split(":")
        configs = [(int(parts[0]), parts[1], parts[2], parts[3] if len(parts) > 3 else "ops")]
    else:
        configs = [c + ("ops",) for c in CONFIGS] + ERROR_CASES
    ok = True
    for world, transport, init, case in configs:
        ok &= run_config(world, transport, init, case, timeout=5 if case == "timeout" else 60)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
