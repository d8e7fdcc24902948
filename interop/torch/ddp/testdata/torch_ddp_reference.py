#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel (gloo, 2 ranks, one thread each) on
the golden models and cases of interop/torch/ddp:ddp_golden_test, run live by
that test: lockstep's DDP for libtorch must give the same bits.

    /usr/bin/python3 torch_ddp_reference.py INPUTS.safetensors OUT_DIR

Writes OUT_DIR/rank<r>.safetensors with, for every model, case and step s:
<model>/<case>/step<s>/loss<m> (each micro-batch's loss), .../grad/<param>
(the averaged gradient after backward), .../param/<param> (after the
optimizer step) and .../buffer/<buffer> (f32 buffers: BatchNorm's running
statistics, after the step).
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "nn", "testdata"))
import golden_blocks as models  # noqa: E402
from read_safetensors import read_safetensors, to_torch, write_safetensors  # noqa: E402

WORLD_SIZE, STEPS = 2, 3
LR, MOMENTUM = 0.1, 0.9
FROZEN = {"resnet": "stem_conv.weight", "transformer": "ln1.weight"}
# As interop/torch/ddp:ddp_golden_test.cc's kCases.
CASES = {
    "plain": dict(),
    "buckets": dict(bucket_cap_mb=0.001, first_bucket_bytes=1048),
    "gradient_as_bucket_view": dict(gradient_as_bucket_view=True),
    "no_sync": dict(micro=2),
    # Gradient accumulation as the DDP notes teach it: no_sync for the first
    # N - 1 micro-batches, each loss divided by N (the trainers' --grad_accum_steps).
    "accumulate": dict(micro=2, scale_loss=True),
    "unused": dict(find_unused_parameters=True, with_unused=True),
    "frozen": dict(frozen=True),
    "fp16": dict(hook="fp16_compress_hook"),
}


def run(rank, model_name, case, inputs, out):
    cfg = CASES[case]
    default_first = dist._DEFAULT_FIRST_BUCKET_BYTES
    dist._DEFAULT_FIRST_BUCKET_BYTES = cfg.get("first_bucket_bytes", default_first)
    model = models.make_model(model_name, cfg.get("with_unused", False))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(inputs[f"init/{model_name}/{name}"])
            if rank != 0:
                p.add_(1.0)  # DDP's broadcast from rank 0 must undo this.
    if cfg.get("frozen"):
        model.get_parameter(FROZEN[model_name]).requires_grad_(False)
    ddp = DDP(model, bucket_cap_mb=cfg.get("bucket_cap_mb", 25),
              find_unused_parameters=cfg.get("find_unused_parameters", False),
              gradient_as_bucket_view=cfg.get("gradient_as_bucket_view", False))
    dist._DEFAULT_FIRST_BUCKET_BYTES = default_first
    if cfg.get("hook"):
        ddp.register_comm_hook(None, getattr(default_hooks, cfg["hook"]))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    micro = cfg.get("micro", 1)
    for step in range(STEPS):
        opt.zero_grad(set_to_none=True)
        prefix = f"{model_name}/{case}/step{step}"
        for m in range(micro):
            data = f"data/{model_name}/rank{rank}/step{step}/micro{m}"
            x, y = inputs[data + "/x"], inputs[data + "/y"]
            divisor = micro if cfg.get("scale_loss") else 1
            if m < micro - 1:
                with ddp.no_sync():
                    loss = F.cross_entropy(ddp(x), y) / divisor
                    loss.backward()
            else:
                loss = F.cross_entropy(ddp(x), y) / divisor
                loss.backward()
            out[f"{prefix}/loss{m}"] = loss.detach().clone().reshape(1)
        for name, p in model.named_parameters():
            if p.grad is not None:
                out[f"{prefix}/grad/{name}"] = p.grad.detach().clone()
        opt.step()
        for name, p in model.named_parameters():
            out[f"{prefix}/param/{name}"] = p.detach().clone()
        # BatchNorm's running statistics: broadcast from rank 0 before a
        # forward that follows a synchronized one only.
        for name, b in model.named_buffers():
            if b.dtype == torch.float32:
                out[f"{prefix}/buffer/{name}"] = b.detach().clone()


def worker(rank, inputs_path, init_file, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + init_file, rank=rank, world_size=WORLD_SIZE)
    entries, _ = read_safetensors(inputs_path)
    inputs = to_torch(entries)
    out = {}
    for model_name in ("resnet", "transformer"):
        for case in CASES:
            run(rank, model_name, case, inputs, out)
    write_safetensors(os.path.join(out_dir, f"rank{rank}.safetensors"), out, {})
    dist.barrier()
    # Skip interpreter teardown: in 1.13 destroying ProcessGroupGloo at exit
    # can deadlock (make_ddp_golden.py says how).
    sys.stdout.flush()
    os._exit(0)


def main(inputs_path, out_dir):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(inputs_path, os.path.join(tmp, "init"), out_dir), nprocs=WORLD_SIZE, join=True)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: torch_ddp_reference.py INPUTS.safetensors OUT_DIR")
    main(sys.argv[1], sys.argv[2])
