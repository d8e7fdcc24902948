#!/usr/bin/python3
"""PyTorch 1.13 peer for //nn:mlp_step_benchmark.

    OMP_NUM_THREADS=1 /usr/bin/python3 tools/bench/peers/torch_mlp_step.py [seconds]

The same model (Flatten, Linear 784->512, ReLU, Linear 512->256, ReLU,
Linear 256->10), batch 128 of f32 images [128, 1, 28, 28], cross_entropy,
backward, optimizer step (SGD lr 0.01 momentum 0.9; AdamW defaults),
zero_grad; torch.set_num_threads(1). Prints the median step time in ms per
configuration over repeated timing windows.
"""
import statistics
import sys
import time

import torch

torch.set_num_threads(1)


def make():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def measure(fn, seconds):
    for _ in range(5):
        fn()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 20:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    x = torch.rand(128, 1, 28, 28) * 2 - 1
    y = torch.randint(0, 10, (128,))
    for name, opt_fn in (("MlpTrainStepSgd", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
                         ("MlpTrainStepAdamW", lambda p: torch.optim.AdamW(p))):
        model = make()
        opt = opt_fn(model.parameters())

        def step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
        print(f"{name}: {measure(step, seconds):.3f} ms")
    model = make().eval()

    def forward():
        with torch.no_grad():
            model(x)
    print(f"MlpForward: {measure(forward, seconds):.3f} ms")


if __name__ == "__main__":
    main()
