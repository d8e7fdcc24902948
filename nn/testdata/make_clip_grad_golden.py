#!/usr/bin/python3
"""Golden data for nn/clip_grad_test.cc, from PyTorch 1.13's
torch.nn.utils.clip_grad_norm_ and clip_grad_value_ (Debian's python3-torch).

    /usr/bin/python3 nn/testdata/make_clip_grad_golden.py nn/testdata/clip_grad_golden.safetensors

Three parameters with gradients of shapes [32, 20], [32] and [4, 16] (normal
values of three magnitudes) and one without a gradient (skipped by both).
Cases (prefix <case>), each from the same gradients:

  l2         norm_type 2, max_norm 1.0 (clips)
  l2_noclip  norm_type 2, max_norm 1e4 (coefficient clamped to 1)
  l1         norm_type 1, max_norm 5.0
  linf       norm_type inf, max_norm 0.5
  p3         norm_type 3, max_norm 0.7
  value      clip_grad_value_(0.2)

Stored: grad.<i> (the gradients before, f32), <case>.total (f32, 0-d; not for
"value"), <case>.grad.<i> (after). Metadata: <case>.max_norm, <case>.norm_type
("inf" for inf), value.clip_value. Running it twice gives the same bytes.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import write_safetensors  # noqa: E402

SHAPES = [(32, 20), (32,), (4, 16)]
SCALES = [0.3, 0.1, 2.0]
CASES = {
    "l2": (2.0, 1.0),
    "l2_noclip": (2.0, 1e4),
    "l1": (1.0, 5.0),
    "linf": (math.inf, 0.5),
    "p3": (3.0, 0.7),
}
CLIP_VALUE = 0.2


def gradients():
    gen = torch.Generator().manual_seed(20261203)
    return [torch.randn(shape, generator=gen) * scale for shape, scale in zip(SHAPES, SCALES)]


def params_with(grads):
    params = []
    for g in grads:
        p = torch.zeros(g.shape, requires_grad=True)
        p.grad = g.clone()
        params.append(p)
    params.append(torch.zeros(3, requires_grad=True))  # No gradient: skipped.
    return params


def main(path):
    torch.set_num_threads(1)
    base = gradients()
    out, metadata = {}, {}
    for i, g in enumerate(base):
        out[f"grad.{i}"] = g.clone()
    for case, (norm_type, max_norm) in CASES.items():
        params = params_with(base)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
        out[f"{case}.total"] = total.detach().clone().reshape(())
        for i, p in enumerate(params[:-1]):
            out[f"{case}.grad.{i}"] = p.grad.clone()
        assert params[-1].grad is None
        metadata[f"{case}.max_norm"] = repr(max_norm)
        metadata[f"{case}.norm_type"] = "inf" if math.isinf(norm_type) else repr(norm_type)
    params = params_with(base)
    torch.nn.utils.clip_grad_value_(params, CLIP_VALUE)
    for i, p in enumerate(params[:-1]):
        out[f"value.grad.{i}"] = p.grad.clone()
    metadata["value.clip_value"] = repr(CLIP_VALUE)
    # PyTorch's error for a non-finite norm, for the message test.
    bad = params_with(base)
    bad[0].grad[0, 0] = math.inf
    try:
        torch.nn.utils.clip_grad_norm_(bad, 1.0, error_if_nonfinite=True)
        raise SystemExit("expected clip_grad_norm_ to refuse an infinite norm")
    except RuntimeError as e:
        metadata["nonfinite.message"] = str(e)
    write_safetensors(path, out, metadata)
    print(f"wrote {len(out)} tensors to {path}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                             "clip_grad_golden.safetensors"))
