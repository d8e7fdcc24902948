#!/usr/bin/python3
"""How a Python PyTorch program loads what lockstep's DDP or FSDP for
libtorch trained: the C++ side writes the plain module's state
(named_parameters and named_buffers, or FullyShard::FullStateDict, bridged
with FromTorch) with WriteSafetensorsFile; here it is read without the
safetensors package (nn/testdata/read_safetensors.py; with it,
safetensors.torch.load_file) and loaded with load_state_dict(strict=True)
into the same model defined in Python.

    /usr/bin/python3 load_checkpoint.py CKPT.safetensors MODEL OUT.safetensors

MODEL: a golden block ("resnet", "transformer"; models/golden_blocks.py) or
"resnet18:WIDTH", the reference ResNet-18 of that width
(models/reference_models.py). CKPT also holds "probe.x", an input; OUT gets
"logits", the eval-mode output of the loaded model on it, for
interop/torch/ddp:ddp_golden_test and interop/torch/fsdp:fully_shard_test to
compare with the C++ model's.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "nn", "testdata"))
import golden_blocks  # noqa: E402
from read_safetensors import read_safetensors, to_torch, write_safetensors  # noqa: E402


def main(ckpt, model_name, out):
    torch.set_num_threads(1)
    entries, _ = read_safetensors(ckpt)
    state = to_torch(entries)
    x = state.pop("probe.x")
    if model_name.startswith("resnet18:"):
        import reference_models

        model = reference_models.ResNet18(width=int(model_name.split(":")[1]))
    else:
        model = golden_blocks.make_model(model_name)
    model.load_state_dict(state, strict=True)  # every name and shape must match
    model.eval()
    with torch.no_grad():
        write_safetensors(out, {"logits": model(x).contiguous()}, {})


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: load_checkpoint.py CKPT.safetensors MODEL OUT.safetensors")
    main(*sys.argv[1:])
