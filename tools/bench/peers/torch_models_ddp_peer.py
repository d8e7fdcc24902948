#!/usr/bin/python3
"""PyTorch 1.13 peer of interop/torch/ddp:ddp_bench for the reference models.

    /usr/bin/python3 tools/bench/peers/torch_models_ddp_peer.py --model resnet18 --batch 32 --mode ddp

2 ranks (torch.multiprocessing.spawn, gloo on 127.0.0.1, CPU), one thread
each (OPENBLAS_NUM_THREADS / OMP_NUM_THREADS = 1, torch.set_num_threads(1)).
Each rank trains the model of interop/torch/models/reference_models.py
(the op-for-op twin of the libtorch models beside it: ResNet-18 with a 1-channel stem,
or the 6 x 384 character Transformer, context 128, 114 tokens) on 4 fixed
random batches of --batch examples (cycled), SGD momentum 0.9 (lr 0.1; 0.01
for the Transformer), as ddp_bench does.
  --mode ddp    DistributedDataParallel (bucket_cap_mb 25, PyTorch's defaults;
                --gradient_as_bucket_view: gradients are views into the buckets)
  --mode local  no communication: each rank trains alone, at the same time
A step is zero_grad + forward + loss + backward + optimizer step. After the
warm-up and a barrier each rank times each step; the per-step times are
combined with an all-reduce MAX and the median reported. One JSON line, as
ddp_bench's: {"tool", "model", "ranks", "global_batch", "step_ms_median",
"samples_per_s", "wall_samples_per_s", "peak_rss_mb" (per rank)}.
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before torch loads OpenBLAS (the children inherit it)
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../interop/torch/models"))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from reference_models import make  # noqa: E402

RANKS = 2


def run(rank, args, port, queue):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    torch.manual_seed(0)
    model = make(args.model)
    if args.mode == "ddp":
        model = DDP(model, gradient_as_bucket_view=args.gradient_as_bucket_view)
    lm = args.model == "char_transformer"
    opt = torch.optim.SGD(model.parameters(), lr=0.01 if lm else 0.1, momentum=0.9)
    torch.manual_seed(100 + rank)
    if lm:
        batches = [(torch.randint(0, 114, (args.batch, 128)), torch.randint(0, 114, (args.batch, 128)))
                   for _ in range(4)]
    else:
        batches = [(torch.rand(args.batch, 1, 28, 28) * 2 - 1, torch.randint(0, 10, (args.batch,)))
                   for _ in range(4)]

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        loss.backward()
        opt.step()

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
    rss = torch.zeros(RANKS, dtype=torch.float64)
    rss[rank] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    dist.all_reduce(rss)
    if rank == 0:
        median = statistics.median(t * 1e3 for t in times.tolist())
        global_batch = RANKS * args.batch
        queue.put({"tool": "torch_ddp" if args.mode == "ddp" else "torch_local", "model": args.model,
                   "gradient_as_bucket_view": args.gradient_as_bucket_view,
                   "ranks": RANKS, "global_batch": global_batch, "step_ms_median": round(median, 4),
                   "samples_per_s": round(global_batch / (median / 1e3), 1),
                   "wall_samples_per_s": round(args.steps * global_batch / wall.item(), 1),
                   "peak_rss_mb": [int(v) for v in rss.tolist()], "torch": torch.__version__})
    dist.barrier()
    # As torch_ddp_mlp.py: skip the teardown that can deadlock in 1.13.
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, choices=["resnet18", "char_transformer"])
    parser.add_argument("--mode", default="ddp", choices=["ddp", "local"])
    parser.add_argument("--batch", type=int, required=True, help="examples per rank")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--gradient_as_bucket_view", action="store_true",
                        help="DDP(gradient_as_bucket_view=True): gradients are views into the buckets")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.spawn(run, args=(args, port, queue), nprocs=RANKS)
    print(json.dumps(queue.get()), flush=True)


if __name__ == "__main__":
    main()
