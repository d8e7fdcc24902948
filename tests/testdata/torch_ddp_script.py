"""A plain PyTorch DDP script, unchanged from what torchrun runs.

  lockstep-run --nproc_per_node 2 tests/testdata/torch_ddp_script.py

Joins the group with init_process_group(BACKEND, init_method="env://")
(TORCH_DDP_BACKEND: "gloo" by default; "lockstep" imports lockstep_torch,
interop/torch), checks
an all_reduce (sum of rank+1 over ranks), trains a tiny linear model for a few
DDP steps on rank-dependent data, checks that the parameters are the same on
every rank afterwards (DDP averaged the gradients), and prints one line per
rank: "torch_ddp_script: rank R of W local L backend B ... ok".
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn


def main() -> int:
    backend = os.environ.get("TORCH_DDP_BACKEND", "gloo")
    if backend == "lockstep":
        import lockstep_torch  # noqa: F401  registers the backend
    dist.init_process_group(backend, init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    assert rank == int(os.environ["RANK"]) and world == int(os.environ["WORLD_SIZE"])

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    if t.item() != expected:
        print(f"torch_ddp_script: rank {rank}: all_reduce gave {t.item()}, expected {expected}", flush=True)
        return 1

    torch.manual_seed(0)
    model = nn.parallel.DistributedDataParallel(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)  # each rank its own data
    for _ in range(5):
        x = torch.randn(8, 4, generator=g)
        y = torch.randn(8, 2, generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], other) for other in gathered)
    print(f"torch_ddp_script: rank {rank} of {world} local {local_rank} backend {dist.get_backend()} "
          f"all_reduce {t.item():g} "
          f"loss {loss.item():.4f} params {'identical' if same else 'DIFFER'} "
          f"{'ok' if same else 'FAILED'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
