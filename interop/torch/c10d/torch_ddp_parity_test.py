"""PyTorch's own DistributedDataParallel over backend "lockstep" and over
"gloo": the same training ends with bit-identical parameters.

Run by torch_ddp_parity_test.sh (PYTHONPATH holds lockstep_torch.so):

    /usr/bin/python3 torch_ddp_parity_test.py [--only SCENARIO]

Each scenario trains 2 ranks (processes, file:// rendezvous) for several
steps, once per backend, and writes every rank's losses and final
parameters; the driver compares them bit for bit. With 2 ranks every
element of a reduced gradient is one addition (a + b), the same in any
order and any algorithm, and DDP divides by the world size before the
all-reduce on both backends, so nothing may differ; a backend that drops,
reorders or corrupts a bucket shows. Scenarios: an MLP with one bucket
and with many small ones (bucket_cap_mb), a CNN with BatchNorm buffers
(broadcast every forward) under the fp16 compression hook, and no_sync
gradient accumulation.
"""

import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile
import time

SCENARIOS = ["mlp", "mlp_buckets", "cnn_fp16", "no_sync"]
STEPS = 6
DEADLINE_S = 300


def build(torch, scenario):
    nn = torch.nn
    torch.manual_seed(0)
    if scenario.startswith("cnn"):
        return nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(2),
            nn.Flatten(), nn.Linear(64, 10))
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def rank_main(args):
    import torch
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if args.backend == "lockstep":
        import lockstep_torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(args.backend, init_method=f"file://{args.store}", rank=args.rank, world_size=2,
                            timeout=datetime.timedelta(seconds=60))
    model = build(torch, args.scenario)
    kwargs = {}
    if args.scenario == "mlp_buckets":
        kwargs["bucket_cap_mb"] = 0.05  # ~12 buckets for the MLP's 235k parameters
    ddp = torch.nn.parallel.DistributedDataParallel(model, **kwargs)
    if args.scenario == "cnn_fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1000 + args.rank)  # each rank its own data
    losses = []
    for step in range(STEPS):
        if args.scenario.startswith("cnn"):
            x = torch.randn(16, 1, 12, 12, generator=gen)
        else:
            x = torch.randn(32, 784, generator=gen)
        y = torch.randint(0, 10, (x.shape[0],), generator=gen)
        if args.scenario == "no_sync" and step % 2 == 0:
            with ddp.no_sync():  # accumulate locally, synchronize on the next step
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
            continue
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    state = {k: v.detach().clone() for k, v in ddp.module.state_dict().items()}
    torch.save({"losses": losses, "state": state}, args.out)
    dist.barrier()
    dist.destroy_process_group()


def run(scenario, backend, tmp):
    store = os.path.join(tmp, f"{scenario}.{backend}.store")
    outs = [os.path.join(tmp, f"{scenario}.{backend}.{r}.pt") for r in range(2)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--rank", str(r), "--backend", backend,
                               "--scenario", scenario, "--store", store, "--out", outs[r]],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    deadline = time.monotonic() + DEADLINE_S
    failed = []
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n[driver] killed at the deadline"
        if p.returncode != 0:
            failed.append(f"--- {backend} rank {r} (exit {p.returncode}) ---\n{out}")
    if failed:
        raise RuntimeError(f"{scenario} over {backend} failed:\n" + "\n".join(failed))
    return outs


def compare(torch, scenario, gloo, lockstep):
    problems = []
    for r in range(2):
        a, b = torch.load(gloo[r]), torch.load(lockstep[r])
        for i, (la, lb) in enumerate(zip(a["losses"], b["losses"])):
            if not torch.equal(la, lb):
                problems.append(f"rank {r} step {i}: loss {lb.item()!r} over lockstep, {la.item()!r} over gloo")
        for name, ta in a["state"].items():
            tb = b["state"][name]
            if not torch.equal(ta, tb):
                diff = (ta.double() - tb.double()).abs().max().item()
                problems.append(f"rank {r} {name}: differs by up to {diff:g}")
    # DDP kept the ranks together (same parameters on both) on each backend.
    for outs, backend in ((gloo, "gloo"), (lockstep, "lockstep")):
        s0, s1 = torch.load(outs[0])["state"], torch.load(outs[1])["state"]
        for name in s0:
            if not torch.equal(s0[name], s1[name]) and "running" not in name and "num_batches" not in name:
                problems.append(f"{backend}: ranks 0 and 1 disagree on {name}")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int)
    parser.add_argument("--backend")
    parser.add_argument("--scenario")
    parser.add_argument("--store")
    parser.add_argument("--out")
    parser.add_argument("--only")
    args = parser.parse_args()
    if args.rank is not None:
        rank_main(args)
        return
    import torch
    # Under Bazel, inside the test's own directory: a killed run leaves
    # nothing in /tmp.
    tmp = tempfile.mkdtemp(prefix="lockstep_ddp_parity.", dir=os.environ.get("TEST_TMPDIR"))
    ok = True
    try:
        for scenario in [args.only] if args.only else SCENARIOS:
            gloo = run(scenario, "gloo", tmp)
            lockstep = run(scenario, "lockstep", tmp)
            problems = compare(torch, scenario, gloo, lockstep)
            if problems:
                ok = False
                print(f"FAIL {scenario}: lockstep and gloo differ:\n  " + "\n  ".join(problems[:20]))
            else:
                final = torch.load(lockstep[0])["losses"][-1].item()
                print(f"ok   {scenario}: {STEPS} steps, losses and parameters bit-identical to gloo's "
                      f"(last loss {final:.6f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
