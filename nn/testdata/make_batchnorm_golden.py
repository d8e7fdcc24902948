#!/usr/bin/python3
"""Golden data for nn/batch_norm_test.cc, from PyTorch 1.13 (Debian's python3-torch).

    /usr/bin/python3 nn/testdata/make_batchnorm_golden.py nn/testdata/batchnorm_golden.safetensors

Cases (prefix <case>): "bn1d" BatchNorm1d(3) on [6, 3]; "bn1d_3d" BatchNorm1d(3)
on [4, 3, 5]; "bn2d" BatchNorm2d(3) on [2, 3, 4, 5]; "bn2d_cma" BatchNorm2d(3,
momentum=None) (cumulative average). Each starts from random weight and bias
(so that affine terms matter) and runs three training steps, then one step in
eval mode, each step a forward on x and a backward of sum(y * g) (so dy = g),
with the gradients zeroed before each step. Stored, f32 unless noted:

  <case>.weight, <case>.bias              initial parameters
  <case>.train<k>.x / .g / .y             step k's input, output gradient, output
  <case>.train<k>.grad_input / .grad_weight / .grad_bias
  <case>.train<k>.running_mean / .running_var / .num_batches_tracked (i64, 0-d)
                                          buffers after step k
  <case>.eval.x / .g / .y / .grad_input / .grad_weight / .grad_bias
  seq.<name>, seq.x, seq.y                Sequential(OrderedDict(fc1=Linear(4, 3),
                                          bn=BatchNorm1d(3), relu=ReLU())): its
                                          state_dict after one training forward,
                                          and its eval-mode output for seq.x
The metadata holds each case's state_dict keys (JSON lists), in torch's order.
"""
import collections
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import write_safetensors  # noqa: E402

CASES = {
    "bn1d": (lambda: torch.nn.BatchNorm1d(3), (6, 3)),
    "bn1d_3d": (lambda: torch.nn.BatchNorm1d(3), (4, 3, 5)),
    "bn2d": (lambda: torch.nn.BatchNorm2d(3), (2, 3, 4, 5)),
    "bn2d_cma": (lambda: torch.nn.BatchNorm2d(3, momentum=None), (2, 3, 4, 5)),
}


def run_case(key, make, shape, gen, out, metadata):
    bn = make()
    with torch.no_grad():
        bn.weight.copy_(torch.randn(3, generator=gen) * 0.5 + 1.0)
        bn.bias.copy_(torch.randn(3, generator=gen))
    out[f"{key}.weight"] = bn.weight.detach().clone()
    out[f"{key}.bias"] = bn.bias.detach().clone()
    metadata[f"{key}.state_dict_keys"] = json.dumps(list(bn.state_dict().keys()))
    steps = [f"train{k}" for k in range(3)] + ["eval"]
    for step in steps:
        if step == "eval":
            bn.eval()
        bn.zero_grad()
        # A per-channel offset and scale, so the statistics differ by channel.
        x = torch.randn(*shape, generator=gen) * 2.0 + 0.5
        x.requires_grad_(True)
        g = torch.randn(*shape, generator=gen)
        y = bn(x)
        (y * g).sum().backward()
        p = f"{key}.{step}."
        out[p + "x"] = x.detach().clone()
        out[p + "g"] = g
        out[p + "y"] = y.detach().clone()
        out[p + "grad_input"] = x.grad.detach().clone()
        out[p + "grad_weight"] = bn.weight.grad.detach().clone()
        out[p + "grad_bias"] = bn.bias.grad.detach().clone()
        if step != "eval":
            out[p + "running_mean"] = bn.running_mean.detach().clone()
            out[p + "running_var"] = bn.running_var.detach().clone()
            out[p + "num_batches_tracked"] = bn.num_batches_tracked.detach().clone()


def main(path):
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(4321)
    out, metadata = {}, {"torch": torch.__version__}
    for key, (make, shape) in CASES.items():
        run_case(key, make, shape, gen, out, metadata)

    torch.manual_seed(3)
    seq = torch.nn.Sequential(collections.OrderedDict(
        fc1=torch.nn.Linear(4, 3), bn=torch.nn.BatchNorm1d(3), relu=torch.nn.ReLU()))
    with torch.no_grad():
        seq(torch.randn(5, 4, generator=gen))  # moves the running statistics
    seq.eval()
    for name, t in seq.state_dict().items():
        out["seq." + name] = t.detach().clone()
    metadata["seq.state_dict_keys"] = json.dumps(list(seq.state_dict().keys()))
    x = torch.randn(5, 4, generator=gen)
    out["seq.x"] = x
    with torch.no_grad():
        out["seq.y"] = seq(x)

    write_safetensors(path, out, metadata)
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "batchnorm_golden.safetensors"))
