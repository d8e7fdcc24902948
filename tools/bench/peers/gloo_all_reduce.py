#!/usr/bin/python3
"""PyTorch 1.13 gloo peer for //tools/bench:collectives (all_reduce, f32, SUM).

--backend lockstep times torch.distributed.all_reduce over lockstep's own
torch.distributed backend instead (lockstep_torch on PYTHONPATH:
bazel build //interop/torch:lockstep_torch), for the binding's cost.

    GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/gloo_all_reduce.py \
        --nproc 2 --bytes 4096 --iters 500 --warmup 20

Prints one line per size: `<backend> <bytes> <time_us> <busbw_GBps>`, the time
being the slowest rank's mean (as the C++ tool and nccl-tests report).

With RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in the environment (one
process per rank, e.g. one per network namespace) it runs as that rank
instead of spawning --nproc local ones.
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, args, port):
    if port is not None:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if args.backend == "lockstep":
        import lockstep_torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=args.nproc)
    for nbytes in args.bytes:
        t = torch.zeros(nbytes // 4, dtype=torch.float32)
        for _ in range(args.warmup):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(args.iters):
            dist.all_reduce(t)
        elapsed = torch.tensor([(time.perf_counter() - start) / args.iters], dtype=torch.float64)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        if rank == 0:
            n = args.nproc
            busbw = nbytes / elapsed.item() / 1e9 * 2 * (n - 1) / n
            print(f"{args.backend} {nbytes} {elapsed.item() * 1e6:.2f} {busbw:.4f}", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--bytes", type=int, nargs="+", required=True)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--backend", default="gloo", choices=["gloo", "lockstep"])
    args = parser.parse_args()
    if "RANK" in os.environ:
        args.nproc = int(os.environ["WORLD_SIZE"])
        run(int(os.environ["RANK"]), args, None)
        os._exit(0)  # PyTorch 1.13's gloo teardown can hang at exit.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(run, args=(args, port), nprocs=args.nproc)


if __name__ == "__main__":
    main()
