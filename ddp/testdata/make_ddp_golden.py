#!/usr/bin/python3
"""Golden data for lockstep's DDP, from PyTorch 1.13's own DistributedDataParallel.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=lo \\
        /usr/bin/python3 ddp/testdata/make_ddp_golden.py [OUT_DIR]

OUT_DIR defaults to this script's directory. Writes one safetensors file per
case (see README.md next to this script for the key scheme and the DDP
semantics the files pin down):

  ddp_plain.safetensors            default bucket_cap_mb=25 (one bucket)
  ddp_buckets.safetensors          bucket_cap_mb=0.001 and _DEFAULT_FIRST_BUCKET_BYTES=1048
                                   (several buckets once they are rebuilt)
  ddp_buckets_per_param.safetensors  bucket_cap_mb=1e-6 (1 byte) and first bucket 1 byte
                                   (one parameter per bucket once rebuilt)
  ddp_fp16.safetensors             fp16_compress_hook
  ddp_no_sync.safetensors          2 micro-batches per step, the first under no_sync()
  ddp_unused.safetensors           find_unused_parameters=True, a model with an unused fc_unused

Each case: 2 ranks (torch.multiprocessing.spawn, gloo, init_method file://),
CPU, one thread per rank, the model built right after torch.manual_seed(0) on
each rank, SGD(lr=0.1, momentum=0.9), CrossEntropyLoss (mean over the rank's
local batch of 8), 5 steps. Every rank's results are compared in the parent:
parameters must be bit-identical across ranks after DDP's broadcast and after
every step.
"""
import collections
import json
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "nn", "testdata"))
from read_safetensors import write_safetensors  # noqa: E402

WORLD_SIZE = 2
STEPS = 5
BATCH = 8          # per rank, per (micro-)batch
IN_FEATURES = 20
CLASSES = 4
LR = 0.1
MOMENTUM = 0.9
DATA_SEED = 1234

CASES = {
    "plain": dict(),
    "buckets": dict(bucket_cap_mb=0.001, first_bucket_bytes=1048),
    "buckets_per_param": dict(bucket_cap_mb=1e-6, first_bucket_bytes=1),
    "fp16": dict(hook="fp16_compress_hook"),
    "no_sync": dict(micro_batches=2),
    "unused": dict(find_unused_parameters=True, model="unused"),
}


class WithUnused(torch.nn.Module):
    """fc1 -> relu -> fc2 -> relu -> fc3; fc_unused takes part in nothing."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(IN_FEATURES, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.fc3 = torch.nn.Linear(16, CLASSES)
        self.fc_unused = torch.nn.Linear(16, CLASSES)

    def forward(self, x):
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


def make_model(kind):
    torch.manual_seed(0)
    if kind == "unused":
        return WithUnused()
    return torch.nn.Sequential(collections.OrderedDict([
        ("fc1", torch.nn.Linear(IN_FEATURES, 32)), ("relu1", torch.nn.ReLU()),
        ("fc2", torch.nn.Linear(32, 16)), ("relu2", torch.nn.ReLU()),
        ("fc3", torch.nn.Linear(16, CLASSES))]))


def make_data(micro_batches):
    """data[rank][step][micro] = (x [8, 20] f32, y [8] i64), from one seeded generator."""
    gen = torch.Generator().manual_seed(DATA_SEED)
    data = []
    for _ in range(WORLD_SIZE):
        per_rank = []
        for _ in range(STEPS):
            micro = []
            for _ in range(micro_batches):
                x = torch.randn(BATCH, IN_FEATURES, generator=gen)
                y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
                micro.append((x, y))
            per_rank.append(micro)
        data.append(per_rank)
    return data


def bucket_names(ddp, names_by_id):
    """Parameter names per bucket, in the reducer's bucket order."""
    return [[names_by_id[id(p)] for p in b.parameters()]
            for b in ddp.reducer._get_zeros_like_grad_buckets()]


