#!/usr/bin/python3
"""Regenerates distributed_sampler_golden.txt from PyTorch's DistributedSampler.

    /usr/bin/python3 data/testdata/make_sampler_golden.py > data/testdata/distributed_sampler_golden.txt

Needs Debian's python3-torch (1.13). Each case is one line:
    N R rank seed epoch shuffle drop_last : i0 i1 ...
For large N only the first 64 indices and the count are kept (`... count`),
so the file stays small; the test compares the rest through the small cases.
"""
import torch
from torch.utils.data import DistributedSampler

print(f"# torch {torch.__version__}: torch.utils.data.DistributedSampler")
print("# N R rank seed epoch shuffle drop_last : indices   (trailing '... K' = first 64 of K)")


class Range:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def emit(n, r, seed, epoch, shuffle, drop_last, full=True):
    for rank in range(r):
        s = DistributedSampler(Range(n), num_replicas=r, rank=rank, shuffle=shuffle,
                               seed=seed, drop_last=drop_last)
        s.set_epoch(epoch)
        idx = list(iter(s))
        assert len(idx) == len(s)
        head = idx if full else idx[:64]
        tail = "" if full else f" ... {len(idx)}"
        print(f"{n} {r} {rank} {seed} {epoch} {int(shuffle)} {int(drop_last)} : "
              + " ".join(map(str, head)) + tail)


for n in [1, 2, 3, 5, 7, 10, 16, 17, 31, 100]:
    for r in [1, 2, 3, 4, 8]:
        for shuffle in [False, True]:
            for drop_last in [False, True]:
                if drop_last and n < r:
                    continue  # PyTorch yields nothing there; covered separately below.
                for seed, epoch in [(0, 0), (0, 1), (42, 3)] if shuffle else [(0, 0)]:
                    emit(n, r, seed, epoch, shuffle, drop_last)
# N < R with drop_last: every rank gets nothing.
emit(3, 4, 0, 0, True, True)
# Negative seeds and large seeds: only the low 32 bits of seed + epoch matter.
for seed, epoch in [(-1, 0), (-5, 2), (2**32 + 7, 0), (2**40 - 3, 5), (123456789, 987)]:
    emit(50, 3, seed, epoch, True, False)
# Large N (Fashion-MNIST sized), first 64 indices per rank.
for n, r in [(60000, 2), (60000, 3), (10000, 4), (1000003, 5)]:
    emit(n, r, 0, 0, True, False, full=False)
    emit(n, r, 7, 11, True, True, full=False)
