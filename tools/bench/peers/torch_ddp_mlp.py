#!/usr/bin/python3
"""PyTorch 1.13 DDP peer for lockstep's data-parallel MLP training step.

    GLOO_SOCKET_IFNAME=lo OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        /usr/bin/python3 tools/bench/peers/torch_ddp_mlp.py --steps 200 --warmup 20

2 ranks (torch.multiprocessing.spawn, gloo on 127.0.0.1, CPU; --backend
lockstep: lockstep's torch.distributed backend), one BLAS
thread per rank (the env vars above, set here too if absent, plus
torch.set_num_threads(1)). Each rank trains the reference MLP (Flatten,
Linear 784->512, ReLU, Linear 512->256, ReLU, Linear 256->10) wrapped in
DistributedDataParallel (defaults: bucket_cap_mb=25, no hook; with
--gradient_as_bucket_view, gradients are views into the buckets) with
SGD(lr=0.1, momentum=0.9) and cross_entropy on synthetic data already in
memory: 64 examples per rank ([64, 1, 28, 28] in [-1, 1), labels 0..9;
4 batches per rank, cycled), global batch 128.

A step is zero_grad + forward + backward (with DDP's all-reduce) +
optimizer step. Each rank times each step; after a barrier and the warm-up,
the per-step times are combined with an all-reduce MAX (the slowest rank's
time for each step) and the median is reported. Prints one JSON line:
  {"tool": "torch_ddp", "ranks": 2, "global_batch": 128, "step_ms_median": ...,
   "samples_per_s": ..., ...}
samples_per_s = global_batch / median step; wall_samples_per_s is
steps * global_batch / (slowest rank's wall time of the timed loop).
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before torch loads OpenBLAS (the children inherit it)
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse  # noqa: E402
import json  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from mlp_peer import make_model, make_step  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

RANKS = 2
PER_RANK_BATCH = 64


def run(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    if args.backend == "lockstep":
        import lockstep_torch  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, rank=rank, world_size=RANKS)
    model = DDP(make_model(args.model), gradient_as_bucket_view=args.gradient_as_bucket_view)
    step = make_step(model, PER_RANK_BATCH, 100 + rank, amp=args.amp)

    for i in range(args.warmup):
        step(i)
    dist.barrier()
    times = torch.zeros(args.steps, dtype=torch.float64)
    start = time.perf_counter()
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        times[i] = time.perf_counter() - t0
    wall = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
    dist.all_reduce(times, op=dist.ReduceOp.MAX)
    dist.all_reduce(wall, op=dist.ReduceOp.MAX)
    if rank == 0:
        ms = sorted(t * 1e3 for t in times.tolist())
        median = statistics.median(ms)
        global_batch = RANKS * PER_RANK_BATCH
        queue.put({"tool": "torch_ddp", "backend": args.backend, "ranks": RANKS, "global_batch": global_batch,
                   "step_ms_median": round(median, 4),
                   "samples_per_s": round(global_batch / (median / 1e3), 1),
                   "step_ms_p10": round(ms[len(ms) // 10], 4),
                   "step_ms_p90": round(ms[(len(ms) * 9) // 10], 4),
                   "wall_samples_per_s": round(args.steps * global_batch / wall.item(), 1),
                   "model": args.model, "amp": args.amp, "steps": args.steps, "warmup": args.warmup,
                   "gradient_as_bucket_view": args.gradient_as_bucket_view,
                   "torch": torch.__version__})
    dist.barrier()
    # Skip interpreter teardown: in 1.13 destroying the Reducer/ProcessGroupGloo
    # at exit can deadlock (~ProcessGroupGloo joins a gloo worker thread that
    # waits for the GIL to free a tensor, while the main thread holds it).
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"],
                        help="cnn: the trainers' --model=cnn (mlp_peer.make_model)")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "lockstep"],
                        help="lockstep: lockstep's torch.distributed backend (lockstep_torch on PYTHONPATH)")
    parser.add_argument("--gradient_as_bucket_view", action="store_true",
                        help="DDP(gradient_as_bucket_view=True): gradients are views into the buckets")
    parser.add_argument("--amp", default="off", choices=["off", "bf16"],
                        help="bf16: torch.autocast('cpu', dtype=torch.bfloat16), as lockstep's --amp=bf16")
    args = parser.parse_args()
    load_before = open("/proc/loadavg").read().split()[0]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(run, args=(args, port, queue), nprocs=RANKS)
    result = queue.get()
    result["loadavg_1m_before"] = float(load_before)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
