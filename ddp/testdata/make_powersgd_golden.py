#!/usr/bin/python3
"""Golden data for ddp/powersgd_hook_test.cc from PyTorch 1.13's
powerSGD_hook (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py),
run on 2 ranks (gloo, CPU) on one gradient bucket.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \\
        /usr/bin/python3 ddp/testdata/make_powersgd_golden.py [OUT]

The bucket holds gradients of shapes (16, 8), (16,), (8, 8), (16, 8),
(3, 2), (4, 3, 2) (a bucket object with the GradBucket methods the hook
calls: buffer, gradients, index, is_last). Cases "r1" (matrix_approximation_rank
1) and "r2" (2), each with start_powerSGD_iter=2, error feedback and warm
start (the defaults), orthogonalization_epsilon 0, random_seed 0, for 6
iterations: 2 of plain all-reduce, then 4 compressed. The random initial Q
blocks (one torch.randn per block, after torch.manual_seed of the hook's own
numpy RandomState draw) are recorded as PyTorch made them, so a test can
inject them: their values depend on torch's RNG kernels, not on PowerSGD.

Stored (f32): <case>.in.<rank>.<it> (the bucket before the hook),
<case>.out.<rank>.<it> (after), <case>.error.<rank>.<it>, <case>.p.<it>,
<case>.q.<it> (the hook's state after iteration it, where it exists; P and
Q are equal on both ranks, which the script checks), <case>.qinit.<k> (the
k-th random block). Metadata: <case>.rank, shapes (JSON), and
<case>.seed_draw, the value PyTorch seeded torch with (numpy's
RandomState(0).randint(1_000_000_000)).
"""
import json
import os
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "nn", "testdata"))
from read_safetensors import write_safetensors  # noqa: E402

SHAPES = [(16, 8), (16,), (8, 8), (16, 8), (3, 2), (4, 3, 2)]
CASES = {"r1": 1, "r2": 2}
ITERATIONS = 6
START = 2
NUMEL = sum(int(np.prod(s)) for s in SHAPES)


class Bucket:
    """What powerSGD_hook calls of a GradBucket."""

    def __init__(self, buffer):
        self._buffer = buffer

    def buffer(self):
        return self._buffer

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        out, at = [], 0
        for shape in SHAPES:
            n = int(np.prod(shape))
            out.append(self._buffer[at:at + n].view(shape))
            at += n
        return out


def worker(rank, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
    out = {}
    for case, approx_rank in CASES.items():
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=approx_rank,
                                   start_powerSGD_iter=START)
        draws = []
        real_randn = torch.randn

        def recording_randn(*args, **kwargs):
            t = real_randn(*args, **kwargs)
            draws.append(t.clone())
            return t

        torch.randn = recording_randn
        gen = torch.Generator().manual_seed(7 + rank)
        for it in range(ITERATIONS):
            grad = real_randn(NUMEL, generator=gen)
            out[f"{case}.in.{rank}.{it}"] = grad.clone()
            result = psgd.powerSGD_hook(state, Bucket(grad)).wait()
            out[f"{case}.out.{rank}.{it}"] = result.clone()
            if 0 in state.error_dict:
                out[f"{case}.error.{rank}.{it}"] = state.error_dict[0].clone()
            if 0 in state.q_memory_dict:
                out[f"{case}.p.{rank}.{it}"] = state.p_memory_dict[0].clone()
                out[f"{case}.q.{rank}.{it}"] = state.q_memory_dict[0].clone()
        torch.randn = real_randn
        for k, d in enumerate(draws):
            out[f"{case}.qinit.{rank}.{k}"] = d.reshape(-1)
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # See make_ddp_golden.py: 1.13's teardown can deadlock.


def main(path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(2)]
    out, metadata = {}, {"shapes": json.dumps(SHAPES), "iterations": str(ITERATIONS), "start": str(START)}
    for case, approx_rank in CASES.items():
        metadata[f"{case}.rank"] = str(approx_rank)
        metadata[f"{case}.seed_draw"] = str(np.random.RandomState(0).randint(1_000_000_000))
        for it in range(ITERATIONS):
            for r in range(2):
                for what in ("in", "out", "error"):
                    key = f"{case}.{what}.{r}.{it}"
                    if key in ranks[r]:
                        out[key] = ranks[r][key]
            for what in ("p", "q"):
                a, b = ranks[0].get(f"{case}.{what}.0.{it}"), ranks[1].get(f"{case}.{what}.1.{it}")
                if a is None:
                    continue
                assert torch.equal(a, b), f"{case}: {what} differs between ranks at iteration {it}"
                out[f"{case}.{what}.{it}"] = a
            assert torch.equal(ranks[0][f"{case}.out.0.{it}"], ranks[1][f"{case}.out.1.{it}"]), (case, it)
        k = 0
        while f"{case}.qinit.0.{k}" in ranks[0]:
            assert torch.equal(ranks[0][f"{case}.qinit.0.{k}"], ranks[1][f"{case}.qinit.1.{k}"]), (case, k)
            out[f"{case}.qinit.{k}"] = ranks[0][f"{case}.qinit.0.{k}"]
            k += 1
        assert k > 0, case
    write_safetensors(path, out, metadata)
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "powersgd_golden.safetensors"))
