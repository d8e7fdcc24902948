#!/usr/bin/python3
"""Golden data for ddp/zero_redundancy_optimizer_test.cc from PyTorch 1.13's
ZeroRedundancyOptimizer (Debian's python3-torch, CPU, gloo).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \\
        /usr/bin/python3 ddp/testdata/make_zero_golden.py [OUT.json]

1. "partitions": the real class's _partition_parameters for several lists of
   parameter sizes and world sizes (built on a one-rank group, then told the
   world size, as its partition is a pure function of the sizes and W).
2. "state_keys": the consolidated state_dict of ZeRO over Adam and AdamW
   (2 ranks, a 4-parameter model, 3 steps): its "state" indices and each
   entry's keys, the layout lockstep's consolidated StateTensors follows.
3. The property the C++ test relies on, checked here on PyTorch itself:
   ZeRO(Adam) and ZeRO(AdamW) under DDP end, on every rank and after every
   step, bit for bit where a plain DDP + Adam/AdamW ends, and the
   consolidated state equals the plain optimizer's state bit for bit. (So a
   test that shows lockstep's ZeRO equal to lockstep's plain Adam bit for bit
   ties it to PyTorch's ZeRO through nn's Adam golden test.)
"""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

PARTITION_CASES = [
    [10, 3, 7, 7, 2, 5],
    [1, 1, 1, 1, 1],
    [100],
    [5, 5, 5, 4, 4, 4, 3, 3, 3, 2, 1],
    [401408, 512, 131072, 256, 2560, 10],  # the reference MLP's 784-512-256-10
]
WORLD_SIZES = [1, 2, 3, 4, 5]
STEPS = 3


def partitions():
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "29611"
    dist.init_process_group("gloo", rank=0, world_size=1)
    out = []
    for sizes in PARTITION_CASES:
        params = [torch.nn.Parameter(torch.zeros(s)) for s in sizes]
        index = {p: i for i, p in enumerate(params)}
        zero = ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.SGD, lr=0.1)
        for world in WORLD_SIZES:
            zero.world_size = world
            zero._clear_cache()
            part = zero._partition_parameters()
            out.append({"sizes": sizes, "world_size": world,
                        "ranks": [[index[p] for group in part[r] for p in group["params"]] for r in range(world)]})
    dist.destroy_process_group()
    return out


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def worker(rank, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=2)
    result = {}
    for name, cls in [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)]:
        runs = {}
        for zero in (False, True):
            model = make_model()
            ddp = DDP(model)
            opt = (ZeroRedundancyOptimizer(model.parameters(), optimizer_class=cls, lr=0.01) if zero
                   else cls(model.parameters(), lr=0.01))
            gen = torch.Generator().manual_seed(100 + rank)
            params = []
            for _ in range(STEPS):
                opt.zero_grad(set_to_none=True)
                x = torch.randn(8, 20, generator=gen)
                y = torch.randint(0, 4, (8,), generator=gen)
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
                opt.step()
                params.append([p.detach().clone() for p in model.parameters()])
            if zero:
                opt.consolidate_state_dict(to=0)
                state = opt.state_dict() if rank == 0 else None
            else:
                state = opt.state_dict()
            runs[zero] = (params, state)
        for step, (a, b) in enumerate(zip(runs[False][0], runs[True][0])):
            for i, (pa, pb) in enumerate(zip(a, b)):
                assert torch.equal(pa, pb), f"{name}: rank {rank} step {step} param {i}: ZeRO differs from plain"
        if rank == 0:
            plain, zero_state = runs[False][1]["state"], runs[True][1]["state"]
            assert sorted(plain) == sorted(zero_state), (name, sorted(plain), sorted(zero_state))
            for i in plain:
                for k in plain[i]:
                    assert torch.equal(torch.as_tensor(plain[i][k]), torch.as_tensor(zero_state[i][k])), (name, i, k)
            result[name] = {str(i): sorted(zero_state[i].keys()) for i in sorted(zero_state)}
    if rank == 0:
        with open(os.path.join(out_dir, "keys.json"), "w") as f:
            json.dump(result, f)
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # See make_ddp_golden.py: 1.13's teardown can deadlock.


def main(path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    golden = {"partitions": partitions()}
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "init"), tmp), nprocs=2, join=True)
        with open(os.path.join(tmp, "keys.json")) as f:
            golden["state_keys"] = json.load(f)
    with open(path, "w") as f:
        json.dump(golden, f, separators=(",", ":"))
        f.write("\n")
    print(f"ZeRO equals the plain optimizer bit for bit (Adam, AdamW, 2 ranks, {STEPS} steps); wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "zero_golden.json"))
