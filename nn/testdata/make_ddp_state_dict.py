#!/usr/bin/python3
"""A state dict saved from a real PyTorch 1.13 DistributedDataParallel model
(names "module.1.weight", ...), for nn/checkpoint_test: lockstep's LoadModel
must accept it into the plain model.

    /usr/bin/python3 nn/testdata/make_ddp_state_dict.py

Writes nn/testdata/ddp_state_dict.safetensors: the 1-rank (gloo) DDP wrapper
of nn.Sequential(Flatten, Linear(6, 5), ReLU, Linear(5, 3)) after
torch.manual_seed(0), ddp.state_dict() as is.
"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from read_safetensors import write_safetensors  # noqa: E402


def main():
    init = os.path.join(tempfile.mkdtemp(), "init")
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=0, world_size=1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    ddp = nn.parallel.DistributedDataParallel(model)
    state = ddp.state_dict()
    assert all(k.startswith("module.") for k in state), list(state)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ddp_state_dict.safetensors")
    write_safetensors(out, {k: v.detach().contiguous() for k, v in state.items()},
                      {"source": "torch.nn.parallel.DistributedDataParallel.state_dict()", "torch": torch.__version__})
    print("wrote", out, list(state))
    os._exit(0)  # PyTorch 1.13's gloo teardown can hang at exit.


if __name__ == "__main__":
    main()