def worker(rank, case, init_file, out_dir):
    torch.set_num_threads(1)
    cfg = CASES[case]
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank,
                            world_size=WORLD_SIZE)
    if "first_bucket_bytes" in cfg:
        # distributed.py reads dist._DEFAULT_FIRST_BUCKET_BYTES when it builds
        # the Reducer ("User can set dist._DEFAULT_FIRST_BUCKET_BYTES to tune
        # DDP first bucket.")
        dist._DEFAULT_FIRST_BUCKET_BYTES = cfg["first_bucket_bytes"]
    model = make_model(cfg.get("model", "mlp"))
    if rank != 0:
        # Make the broadcast from rank 0 observable: rank 1 starts elsewhere.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
    ddp = DDP(model, bucket_cap_mb=cfg.get("bucket_cap_mb", 25),
              find_unused_parameters=cfg.get("find_unused_parameters", False))
    names_by_id = {id(p): n for n, p in model.named_parameters()}
    local_grads = {}  # this step's gradients as the hook received them
    if cfg.get("hook"):
        hook = getattr(default_hooks, cfg["hook"])

        def recording_hook(state, bucket):
            # With a hook the reducer copies each grad into the bucket without
            # dividing by the world size: these are this rank's own gradients.
            for p, g in zip(bucket.parameters(), bucket.gradients()):
                local_grads[names_by_id[id(p)]] = g.detach().clone()
            return hook(state, bucket)
        ddp.register_comm_hook(None, recording_hook)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()
    micro_batches = cfg.get("micro_batches", 1)
    data = make_data(micro_batches)[rank]

    result = {"init": {n: p.detach().clone() for n, p in model.named_parameters()},
              "buckets_at_construction": bucket_names(ddp, names_by_id),
              "losses": [], "grads": [], "params": [], "buckets_after_step": [],
              "local_grads": []}
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        local_grads.clear()
        losses = []
        for m, (x, y) in enumerate(data[step]):
            if m < micro_batches - 1:
                with ddp.no_sync():
                    loss = loss_fn(ddp(x), y)
                    loss.backward()
            else:
                loss = loss_fn(ddp(x), y)
                loss.backward()
            losses.append(loss.detach().clone())
        result["losses"].append(losses)
        result["local_grads"].append(dict(local_grads))
        result["grads"].append({n: p.grad.detach().clone()
                                for n, p in model.named_parameters() if p.grad is not None})
        opt.step()
        result["params"].append({n: p.detach().clone() for n, p in model.named_parameters()})
        result["buckets_after_step"].append(bucket_names(ddp, names_by_id))
    logging = ddp._get_ddp_logging_data()
    result["logging"] = {k: v for k, v in logging.items()
                         if "bucket" in k or k in ("find_unused_parameters", "world_size",
                                                   "comm_hook", "backend_name")}
    torch.save(result, os.path.join(out_dir, f"rank{rank}.pt"))
    dist.barrier()
    # Skip interpreter teardown: in 1.13 destroying the Reducer/ProcessGroupGloo
    # at exit can deadlock (~ProcessGroupGloo joins a gloo worker thread that
    # waits for the GIL to free a tensor, while the main thread holds it).
    sys.stdout.flush()
    os._exit(0)


def run_case(case, tmp):
    init_file = os.path.join(tmp, f"{case}.init")
    mp.spawn(worker, args=(case, init_file, tmp), nprocs=WORLD_SIZE, join=True)
    results = [torch.load(os.path.join(tmp, f"rank{r}.pt")) for r in range(WORLD_SIZE)]
    for r in range(WORLD_SIZE):
        os.remove(os.path.join(tmp, f"rank{r}.pt"))
    r0 = results[0]
    for other in results[1:]:
        for a, b in [(r0["init"], other["init"])] + list(zip(r0["params"], other["params"])) \
                + list(zip(r0["grads"], other["grads"])):
            assert a.keys() == b.keys(), (case, a.keys(), b.keys())
            for n in a:
                assert torch.equal(a[n], b[n]), f"{case}: ranks differ in {n}"
    return results


