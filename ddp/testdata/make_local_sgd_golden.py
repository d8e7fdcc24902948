#!/usr/bin/python3
"""Golden data for ddp/local_sgd_test.cc from PyTorch 1.13's
post_localSGD_hook and PeriodicModelAverager (gloo, CPU, 4 ranks).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \\
        /usr/bin/python3 ddp/testdata/make_local_sgd_golden.py [OUT]

Linear(4, 3) under DDP with the post-local SGD hook (start_localSGD_iter=2;
the subgroups {0, 1} and {2, 3} made with dist.new_group and passed in, as
Debian's CPU PyTorch refuses new_subgroups()), SGD(lr=0.25), and a
PeriodicModelAverager(period=2, warmup_steps=2) over all 4 ranks after every
step; loss 0.5 * sum((y - t)^2), 6 steps, batches of 2. As in
make_join_golden.py the numbers are chosen so that no f32 operation rounds,
and the script proves it against its own float64 rendering of the rules
(before the start: the average over all ranks; after: over the subgroup; at
steps 2 and 4 the parameters averaged over all ranks), so a test compares
for equality. Cases: "allreduce" (post_local_gradient_allreduce=True) and
"local" (False: no gradient communication after the start).

Stored (f32): weight, bias (initial); x.<rank>.<i>, t.<rank>.<i>;
<case>.step.<rank>.<i>.weight / .bias (after step i and the averager).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as plsgd
from torch.distributed.algorithms.model_averaging import averagers
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "nn", "testdata"))
from read_safetensors import write_safetensors  # noqa: E402

WORLD, STEPS, LR, START, PERIOD = 4, 6, 0.25, 2, 2
SUBGROUPS = [[0, 1], [2, 3]]
CASES = {"allreduce": True, "local": False}


def make_data(dtype):
    gen = torch.Generator().manual_seed(4242)
    weight = (torch.randint(-4, 5, (3, 4), generator=gen) / 8.0).to(dtype)
    bias = (torch.randint(-4, 5, (3,), generator=gen) / 8.0).to(dtype)
    data = []
    for _ in range(WORLD):
        batches = []
        for _ in range(STEPS):
            x = torch.zeros(2, 4)
            for row in range(2):
                cols = torch.randperm(4, generator=gen)[:2]
                x[row, cols] = (torch.randint(0, 2, (2,), generator=gen) * 2 - 1).float()
            t = torch.randint(-2, 3, (2, 3), generator=gen) / 2.0
            batches.append((x.to(dtype), t.to(dtype)))
        data.append(batches)
    return weight, bias, data


def worker(rank, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD)
    groups = [dist.new_group(ranks) for ranks in SUBGROUPS]  # Every rank creates every subgroup, in order.
    mine = groups[0] if rank in SUBGROUPS[0] else groups[1]
    weight, bias, data = make_data(torch.float32)
    out = {}
    for case, allreduce in CASES.items():
        model = torch.nn.Linear(4, 3)
        with torch.no_grad():
            model.weight.copy_(weight)
            model.bias.copy_(bias)
        ddp = DDP(model)
        state = plsgd.PostLocalSGDState(process_group=None, subgroup=mine, start_localSGD_iter=START,
                                        post_local_gradient_allreduce=allreduce)
        ddp.register_comm_hook(state, plsgd.post_localSGD_hook)
        averager = averagers.PeriodicModelAverager(period=PERIOD, warmup_steps=START)
        opt = torch.optim.SGD(model.parameters(), lr=LR)
        steps = []
        for x, t in data[rank]:
            opt.zero_grad(set_to_none=True)
            loss = 0.5 * ((ddp(x) - t) ** 2).sum()
            loss.backward()
            opt.step()
            averager.average_parameters(model.parameters())
            steps.append((model.weight.detach().clone(), model.bias.detach().clone()))
        out[case] = steps
    torch.save(out, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # See make_ddp_golden.py: 1.13's teardown can deadlock.


def simulate(allreduce):
    weight, bias, data = make_data(torch.float64)
    params = [(weight.clone(), bias.clone()) for _ in range(WORLD)]
    steps = [[] for _ in range(WORLD)]
    for i in range(STEPS):
        grads = []
        for r in range(WORLD):
            w, b = params[r]
            x, t = data[r][i]
            g = x @ w.T + b - t
            grads.append((g.T @ x, g.sum(0)))
        for r in range(WORLD):
            if i < START:
                members = range(WORLD)
            elif allreduce:
                members = next(s for s in SUBGROUPS if r in s)
            else:
                members = [r]
            gw = sum(grads[m][0] for m in members) / len(members)
            gb = sum(grads[m][1] for m in members) / len(members)
            w, b = params[r]
            params[r] = (w - LR * gw, b - LR * gb)
        if i >= START and (i - START) % PERIOD == 0:
            aw = sum(p[0] for p in params) / WORLD
            ab = sum(p[1] for p in params) / WORLD
            params = [(aw.clone(), ab.clone()) for _ in range(WORLD)]
        for r in range(WORLD):
            steps[r].append(params[r])
    return steps


def main(path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(os.path.join(tmp, "init"), tmp), nprocs=WORLD, join=True)
        ranks = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD)]
    weight, bias, data = make_data(torch.float32)
    out = {"weight": weight, "bias": bias}
    for r in range(WORLD):
        for i, (x, t) in enumerate(data[r]):
            out[f"x.{r}.{i}"], out[f"t.{r}.{i}"] = x, t
    for case, allreduce in CASES.items():
        sim = simulate(allreduce)
        for r in range(WORLD):
            for i, (w, b) in enumerate(ranks[r][case]):
                sw, sb = sim[r][i]
                assert torch.equal(w.double(), sw) and torch.equal(b.double(), sb), \
                    f"{case}: rank {r} step {i} is not the exact float64 result (rounding, or another rule)"
                out[f"{case}.step.{r}.{i}.weight"], out[f"{case}.step.{r}.{i}.bias"] = w, b
        print(f"{case}: PyTorch equals the exact float64 rules on every rank and step")
    write_safetensors(path, out, {"world": str(WORLD), "steps": str(STEPS), "start": str(START),
                                  "period": str(PERIOD)})
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "local_sgd_golden.safetensors"))
