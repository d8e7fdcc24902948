#!/usr/bin/python3
"""Writes torch_ddp_inputs.safetensors: the initial weights and the batches of
interop/torch/ddp:ddp_golden_test (the expected results are computed live, by
torch_ddp_reference.py).

    /usr/bin/python3 interop/torch/ddp/testdata/make_torch_ddp_inputs.py [OUT]

Tensors: init/<model>/<param> (every parameter of the model with its unused
head, f32), data/<model>/rank<r>/step<s>/micro<m>/x (f32) and .../y (i64),
for both models, 2 ranks, 3 steps, 2 micro-batches (the no_sync case uses
both, the others the first).
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "nn", "testdata"))
import golden_blocks as models  # noqa: E402
from read_safetensors import write_safetensors  # noqa: E402

WORLD_SIZE, STEPS, MICRO = 2, 3, 2


def main(out):
    torch.manual_seed(20261202)
    tensors = {}
    for model in ("resnet", "transformer"):
        m = models.make_model(model, with_unused=True)
        for name, p in m.named_parameters():
            tensors[f"init/{model}/{name}"] = p.detach().clone()
        for r in range(WORLD_SIZE):
            for s in range(STEPS):
                for k in range(MICRO):
                    key = f"data/{model}/rank{r}/step{s}/micro{k}"
                    tensors[key + "/x"] = torch.randn(models.input_shape(model))
                    tensors[key + "/y"] = torch.randint(0, models.CLASSES[model], (models.BATCH[model],))
    write_safetensors(out, tensors, {"made_by": "interop/torch/ddp/testdata/make_torch_ddp_inputs.py"})


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "torch_ddp_inputs.safetensors"))