def main(out_dir):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    summary = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case, cfg in CASES.items():
            results = run_case(case, tmp)
            r0 = results[0]
            micro_batches = cfg.get("micro_batches", 1)
            data = make_data(micro_batches)
            out = {}
            for n, t in r0["init"].items():
                out["init." + n] = t
            for r in range(WORLD_SIZE):
                for k in range(STEPS):
                    for m in range(micro_batches):
                        prefix = f"rank{r}.step{k}" + (f".micro{m}" if micro_batches > 1 else "")
                        x, y = data[r][k][m]
                        out[prefix + ".x"] = x
                        out[prefix + ".y"] = y
                        out[prefix + ".loss"] = results[r]["losses"][k][m].float().reshape(())
                    for n, t in results[r]["local_grads"][k].items():
                        out[f"rank{r}.step{k}.local_grad.{n}"] = t
            for r in range(WORLD_SIZE):
                out[f"rank{r}.losses"] = torch.stack(
                    [torch.stack(ls) for ls in results[r]["losses"]]).float().reshape(
                        (STEPS, micro_batches) if micro_batches > 1 else (STEPS,))
            for k in range(STEPS):
                for n, t in r0["grads"][k].items():
                    out[f"step{k}.grad.{n}"] = t
                for n, t in r0["params"][k].items():
                    out[f"step{k}.{n}"] = t
            for n, t in r0["params"][-1].items():
                out["final." + n] = t
            param_names = list(r0["init"])
            if case == "unused":
                assert torch.equal(r0["init"]["fc_unused.weight"], r0["params"][-1]["fc_unused.weight"])
                assert "fc_unused.weight" not in r0["grads"][0]
            metadata = {
                "case": case,
                "config": json.dumps(cfg, sort_keys=True),
                "torch": torch.__version__,
                "world_size": str(WORLD_SIZE),
                "steps": str(STEPS),
                "batch_per_rank": str(BATCH),
                "micro_batches": str(micro_batches),
                "optimizer": json.dumps(["SGD", dict(lr=LR, momentum=MOMENTUM)]),
                "loss": "CrossEntropyLoss(reduction='mean') over each rank's local (micro-)batch",
                "parameters": json.dumps(param_names),
                "buckets_at_construction": json.dumps(r0["buckets_at_construction"]),
                "buckets_after_step": json.dumps(r0["buckets_after_step"]),
                "ddp_logging_data": json.dumps(r0["logging"], sort_keys=True),
            }
            path = os.path.join(out_dir, f"ddp_{case}.safetensors")
            write_safetensors(path, out, metadata)
            summary[case] = dict(bytes=os.path.getsize(path), tensors=len(out),
                                 losses0=[round(float(v), 6) for v in out["rank0.losses"].flatten()],
                                 construction=r0["buckets_at_construction"],
                                 rebuilt=r0["buckets_after_step"][-1])
            print(f"wrote {path}: {len(out)} tensors, {os.path.getsize(path)} bytes; "
                  f"buckets at construction {r0['buckets_at_construction']}, "
                  f"after step 5 {r0['buckets_after_step'][-1]}", flush=True)
    # Bucketing never changes the numbers (a per-element sum of 2 ranks).
    from read_safetensors import read_safetensors, to_torch
    plain = to_torch(read_safetensors(os.path.join(out_dir, "ddp_plain.safetensors"))[0])
    for case in ("buckets", "buckets_per_param"):
        other = to_torch(read_safetensors(os.path.join(out_dir, f"ddp_{case}.safetensors"))[0])
        for k, v in plain.items():
            assert torch.equal(v, other[k]), f"{case} differs from plain in {k}"
    print("all ranks agree; bucketed cases are bit-identical to plain")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
