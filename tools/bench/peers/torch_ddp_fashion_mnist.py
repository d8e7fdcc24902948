#!/usr/bin/python3
"""PyTorch 1.13's figure for the main job's recipe, for docs/PERFORMANCE.md.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \
        /usr/bin/python3 tools/bench/peers/torch_ddp_fashion_mnist.py [--seed S]

The reference MLP (Flatten, 784-512-256-10 with ReLU) under
DistributedDataParallel (gloo, 2 ranks), SGD lr 0.1 momentum 0.9, batch 64 per
rank, CrossEntropyLoss, 3 epochs over Fashion-MNIST from Debian's
dataset-fashion-mnist (pixels / 255, normalized with mean 0.2860 and std
0.3530, as lockstep's trainers), DistributedSampler(shuffle=True, seed) with
set_epoch. Prints one JSON line per epoch from rank 0: test accuracy over the
10,000 test images and the epoch's training samples/s.
"""
import argparse
import gzip
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(prefix):
    x = read_idx(f"{DIR}/{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    y = read_idx(f"{DIR}/{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    x = (x - 0.2860) / 0.3530
    return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))


def run(rank, world, port, seed, epochs):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    train, test = load("train"), load("t10k")
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=seed)
    loader = DataLoader(train, batch_size=64, sampler=sampler)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        start = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss_fn(ddp(x), y).backward()
            opt.step()
        seconds = time.perf_counter() - start
        if rank == 0:
            model.eval()
            with torch.no_grad():
                correct = (model(test.tensors[0]).argmax(1) == test.tensors[1]).sum().item()
            print(json.dumps({"tool": "torch_ddp", "epoch": epoch + 1, "test_accuracy": correct / len(test),
                              "samples_per_s": len(train) / seconds}), flush=True)
        dist.barrier()
    # PyTorch 1.13's gloo teardown can deadlock at exit: leave at once.
    os._exit(0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()
    port = 29500 + os.getpid() % 1000
    mp.spawn(run, args=(2, port, args.seed, args.epochs), nprocs=2)


if __name__ == "__main__":
    main()
