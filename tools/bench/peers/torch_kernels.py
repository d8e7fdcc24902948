#!/usr/bin/python3
"""PyTorch 1.13 peer figures for //core:kernels_benchmark (one thread).

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/torch_kernels.py

Prints GB/s of output written, the same measure as the C++ benchmark's
bytes_per_second, as the median of several timed blocks.
"""
import statistics
import time

import torch

torch.set_num_threads(1)


def gbps(fn, nbytes, blocks=15, min_block_s=0.05):
    fn()
    iters = 1
    while True:
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        if time.perf_counter() - t > min_block_s:
            break
        iters *= 2
    rates = []
    for _ in range(blocks):
        t = time.perf_counter()
        for _ in range(iters):
            fn()
        rates.append(nbytes * iters / (time.perf_counter() - t) / 2**30)
    return statistics.median(rates)


def main():
    n = 1 << 20
    for name, dtype in [("f32", torch.float32), ("f16", torch.float16), ("bf16", torch.bfloat16)]:
        for size in (1 << 15, 1 << 18, 1 << 21):
            a = torch.zeros(size, dtype=dtype)
            b = torch.zeros(size, dtype=dtype)
            print(f"reduce_sum/{name}/{size}: {gbps(lambda: a.add_(b), a.numel() * a.element_size()):.2f} GiB/s")
    src = torch.zeros(n, dtype=torch.float32)
    for name, dtype in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
        dst = torch.zeros(n, dtype=dtype)
        print(f"cast/f32_to_{name}/{n}: {gbps(lambda: dst.copy_(src), dst.numel() * dst.element_size()):.2f} GiB/s")
    h = torch.zeros(n, dtype=torch.float16)
    f = torch.zeros(n, dtype=torch.float32)
    print(f"cast/f16_to_f32/{n}: {gbps(lambda: f.copy_(h), n * 4):.2f} GiB/s")
    print(f"all_finite/{n}: {gbps(lambda: torch.isfinite(f).all().item(), n * 4):.2f} GiB/s")
    print(f"scale/{n}: {gbps(lambda: f.mul_(0.5), n * 4):.2f} GiB/s")


if __name__ == "__main__":
    main()
