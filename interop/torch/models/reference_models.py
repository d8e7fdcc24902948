"""The reference trainers' models in Python: twins of
interop/torch/models/resnet18.h and char_transformer.h (the same parameter
names and shapes, the same operations in the same order, so libtorch runs
the same kernels on both sides).

    /usr/bin/python3 reference_models.py OUT.safetensors

writes, for a small configuration of each model (SMALL below) built after
torch.manual_seed(0): its parameters and buffers ("<model>/<name>"), an
input ("<model>/input", drawn after the model), the training-mode logits,
the loss (cross-entropy against "<model>/target"), the gradients of every
parameter ("<model>/grad/<name>") and the buffers after the step
("<model>/after/<name>"); and in the metadata the parameter count and the
parameter names of each model at its default configuration.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "nn", "testdata"))


class BasicBlock(torch.nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(cout)
        self.conv2 = torch.nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                  torch.nn.BatchNorm2d(cout))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        identity = self.downsample(x) if self.downsample is not None else x
        return torch.relu(y + identity)


class ResNet18(torch.nn.Module):
    def __init__(self, in_channels=1, num_classes=10, width=64):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(in_channels, width, 7, stride=2, padding=3, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(width)
        cin = width
        for k in range(4):
            cout = width << k
            stride = 1 if k == 0 else 2
            setattr(self, f"layer{k + 1}", torch.nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.fc = torch.nn.Linear(cin, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
        return self.fc(x)


class Block(torch.nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.ln2 = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, 4 * dim)
        self.fc2 = torch.nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (p.view(b, t, self.heads, hd).transpose(1, 2) for p in (q, k, v))
        att = q.matmul(k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        future = torch.ones(t, t, dtype=torch.bool).tril().logical_not()
        att = torch.softmax(att.masked_fill(future, float("-inf")), -1)
        y = att.matmul(v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharTransformer(torch.nn.Module):
    def __init__(self, vocab_size=114, context=128, layers=6, dim=384, heads=6):
        super().__init__()
        self.tok_emb = torch.nn.Embedding(vocab_size, dim)
        self.pos_emb = torch.nn.Embedding(context, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab_size)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tok_emb(ids) + self.pos_emb(torch.arange(t, dtype=torch.long))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


SMALL = {
    "resnet18": dict(in_channels=1, num_classes=10, width=8),
    "char_transformer": dict(vocab_size=11, context=16, layers=2, dim=32, heads=4),
}


def make(name, **kw):
    return ResNet18(**kw) if name == "resnet18" else CharTransformer(**kw)


def main(out_path):
    from read_safetensors import write_safetensors
    torch.set_num_threads(1)
    out, meta = {}, {}
    for name, kw in SMALL.items():
        torch.manual_seed(0)
        model = make(name, **kw)
        if name == "resnet18":
            x = torch.randn(3, 1, 28, 28)
            target = torch.randint(0, kw["num_classes"], (3,))
        else:
            x = torch.randint(0, kw["vocab_size"], (3, kw["context"]))
            target = torch.randint(0, kw["vocab_size"], (3, kw["context"]))
        for n, t in list(model.state_dict().items()):
            out[f"{name}/{n}"] = t.detach().clone()
        out[f"{name}/input"] = x
        out[f"{name}/target"] = target
        model.train()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))
        loss.backward()
        out[f"{name}/logits"] = logits.detach()
        out[f"{name}/loss"] = loss.detach().reshape(1)
        for n, p in model.named_parameters():
            out[f"{name}/grad/{n}"] = p.grad.detach().clone()
        for n, b in model.named_buffers():
            out[f"{name}/after/{n}"] = b.detach().clone()
        full = make(name)
        meta[f"{name}/parameters"] = str(sum(p.numel() for p in full.parameters()))
        meta[f"{name}/names"] = ",".join(n for n, _ in full.named_parameters())
    write_safetensors(out_path, out, meta)


if __name__ == "__main__":
    main(sys.argv[1])
