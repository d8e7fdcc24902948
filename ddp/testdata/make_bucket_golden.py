#!/usr/bin/python3
"""Golden data for ddp/bucket_assignment_test.cc, from PyTorch 1.13.

    /usr/bin/python3 ddp/testdata/make_bucket_golden.py \
        ddp/testdata/bucket_golden.json

Each case runs torch.distributed._compute_bucket_assignment_by_size (c10d's
compute_bucket_assignment_by_size in reducer.cpp, the function DDP uses) on
CPU tensors and stores:

  name             what the case checks
  numel, dtype,    per tensor, in the order passed (lockstep's short dtype
  element_size     names: f32, f64, f16, bf16)
  limits           the bucket size limits in bytes
  tensor_indices   [] or the tensors' original indices (gradient-ready order)
  order_sensitive  false when several dtypes meet non-empty tensor_indices:
                   then c10d appends the still-open buckets in the iteration
                   order of an unordered_map (hash dependent, not a rule), so
                   the test compares the (bucket, limit) pairs as a multiset
  buckets          the expected buckets (lists of tensor indices)
  size_limits      the expected per-bucket size limits

No sparse tensors: lockstep has none (c10d gives each one a bucket of its own).
"""
import json
import random
import sys

import torch
import torch.distributed as dist

KIB = 1 << 10
MIB = 1 << 20
FIRST = dist._DEFAULT_FIRST_BUCKET_BYTES  # 1 MiB
DDP_LIMITS = [FIRST, 25 * MIB]  # DDP's default bucket_cap_mb=25

DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
}


def case(name, specs, limits, tensor_indices=()):
    """specs: (numel, torch dtype) per tensor."""
    tensors = [torch.empty(numel, dtype=dtype) for numel, dtype in specs]
    tensor_indices = list(tensor_indices)
    buckets, size_limits = dist._compute_bucket_assignment_by_size(
        tensors, limits, [False] * len(tensors), tensor_indices)
    several_dtypes = len({dtype for _, dtype in specs}) > 1
    return {
        "name": name,
        "numel": [numel for numel, _ in specs],
        "dtype": [DTYPES[dtype] for _, dtype in specs],
        "element_size": [t.element_size() for t in tensors],
        "limits": list(limits),
        "tensor_indices": tensor_indices,
        "order_sensitive": not (several_dtypes and tensor_indices),
        "buckets": [list(b) for b in buckets],
        "size_limits": list(size_limits),
    }


def f32(nbytes):
    return (nbytes // 4, torch.float32)


def ddp_params(module):
    # DDP's _build_params_for_reducer: parameters in module order.
    return [(p.numel(), p.dtype) for p in module.parameters()]


def cases():
    rng = random.Random(1)
    nn = torch.nn
    mlp = nn.Sequential(nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                        nn.Linear(512, 10))
    cnn = nn.Sequential(nn.Conv2d(3, 64, 7), nn.BatchNorm2d(64), nn.Conv2d(64, 128, 3),
                        nn.BatchNorm2d(128), nn.Conv2d(128, 256, 3), nn.BatchNorm2d(256),
                        nn.Conv2d(256, 512, 3), nn.BatchNorm2d(512), nn.Linear(512, 1000))
    mixed = [(rng.randrange(20_000, 300_000), [torch.float32, torch.float16, torch.float64][i % 3])
             for i in range(30)]
    varied = [(rng.randrange(0, 400_000), torch.float32) for _ in range(40)]
    permutation = list(range(len(varied)))
    rng.shuffle(permutation)
    mixed_permutation = list(range(len(mixed)))
    rng.shuffle(mixed_permutation)
    mlp_params = ddp_params(mlp)
    cnn_params = ddp_params(cnn)

    yield case("three_600KiB", [f32(600 * KIB)] * 3, DDP_LIMITS)
    yield case("single_dtype_varied_sizes", varied, [FIRST, 4 * MIB])
    yield case("mixed_f32_f16_f64_interleaved", mixed, [FIRST, 4 * MIB])
    yield case("mixed_f32_f16_f64_default_limits", mixed, DDP_LIMITS)
    yield case("exactly_at_the_limit", [f32(MIB)] * 6, [FIRST, 2 * MIB])
    yield case("sum_exactly_at_the_limit", [f32(512 * KIB)] * 7 + [f32(KIB)], [FIRST, 2 * MIB])
    yield case("one_byte_under_the_limit", [f32(MIB - 4), (1, torch.float32), f32(MIB - 4)],
               [FIRST, 4 * MIB])
    yield case("larger_than_the_limit", [f32(4 * KIB), f32(10 * MIB), f32(4 * KIB), f32(30 * MIB),
                                         f32(4 * KIB)], DDP_LIMITS)
    yield case("many_small", [f32(100_000)] * 300, DDP_LIMITS)
    yield case("many_small_4MiB", [f32(40_000)] * 200, [FIRST, 4 * MIB])
    yield case("maxsize_one_bucket_per_dtype", mixed, [sys.maxsize])
    yield case("three_limits_stay_at_last", [f32(300 * KIB)] * 20, [256 * KIB, MIB, 2 * MIB])
    yield case("one_limit", [f32(300 * KIB)] * 10, [MIB])
    yield case("f16_and_bf16_never_share", [(300_000, torch.float16), (300_000, torch.bfloat16)] * 4,
               [FIRST, 2 * MIB])
    yield case("zero_numel_tensors", [(0, torch.float32), f32(MIB), (0, torch.float32),
                                      f32(600 * KIB), (0, torch.float32)], DDP_LIMITS)
    yield case("single_tensor", [f32(4)], DDP_LIMITS)
    yield case("ddp_mlp_params", mlp_params, DDP_LIMITS)
    yield case("ddp_cnn_params", cnn_params, [FIRST, 4 * MIB])
    yield case("tensor_indices_permuted", [varied[i] for i in permutation], [FIRST, 4 * MIB],
               permutation)
    # Reducer::rebuild_buckets: parameters in gradient-ready order, which for
    # a plain feed-forward net is the reverse of module order.
    n = len(cnn_params)
    yield case("ddp_rebuild_reversed_cnn", cnn_params[::-1], [FIRST, 4 * MIB],
               list(range(n))[::-1])
    n = len(mlp_params)
    yield case("ddp_rebuild_reversed_mlp", mlp_params[::-1], DDP_LIMITS, list(range(n))[::-1])
    yield case("tensor_indices_mixed_dtypes", [mixed[i] for i in mixed_permutation],
               [FIRST, 4 * MIB], mixed_permutation)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "ddp/testdata/bucket_golden.json"
    all_cases = list(cases())
    # One case field per line: reviewable diffs, no one-number-per-line bloat.
    lines = ["{", '  "torch_version": %s,' % json.dumps(torch.__version__), '  "cases": [']
    for k, c in enumerate(all_cases):
        fields = ",\n".join("      %s: %s" % (json.dumps(key), json.dumps(value))
                            for key, value in c.items())
        lines.append("    {\n%s\n    }%s" % (fields, "," if k + 1 < len(all_cases) else ""))
    lines += ["  ]", "}", ""]
    with open(out, "w") as f:
        f.write("\n".join(lines))
    json.loads("\n".join(lines))  # well-formed
    print("wrote %d cases to %s" % (len(all_cases), out))


if __name__ == "__main__":
    main()
