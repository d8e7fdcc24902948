#!/usr/bin/python3
"""PyTorch 1.13 peer for //data:data_loader_benchmark.

    OMP_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/torch_data_loader.py [epochs]

The same work as the C++ benchmark: Fashion-MNIST train from Debian's
dataset-fashion-mnist (the same IDX arrays, read with numpy), each example
converted to f32 / 255 and normalized with (0.2860, 0.3530) in __getitem__
(as ToTensor + Normalize), shuffled, batch 128, default collate; num_workers
0, 1 and 2. Prints samples/s as the median over epochs.
"""
import gzip
import statistics
import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

torch.set_num_threads(1)
DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path, offset):
    with gzip.open(path) as f:
        return np.frombuffer(f.read()[offset:], dtype=np.uint8)


class Fashion(Dataset):
    def __init__(self):
        self.images = torch.from_numpy(read_idx(f"{DIR}/train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).copy())
        self.labels = torch.from_numpy(read_idx(f"{DIR}/train-labels-idx1-ubyte.gz", 8).astype(np.int64))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        x = self.images[i].float().div(255)
        return (x - 0.2860) / 0.3530, self.labels[i]


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    data = Fashion()
    for workers in (0, 1, 2):
        loader = DataLoader(data, batch_size=128, shuffle=True, num_workers=workers,
                            persistent_workers=workers > 0)
        rates = []
        for epoch in range(epochs + 1):
            t = time.perf_counter()
            n = 0
            for x, y in loader:
                n += len(y)
            if epoch > 0:  # The first epoch warms up (and starts workers).
                rates.append(n / (time.perf_counter() - t))
        print(f"torch_data_loader/workers:{workers}: {statistics.median(rates):.0f} samples/s")


if __name__ == "__main__":
    main()
