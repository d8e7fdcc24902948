#!/usr/bin/python3
"""How a Python PyTorch program loads what lockstep's FSDP for libtorch
trained: the C++ side writes FullyShard::FullStateDict (the plain module's
names) with WriteSafetensorsFile; here it is read without the safetensors
package (nn/testdata/read_safetensors.py) and loaded with
load_state_dict(strict=True) into the same model defined in Python
(interop/torch/models/reference_models.py).

    /usr/bin/python3 load_full_state.py CKPT.safetensors WIDTH OUT.safetensors

CKPT also holds "probe.x", an input; OUT gets "logits", the eval-mode output
of ResNet18(width=WIDTH) loaded with the rest, for
interop/torch/fsdp:fully_shard_test to compare with the C++ model's.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "..", "nn", "testdata"))
import reference_models  # noqa: E402
from read_safetensors import read_safetensors, to_torch, write_safetensors  # noqa: E402


def main(ckpt, width, out):
    torch.set_num_threads(1)
    entries, _ = read_safetensors(ckpt)
    state = to_torch(entries)
    x = state.pop("probe.x")
    model = reference_models.ResNet18(width=int(width))
    model.load_state_dict(state, strict=True)  # every name and shape must match
    model.eval()
    with torch.no_grad():
        write_safetensors(out, {"logits": model(x).contiguous()}, {})


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
