"""The golden models of interop/torch/ddp:ddp_golden_test, in Python.

interop/torch/models/golden_blocks.h defines the same modules in C++ with the
same parameter names, shapes and operations in the same order, so that
libtorch runs the same kernels on both sides.

  resnet       conv-BN-ReLU stem, one residual block (two conv-BN, identity
               add), global average pool, linear head; input [4, 3, 8, 8].
  transformer  a pre-norm Transformer block (two-head self-attention written
               out with Linear, matmul and softmax; GELU MLP; dropout 0) and a
               linear head on the mean over positions; input [3, 6, 16].

`with_unused` adds a head that takes part in nothing (`fc_unused`).
"""
import math

import torch
import torch.nn.functional as F

BATCH = {"resnet": 4, "transformer": 3}
CLASSES = {"resnet": 10, "transformer": 5}


def input_shape(model):
    return [BATCH[model], 3, 8, 8] if model == "resnet" else [BATCH[model], 6, 16]


class ResNet(torch.nn.Module):
    def __init__(self, with_unused=False):
        super().__init__()
        self.stem_conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.stem_bn = torch.nn.BatchNorm2d(8)
        self.block_conv1 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.block_bn1 = torch.nn.BatchNorm2d(8)
        self.block_conv2 = torch.nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.block_bn2 = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, CLASSES["resnet"])
        if with_unused:
            self.fc_unused = torch.nn.Linear(8, CLASSES["resnet"])

    def forward(self, x):
        x = F.relu(self.stem_bn(self.stem_conv(x)))
        y = F.relu(self.block_bn1(self.block_conv1(x)))
        y = self.block_bn2(self.block_conv2(y))
        x = F.relu(x + y)
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.fc(x)


class Transformer(torch.nn.Module):
    DIM, HEADS, HIDDEN = 16, 2, 32

    def __init__(self, with_unused=False):
        super().__init__()
        d = self.DIM
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc1 = torch.nn.Linear(d, self.HIDDEN)
        self.fc2 = torch.nn.Linear(self.HIDDEN, d)
        self.head = torch.nn.Linear(d, CLASSES["transformer"])
        if with_unused:
            self.fc_unused = torch.nn.Linear(d, CLASSES["transformer"])

    def forward(self, x):
        b, t, d = x.shape
        h, hd = self.HEADS, self.DIM // self.HEADS
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q = q.reshape(b, t, h, hd).transpose(1, 2)
        k = k.reshape(b, t, h, hd).transpose(1, 2)
        v = v.reshape(b, t, h, hd).transpose(1, 2)
        att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)), dim=-1)
        o = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(o)
        # GELU on a contiguous tensor whose incoming gradient is contiguous
        # (fc2's backward): PyTorch 1.13's GELU backward is nondeterministic
        # on non-contiguous gradients.
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


def make_model(model, with_unused=False):
    return ResNet(with_unused) if model == "resnet" else Transformer(with_unused)
