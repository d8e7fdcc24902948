#!/usr/bin/python3
"""Single-process PyTorch 1.13 baseline for tools/bench/peers/torch_ddp_mlp.py.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 \
        /usr/bin/python3 tools/bench/peers/torch_single_mlp.py --steps 200 --warmup 20

The same model (Flatten, Linear 784->512, ReLU, Linear 512->256, ReLU,
Linear 256->10), SGD(lr=0.1, momentum=0.9) and cross_entropy, in one process
with one thread (the env vars above, set here too if absent, plus
torch.set_num_threads(1)), on batch 128 of synthetic in-memory data
([128, 1, 28, 28] in [-1, 1), labels 0..9; 4 batches, cycled). A step is
zero_grad + forward + backward + optimizer step. Prints one JSON line:
  {"tool": "torch_single", "ranks": 1, "global_batch": 128, "step_ms_median": ...,
   "samples_per_s": ..., ...}
samples_per_s = global_batch / median step; wall_samples_per_s is
steps * global_batch / wall time of the timed loop.
"""
import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # before torch loads OpenBLAS

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from mlp_peer import make_model, make_step  # noqa: E402

BATCH = 128


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--model", default="mlp", choices=["mlp", "cnn"],
                        help="cnn: the trainers' --model=cnn (mlp_peer.make_model)")
    parser.add_argument("--amp", default="off", choices=["off", "bf16"],
                        help="bf16: torch.autocast(dtype=torch.bfloat16), as lockstep's --amp=bf16")
    parser.add_argument("--device", default="cpu", help="cpu or cuda[:i] (each step ends with a synchronize)")
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--tf32", action="store_true",
                        help="on CUDA, let cuDNN and cuBLAS use TF32 (PyTorch's default for cuDNN); "
                             "off: full f32, as lockstep's CUDA kernels")
    args = parser.parse_args()
    if args.device.startswith("cuda"):
        torch.backends.cudnn.allow_tf32 = args.tf32
        torch.backends.cuda.matmul.allow_tf32 = args.tf32
    load_before = float(open("/proc/loadavg").read().split()[0])
    torch.set_num_threads(1)
    model = make_model(args.model)
    step = make_step(model, args.batch, 100, amp=args.amp, device=args.device)

    for i in range(args.warmup):
        step(i)
    times = []
    start = time.perf_counter()
    for i in range(args.steps):
        t0 = time.perf_counter()
        step(i)
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - start
    ms = sorted(t * 1e3 for t in times)
    median = statistics.median(ms)
    print(json.dumps({"tool": "torch_single", "ranks": 1, "global_batch": args.batch,
                      "amp": args.amp, "device": args.device, "tf32": args.tf32,
                      "step_ms_median": round(median, 4),
                      "samples_per_s": round(args.batch / (median / 1e3), 1),
                      "step_ms_p10": round(ms[len(ms) // 10], 4),
                      "step_ms_p90": round(ms[(len(ms) * 9) // 10], 4),
                      "wall_samples_per_s": round(args.steps * args.batch / wall, 1),
                      "model": args.model, "steps": args.steps, "warmup": args.warmup,
                      "torch": torch.__version__, "loadavg_1m_before": load_before}),
          flush=True)


if __name__ == "__main__":
    main()
