#!/usr/bin/python3
"""Re-derives the DDP golden files from single-process PyTorch, bit for bit.

    OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 ddp/testdata/check_ddp_golden.py

For each step and rank: loads the previous step's parameters into a plain
(non-DDP) model, recomputes the rank's local gradients from its stored
inputs (and checks the stored losses), then applies the averaging rule
that DDP in PyTorch 1.13 uses (see README.md) and checks the stored
step<k>.grad.* are exactly equal:
  no hook:   g0 * 0.5 + g1 * 0.5               (f32; grad * (1/world_size) copied into
                                                the bucket, then a SUM all-reduce)
  fp16 hook: f32(f16(g0) / 2 + f16(g1) / 2)    (each op rounded to f16)
  no_sync:   local g = g(micro0) + g(micro1) (autograd accumulation), then as "no hook"
Then replays torch.optim.SGD(lr=0.1, momentum=0.9) on the stored gradients
and checks every step<k>.* parameter exactly. Exits non-zero on a mismatch.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # importing make_ddp_golden must leave no __pycache__ here
sys.path.insert(0, os.path.join(HERE, "..", "..", "nn", "testdata"))
sys.path.insert(0, HERE)
from read_safetensors import read_safetensors, to_torch  # noqa: E402
import make_ddp_golden as g  # noqa: E402


def local_grads(T, kind, step, rank, micro):
    m = g.make_model(kind)
    prev = f"step{step - 1}." if step > 0 else "init."
    m.load_state_dict({n: T[prev + n] for n, _ in m.named_parameters()})
    for mi in range(micro):
        p = f"rank{rank}.step{step}" + (f".micro{mi}" if micro > 1 else "")
        loss = torch.nn.functional.cross_entropy(m(T[p + ".x"]), T[p + ".y"])
        loss.backward()
        if not torch.equal(loss.detach(), T[p + ".loss"]):
            raise AssertionError(f"{p}.loss: recomputed {loss.item()} stored {T[p + '.loss'].item()}")
    return {n: p.grad for n, p in m.named_parameters() if p.grad is not None}


def main():
    torch.set_num_threads(1)
    ok = True
    for case, cfg in g.CASES.items():
        entries, _ = read_safetensors(os.path.join(HERE, f"ddp_{case}.safetensors"))
        T = to_torch(entries)
        kind, micro = cfg.get("model", "mlp"), cfg.get("micro_batches", 1)
        bad = 0
        for step in range(g.STEPS):
            g0, g1 = (local_grads(T, kind, step, r, micro) for r in range(g.WORLD_SIZE))
            if set(g0) != {k[len(f"step{step}.grad."):] for k in T if k.startswith(f"step{step}.grad.")}:
                bad += 1
            for n in g0:
                if cfg.get("hook") == "fp16_compress_hook":
                    expected = (g0[n].half().div_(2) + g1[n].half().div_(2)).float()
                else:
                    expected = g0[n] * 0.5 + g1[n] * 0.5
                bad += not torch.equal(expected, T[f"step{step}.grad.{n}"])
        m = g.make_model(kind)
        m.load_state_dict({n: T["init." + n] for n, _ in m.named_parameters()})
        opt = torch.optim.SGD(m.parameters(), lr=g.LR, momentum=g.MOMENTUM)
        for step in range(g.STEPS):
            for n, p in m.named_parameters():
                p.grad = T.get(f"step{step}.grad.{n}")  # None for a globally unused parameter
            opt.step()
            for n, p in m.named_parameters():
                bad += not torch.equal(p.detach(), T[f"step{step}.{n}"])
        for n, p in m.named_parameters():
            bad += not torch.equal(p.detach(), T[f"final.{n}"])
        print(f"{case}: {'OK' if bad == 0 else f'{bad} MISMATCHES'}")
        ok = ok and bad == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
