#!/usr/bin/python3
"""Golden data for ddp/sync_batch_norm_test.cc from PyTorch 1.13.

    /usr/bin/python3 ddp/testdata/make_sync_batch_norm_golden.py [OUT]

Debian's PyTorch is CPU-only and its SyncBatchNorm refuses CPU tensors
("SyncBatchNorm expected input tensor to be on GPU"), so the reference is
what SyncBatchNorm computes by definition: BatchNorm (torch.nn.BatchNorm1d /
2d) on the concatenation of every rank's batch, with each rank's upstream
gradient concatenated the same way (a rank's input gradient is its slice of
the concatenated one; its weight and bias gradients are its own slice's
sums, which DDP then averages). The script checks that claim where it can:
the per-rank weight gradients it stores sum to the global ones.

Cases, 3 ranks each, 3 training steps then 1 in eval mode:
  bn2d_uneven   BatchNorm2d(3), rank batches of 2, 0 and 3 images of 4x4
                (rotating each step, so every rank has the empty one once),
                momentum 0.1
  bn1d_single   BatchNorm1d(4) on [1, 4] per rank (one value per channel on
                each rank: a local BatchNorm would refuse it), momentum None
                (the cumulative average)

Stored per case (f32): <case>.weight, <case>.bias (initial); per step
<case>.<step>.x<r> / .g<r> (rank r's input and upstream gradient; step is
train0..2 or eval), .y / .grad_input (of the concatenation), .grad_weight /
.grad_bias (global), .grad_weight<r> / .grad_bias<r> (rank r's slice), and
after training steps .running_mean / .running_var / .num_batches_tracked.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "nn", "testdata"))
from read_safetensors import write_safetensors  # noqa: E402

RANKS = 3
CASES = {
    "bn2d_uneven": dict(module=lambda: torch.nn.BatchNorm2d(3), sizes=[2, 0, 3], tail=(3, 4, 4)),
    "bn1d_single": dict(module=lambda: torch.nn.BatchNorm1d(4, momentum=None), sizes=[1, 1, 1], tail=(4,)),
}


def run_case(name, spec, gen, out):
    bn = spec["module"]()
    with torch.no_grad():
        bn.weight.copy_(torch.rand(bn.weight.shape, generator=gen) + 0.5)
        bn.bias.copy_(torch.randn(bn.bias.shape, generator=gen))
    out[f"{name}.weight"] = bn.weight.detach().clone()
    out[f"{name}.bias"] = bn.bias.detach().clone()
    for step in ["train0", "train1", "train2", "eval"]:
        k = int(step[-1]) if step != "eval" else 3
        sizes = spec["sizes"][k % RANKS:] + spec["sizes"][:k % RANKS]
        xs = [torch.randn((n,) + spec["tail"], generator=gen) * 2.0 + 0.5 for n in sizes]
        gs = [torch.randn((n,) + spec["tail"], generator=gen) for n in sizes]
        bn.train(step != "eval")
        bn.zero_grad(set_to_none=True)
        x = torch.cat(xs).requires_grad_(True)
        y = bn(x)
        y.backward(torch.cat(gs))
        p = f"{name}.{step}."
        for r in range(RANKS):
            out[f"{p}x{r}"] = xs[r]
            out[f"{p}g{r}"] = gs[r]
        out[p + "y"] = y.detach().clone()
        out[p + "grad_input"] = x.grad.detach().clone()
        out[p + "grad_weight"] = bn.weight.grad.detach().clone()
        out[p + "grad_bias"] = bn.bias.grad.detach().clone()
        # Each rank's own share: the same backward with the other ranks'
        # upstream gradients zeroed.
        total_w = torch.zeros_like(bn.weight, dtype=torch.float64)
        for r in range(RANKS):
            masked = [g if i == r else torch.zeros_like(g) for i, g in enumerate(gs)]
            with torch.no_grad():
                saved = (bn.running_mean.clone(), bn.running_var.clone(), bn.num_batches_tracked.clone())
            bn.zero_grad(set_to_none=True)
            xr = torch.cat(xs).requires_grad_(True)
            bn(xr).backward(torch.cat(masked))
            with torch.no_grad():  # That forward moved the running statistics once more: undo it.
                bn.running_mean.copy_(saved[0]), bn.running_var.copy_(saved[1])
                bn.num_batches_tracked.copy_(saved[2])
            out[f"{p}grad_weight{r}"] = bn.weight.grad.detach().clone()
            out[f"{p}grad_bias{r}"] = bn.bias.grad.detach().clone()
            total_w += bn.weight.grad.double()
        assert torch.allclose(total_w, out[p + "grad_weight"].double(), rtol=1e-5, atol=1e-5), name
        if step != "eval":
            out[p + "running_mean"] = bn.running_mean.clone()
            out[p + "running_var"] = bn.running_var.clone()
            out[p + "num_batches_tracked"] = bn.num_batches_tracked.clone()


def main(path):
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(30)
    out = {}
    for name, spec in CASES.items():
        run_case(name, spec, gen, out)
    write_safetensors(path, out, {"ranks": str(RANKS)})
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "sync_batch_norm_golden.safetensors"))
