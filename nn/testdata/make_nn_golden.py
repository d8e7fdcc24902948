#!/usr/bin/python3
"""Golden data for nn/golden_test.cc, from PyTorch 1.13 (Debian's python3-torch).

    /usr/bin/python3 nn/testdata/make_nn_golden.py nn/testdata/mlp_golden.safetensors

A fixed MLP (Flatten, Linear 20->16, ReLU, Linear 16->12, ReLU, Linear 12->5)
built right after torch.manual_seed(0), so its initial weights come from
PyTorch's own initialization; then, for each optimizer configuration, three
training steps on three fixed batches. Stored, all f32 unless noted:

  init.<param>                initial parameters (lockstep must reproduce them bit for bit)
  batch<k>.x, batch<k>.y      inputs [8, 4, 5] and labels (i64) of step k
  step0.logits, step0.loss    forward of batch 0 with the initial weights (loss 0-d)
  step0.grad.<param>          gradients of that loss
  <opt>.step<k>.<param>       parameters after step k+1 of optimizer <opt>
  <opt>.step<k>.loss          the loss computed in step k+1 (before its update)
  <opt>.step<k>.grad.<param>  the gradients of that loss
  <opt>.step<k>.state.<param>.<key>
                              the optimizer's state after step k+1 (momentum_buffer;
                              exp_avg, exp_avg_sq, max_exp_avg_sq, step as f32), so a
                              test can start each step from PyTorch's own state
  conv.init.<param>, conv.x, conv.y, conv.logits, conv.loss, conv.grad.<param>,
  conv.sgd.step<k>.<param>    a small CNN (Conv2d 1->4 3x3 pad 1, ReLU, MaxPool2d
                              3 stride 2 pad 1 (overlapping windows), Conv2d 4->6
                              3x3 stride 2 pad 1, ReLU, Flatten, Linear 24->5)
                              built after manual_seed(2), its forward/backward
                              on [3, 1, 8, 8], then 2 steps of SGD(momentum 0.9);
                              conv.sgd.step1.grad.<param> the second step's gradients
  big.weight_head/tail, big.bias, big.weight_sum (f64)
                              Linear(784, 512) after manual_seed(1): first and
                              last 64 weights, all biases, and the f64 sum of
                              all weights (init check at the trainer's size)
The optimizer configurations are in the file's metadata as JSON.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import write_safetensors  # noqa: E402

OPTIMIZERS = {
    "sgd": ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=1e-3)),
    "sgd_nesterov": ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=1e-3)),
    "adam_amsgrad": ("Adam", dict(lr=1e-2, weight_decay=1e-3, amsgrad=True)),
    "adamw": ("AdamW", dict(lr=1e-2, weight_decay=1e-2)),
}


def make_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(20, 16), torch.nn.ReLU(),
        torch.nn.Linear(16, 12), torch.nn.ReLU(),
        torch.nn.Linear(12, 5))


def main(path):
    torch.set_num_threads(1)
    out = {}
    model = make_model()
    for name, p in model.named_parameters():
        out["init." + name] = p.detach().clone()
    gen = torch.Generator().manual_seed(1234)
    batches = []
    for k in range(3):
        x = torch.randn(8, 4, 5, generator=gen)
        y = torch.randint(0, 5, (8,), generator=gen)
        batches.append((x, y))
        out[f"batch{k}.x"] = x
        out[f"batch{k}.y"] = y

    x, y = batches[0]
    logits = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    out["step0.logits"] = logits.detach().clone()
    out["step0.loss"] = loss.detach().clone()
    for name, p in model.named_parameters():
        out["step0.grad." + name] = p.grad.detach().clone()

    for key, (cls, kwargs) in OPTIMIZERS.items():
        model = make_model()
        opt = getattr(torch.optim, cls)(model.parameters(), **kwargs)
        for k, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            for name, p in model.named_parameters():
                out[f"{key}.step{k}.grad.{name}"] = p.grad.detach().clone()
            opt.step()
            out[f"{key}.step{k}.loss"] = loss.detach().clone()
            for name, p in model.named_parameters():
                out[f"{key}.step{k}.{name}"] = p.detach().clone()
                for skey, t in opt.state[p].items():
                    out[f"{key}.step{k}.state.{name}.{skey}"] = t.detach().clone().float()

    torch.manual_seed(2)
    conv = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, stride=2, padding=1),
        torch.nn.Conv2d(4, 6, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(24, 5))
    for name, p in conv.named_parameters():
        out["conv.init." + name] = p.detach().clone()
    x = torch.randn(3, 1, 8, 8, generator=gen)
    y = torch.randint(0, 5, (3,), generator=gen)
    out["conv.x"], out["conv.y"] = x, y
    logits = conv(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    loss.backward()
    out["conv.logits"] = logits.detach().clone()
    out["conv.loss"] = loss.detach().clone()
    for name, p in conv.named_parameters():
        out["conv.grad." + name] = p.grad.detach().clone()
    opt = torch.optim.SGD(conv.parameters(), lr=0.1, momentum=0.9)
    for k in range(2):
        if k > 0:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(conv(x), y).backward()
            for name, p in conv.named_parameters():
                out[f"conv.sgd.step{k}.grad.{name}"] = p.grad.detach().clone()
        opt.step()
        for name, p in conv.named_parameters():
            out[f"conv.sgd.step{k}.{name}"] = p.detach().clone()

    torch.manual_seed(1)
    big = torch.nn.Linear(784, 512)
    w = big.weight.detach().flatten()
    out["big.weight_head"] = w[:64].clone()
    out["big.weight_tail"] = w[-64:].clone()
    out["big.bias"] = big.bias.detach().clone()
    out["big.weight_sum"] = w.double().sum().reshape(())

    metadata = {"optimizers": json.dumps({k: [c, a] for k, (c, a) in OPTIMIZERS.items()},
                                         sort_keys=True),
                "torch": torch.__version__}
    write_safetensors(path, out, metadata)
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else
         os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp_golden.safetensors"))
