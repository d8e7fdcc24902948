#!/usr/bin/python3
"""Golden data for ddp/join_test.cc from PyTorch 1.13's Join with
DistributedDataParallel (gloo, CPU, one process per rank).

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \\
        /usr/bin/python3 ddp/testdata/make_join_golden.py [OUT]

Each case trains Linear(4, 3) under `with Join([ddp], divide_by_initial_world_size=...)`
with SGD(lr=0.25), a different number of batches on each rank (so ranks join
at different times), batches of 2, loss 0.5 * sum((y - t)^2) (so the output
gradient is y - t). The numbers are chosen so that no floating-point
operation rounds: weights start as multiples of 1/8, inputs are -1, 0 or 1,
targets multiples of 1/2, lr and the divisors are powers of two. The script
proves it: it repeats every case in float64 by its own rules of Join (below)
and requires PyTorch's float32 results to equal them exactly. So any correct
implementation gives these bits on any CPU, and a test can compare for
equality.

The rules, as distributed.py and join.py implement them: an iteration's
averaged gradient is the sum of the gradients of the ranks that have not
joined, divided by the world size (divide_by_initial_world_size=True) or by
their number (False); a joined rank's parameters stay as they were; at the
end every rank takes the parameters of the largest rank among those that
joined last.

Cases: w2_initial (2 ranks, batches 2 and 4), w2_active (the same, divided by
the ranks still active), w4_initial (4 ranks, batches 1, 3, 2, 4),
w2_buckets (2 ranks, batches 1 and 4, bucket_cap_mb 1e-6 and a first bucket
of 1 byte, so the rebuilt buckets hold one parameter each and rank 0 shadows
the rebuild's broadcasts).

Stored (f32): <case>.weight / .bias (the initial parameters),
<case>.x.<rank>.<i> [2, 4] and <case>.t.<rank>.<i> [2, 3] (rank's i-th
batch), <case>.step.<rank>.<i>.weight / .bias (the rank's parameters after
its i-th optimizer step), <case>.final.<rank>.weight / .bias (after Join).
Metadata: <case>.world, <case>.batches (JSON), <case>.divide_by_initial_world_size,
<case>.bucket_cap_mb, <case>.first_bucket_bytes.
"""
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "nn", "testdata"))
from read_safetensors import write_safetensors  # noqa: E402

LR = 0.25
CASES = {
    "w2_initial": dict(world=2, batches=[2, 4], divide_by_initial=True),
    "w2_active": dict(world=2, batches=[2, 4], divide_by_initial=False),
    "w4_initial": dict(world=4, batches=[1, 3, 2, 4], divide_by_initial=True),
    "w2_buckets": dict(world=2, batches=[1, 4], divide_by_initial=True, bucket_cap_mb=1e-6, first_bucket_bytes=1),
}


def make_data(case, dtype):
    """Initial parameters and every rank's batches, all exactly representable."""
    gen = torch.Generator().manual_seed(sum(map(ord, case)))
    weight = (torch.randint(-4, 5, (3, 4), generator=gen) / 8.0).to(dtype)
    bias = (torch.randint(-4, 5, (3,), generator=gen) / 8.0).to(dtype)
    data = []
    for n in CASES[case]["batches"]:
        batches = []
        for _ in range(n):
            x = torch.zeros(2, 4)
            for row in range(2):  # two of the four inputs are +-1
                cols = torch.randperm(4, generator=gen)[:2]
                x[row, cols] = (torch.randint(0, 2, (2,), generator=gen) * 2 - 1).float()
            t = torch.randint(-2, 3, (2, 3), generator=gen) / 2.0
            batches.append((x.to(dtype), t.to(dtype)))
        data.append(batches)
    return weight, bias, data


