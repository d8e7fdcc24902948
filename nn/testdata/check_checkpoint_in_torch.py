#!/usr/bin/python3
"""Loads lockstep checkpoints into PyTorch 1.13 and compares logits.

    bazel run //nn:write_example_checkpoint -- /tmp/ckpt
    /usr/bin/python3 nn/testdata/check_checkpoint_in_torch.py /tmp/ckpt

model.safetensors goes straight into model.load_state_dict (strict); the
training checkpoint's model part is the entries without '/' (the optimizer
state is under "optimizer/"). Uses the `safetensors` package when installed,
else nn/testdata/read_safetensors.py. Exits non-zero on any mismatch.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def load(path):
    try:
        from safetensors.torch import load_file
        return load_file(path), None
    except ImportError:
        from read_safetensors import read_safetensors, to_torch
        entries, metadata = read_safetensors(path)
        return to_torch(entries), metadata


def main(directory):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    weights, _ = load(os.path.join(directory, "model.safetensors"))
    model.load_state_dict(weights)  # strict: names and shapes must match exactly
    probe, _ = load(os.path.join(directory, "probe.safetensors"))
    with torch.no_grad():
        logits = model.eval()(probe["x"])
    diff = (logits - probe["logits"]).abs().max().item()
    scale = probe["logits"].abs().max().item()
    print(f"model.safetensors: {len(weights)} tensors loaded strictly; max |logits diff| = {diff:.3g} "
          f"(max |logit| {scale:.3g})")
    ok = diff <= 1e-5 * max(scale, 1.0)

    ckpt, metadata = load(os.path.join(directory, "checkpoint.safetensors"))
    model_part = {k: v for k, v in ckpt.items() if "/" not in k}
    optimizer_part = sorted(k for k in ckpt if k.startswith("optimizer/"))
    model.load_state_dict(model_part)
    with torch.no_grad():
        same = torch.equal(model(probe["x"]), logits)
    print(f"checkpoint.safetensors: {len(model_part)} model tensors loaded strictly "
          f"(logits identical: {same}), {len(optimizer_part)} optimizer tensors "
          f"({optimizer_part[0]} ...), metadata {dict(sorted((metadata or {}).items()))}")
    ok = ok and same
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
