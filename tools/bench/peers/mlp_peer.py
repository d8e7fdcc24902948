"""What torch_single_mlp.py and torch_ddp_mlp.py share: the reference models
(as lockstep's trainers' --model=mlp, MakeMlp 784-512-256-10, and --model=cnn,
2 x Conv 3x3 pad 1-BatchNorm2d-ReLU-MaxPool2d(2) with 32 and 64 channels,
Linear 3136-128-10), SGD, in-memory batches and one step."""
import torch


def make_model(name="mlp"):
    torch.manual_seed(0)
    if name == "cnn":
        nn = torch.nn
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    assert name == "mlp", name
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 512), torch.nn.ReLU(),
                               torch.nn.Linear(512, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))


def make_step(model, batch, seed, amp="off", device="cpu"):
    """A function step(i) that trains `model` on one of 4 fixed random
    batches of `batch` examples (SGD lr 0.1 momentum 0.9), on `device`
    (the model is moved there), under torch.autocast(dtype=bfloat16) with
    amp="bf16" (as lockstep's --amp=bf16; no loss scaling)."""
    model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    gen = torch.Generator().manual_seed(seed)
    batches = [((torch.rand(batch, 1, 28, 28, generator=gen) * 2 - 1).to(device),
                torch.randint(0, 10, (batch,), generator=gen).to(device)) for _ in range(4)]
    assert amp in ("off", "bf16"), amp
    device_type = torch.device(device).type

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        if amp == "bf16":
            with torch.autocast(device_type, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if device_type == "cuda":
            torch.cuda.synchronize()

    return step