def worker(rank, case, init_file, out_dir):
    torch.set_num_threads(1)
    cfg = CASES[case]
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=cfg["world"])
    if "first_bucket_bytes" in cfg:
        dist._DEFAULT_FIRST_BUCKET_BYTES = cfg["first_bucket_bytes"]
    weight, bias, data = make_data(case, torch.float32)
    model = torch.nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.copy_(weight)
        model.bias.copy_(bias)
    ddp = DDP(model, bucket_cap_mb=cfg.get("bucket_cap_mb", 25))
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    steps = []
    with Join([ddp], divide_by_initial_world_size=cfg["divide_by_initial"]):
        for x, t in data[rank]:
            opt.zero_grad(set_to_none=True)
            y = ddp(x)
            loss = 0.5 * ((y - t) ** 2).sum()
            loss.backward()
            opt.step()
            steps.append((model.weight.detach().clone(), model.bias.detach().clone()))
    final = (model.weight.detach().clone(), model.bias.detach().clone())
    torch.save({"steps": steps, "final": final}, os.path.join(out_dir, f"{case}.rank{rank}.pt"))
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)  # See make_ddp_golden.py: 1.13's teardown can deadlock.


def simulate(case):
    """The case in float64 by the rules above: per-rank steps and final parameters."""
    cfg = CASES[case]
    world, counts = cfg["world"], cfg["batches"]
    weight, bias, data = make_data(case, torch.float64)
    params = [(weight.clone(), bias.clone()) for _ in range(world)]
    steps = [[] for _ in range(world)]
    for i in range(max(counts)):
        active = [r for r in range(world) if i < counts[r]]
        gw, gb = torch.zeros_like(weight), torch.zeros_like(bias)
        for r in active:
            w, b = params[r]
            x, t = data[r][i]
            g = x @ w.T + b - t
            gw += g.T @ x
            gb += g.sum(0)
        div = world if cfg["divide_by_initial"] else len(active)
        for r in active:
            w, b = params[r]
            params[r] = (w - LR * (gw / div), b - LR * (gb / div))
            steps[r].append(params[r])
    last = max(counts)
    authoritative = max(r for r in range(world) if counts[r] == last)
    return steps, params[authoritative]


def main(path):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    out, metadata = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, cfg in CASES.items():
            init_file = os.path.join(tmp, f"{case}.init")
            mp.spawn(worker, args=(case, init_file, tmp), nprocs=cfg["world"], join=True)
            results = [torch.load(os.path.join(tmp, f"{case}.rank{r}.pt")) for r in range(cfg["world"])]
            sim_steps, sim_final = simulate(case)
            weight, bias, data = make_data(case, torch.float32)
            out[f"{case}.weight"], out[f"{case}.bias"] = weight, bias
            for r, res in enumerate(results):
                for i, (x, t) in enumerate(data[r]):
                    out[f"{case}.x.{r}.{i}"], out[f"{case}.t.{r}.{i}"] = x, t
                assert len(res["steps"]) == len(sim_steps[r]), case
                for i, ((w, b), (sw, sb)) in enumerate(zip(res["steps"], sim_steps[r])):
                    assert torch.equal(w.double(), sw) and torch.equal(b.double(), sb), \
                        f"{case}: rank {r} step {i} is not the exact float64 result (rounding, or another rule)"
                    out[f"{case}.step.{r}.{i}.weight"], out[f"{case}.step.{r}.{i}.bias"] = w, b
                w, b = res["final"]
                assert torch.equal(w.double(), sim_final[0]) and torch.equal(b.double(), sim_final[1]), \
                    f"{case}: rank {r}'s final model is not the last joiner's"
                out[f"{case}.final.{r}.weight"], out[f"{case}.final.{r}.bias"] = w, b
            metadata[f"{case}.world"] = str(cfg["world"])
            metadata[f"{case}.batches"] = json.dumps(cfg["batches"])
            metadata[f"{case}.divide_by_initial_world_size"] = json.dumps(cfg["divide_by_initial"])
            metadata[f"{case}.bucket_cap_mb"] = repr(cfg.get("bucket_cap_mb", 25))
            metadata[f"{case}.first_bucket_bytes"] = str(cfg.get("first_bucket_bytes", 1 << 20))
            print(f"{case}: PyTorch's Join equals the exact float64 rules on every rank and step")
    write_safetensors(path, out, metadata)
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "join_golden.safetensors"))
