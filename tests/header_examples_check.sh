#!/usr/bin/env bash
# Keeps the usage examples of the public headers and their compiled copies in
# tests/header_examples/ the same.
#
# A header's example is the first run of comment lines indented by 3 or more
# spaces ("//   ") in the file (or the n-th, where CHECKED says so because
# the ones before it are a table or a diagram). For every header in CHECKED,
# each line of its example (trimmed) must appear, in order, in the test file
# given for it, which compiles and runs it; "..." in an example line stands
# for any text (an elided argument, statement or block), so `for (...) {`
# matches `for (int step = 0; step < 2; ++step) {` and a line that is only
# "..." matches any line. Other lines may come in between (test set-up,
# checks).
#
# Every public header (in `hdrs` of a target with visibility public, read
# from the BUILD files this test is given; collectives/legacy_targets.bzl's
# forwarding headers are generated, so not among them) that has an example
# must be in CHECKED or in SKIPPED (an example that is not C++, with a
# one-word reason), so a new header cannot slip by. The check also fails when
# a header in either list no longer exists or no longer has an example, and
# when a public header is missing from this test's `data` (tests/BUILD), or
# from the CMake package (tools/install/BUILD's lists).
#
# Only the packages whose BUILD file is in this test's data are searched: a
# new package with public headers must add its BUILD file (and its public
# headers) there, as the ones listed there do.
#
# Adding a header: put its example in the package's test file under
# tests/header_examples/, add it to CHECKED below, and add the header (and,
# for a new package, the package's BUILD file) to exports_files in its
# package and to `data` of //tests:header_examples_check.
set -euo pipefail
root="$TEST_SRCDIR/$TEST_WORKSPACE"

exec python3 - "$root" <<'PY'
import ast
import os
import re
import sys

# header -> the test file that compiles and runs its example, or (test file,
# n) where the example is the n-th run of "//   " lines (the ones before it
# are not C++).
CHECKED = {
    "amp/grad_scaler.h": "tests/header_examples/amp_test.cc",
    "amp/precision_policy.h": "tests/header_examples/amp_test.cc",
    "collectives/algorithms/all_reduce.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/all_to_all.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/broadcast.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/bruck_all_gather.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/bruck_all_to_all.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/pipelined_tree.h": ("tests/header_examples/collectives_test.cc", 2),  # 1: formulas
    "collectives/algorithms/pipelined_tree_broadcast.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/pipelined_tree_reduce.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/rabenseifner_all_reduce.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/recursive_halving_reduce_scatter.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/reduce.h": "tests/header_examples/collectives_test.cc",
    "collectives/algorithms/tree_all_reduce.h": "tests/header_examples/collectives_test.cc",
    "collectives/bootstrap/backend_choice.h": "tests/header_examples/bootstrap_test.cc",
    "collectives/elastic/elastic_group.h": "tests/header_examples/collectives_test.cc",
    "collectives/bootstrap/communicator_factory.h": ("tests/header_examples/bootstrap_test.cc", 2),  # 1: a table
    "collectives/bootstrap/init_from_env.h": "tests/header_examples/bootstrap_test.cc",
    "collectives/bootstrap/local_launch.h": "tests/header_examples/bootstrap_test.cc",
    "collectives/bootstrap/rank_environment.h": "tests/header_examples/bootstrap_test.cc",
    "collectives/bootstrap/shm_communicator.h": "tests/header_examples/bootstrap_test.cc",
    "collectives/bootstrap/tcp_communicator.h": "tests/header_examples/bootstrap_test.cc",
    "ddp/bucket_assignment.h": "tests/header_examples/collectives_test.cc",
    "collectives/communicator.h": "tests/header_examples/collectives_test.cc",
    "collectives/flight_recorder.h": "tests/header_examples/collectives_test.cc",
    "ddp/fused_all_reduce.h": "tests/header_examples/collectives_test.cc",
    "ddp/grad_bucket.h": "tests/header_examples/collectives_test.cc",
    "ddp/heal.h": "tests/header_examples/ddp_test.cc",
    "collectives/hierarchical/hierarchical_backend.h": "tests/header_examples/collectives_test.cc",
    "collectives/host_backend.h": "tests/header_examples/collectives_test.cc",
    "collectives/nccl/nccl_communicator.h": "tests/header_examples/collectives_test.cc",
    "collectives/store/file_store.h": "tests/header_examples/collectives_test.cc",
    "collectives/store/prefix_store.h": "tests/header_examples/collectives_test.cc",
    "collectives/store/store.h": "tests/header_examples/collectives_test.cc",
    "collectives/store/tcp_store.h": "tests/header_examples/collectives_test.cc",
    "collectives/transport/host_identity.h": "tests/header_examples/collectives_test.cc",
    "collectives/transport/shm/shm_transport.h": "tests/header_examples/collectives_test.cc",
    "collectives/transport/tcp/tcp_transport.h": "tests/header_examples/collectives_test.cc",
    "collectives/work.h": "tests/header_examples/collectives_test.cc",
    "collectives/work_promise.h": "tests/header_examples/collectives_test.cc",
    "collectives/monitored_barrier.h": "tests/header_examples/collectives_test.cc",
    "core/atomic_file.h": "tests/header_examples/nn_test.cc",  # beside the checkpoints that use it
    "core/cuda/cuda_caching_allocator.h": "tests/header_examples/core_test.cc",
    # Not in hdrs of a public target, but the header of //core/cuda:cuda_runtime (public).
    "core/cuda/cuda_runtime.h": "tests/header_examples/core_test.cc",
    "core/deadline.h": "tests/header_examples/core_test.cc",
    "core/process_stats.h": "tests/header_examples/core_test.cc",
    "core/device.h": "tests/header_examples/core_test.cc",
    "core/dtype.h": "tests/header_examples/core_test.cc",
    "core/fd.h": "tests/header_examples/core_test.cc",
    "core/kernels.h": "tests/header_examples/core_test.cc",
    "core/mt19937.h": "tests/header_examples/core_test.cc",
    "core/status.h": "tests/header_examples/core_test.cc",
    "core/storage.h": "tests/header_examples/core_test.cc",
    "core/subprocess.h": "tests/header_examples/core_test.cc",
    "core/tensor.h": "tests/header_examples/core_test.cc",
    "core/thread_pool.h": "tests/header_examples/core_test.cc",
    "data/data_loader.h": "tests/header_examples/data_test.cc",
    "data/dataset.h": "tests/header_examples/data_test.cc",
    "data/char_corpus.h": "tests/header_examples/data_test.cc",
    "data/distributed_sampler.h": "tests/header_examples/data_test.cc",
    "data/elastic_sampler.h": "tests/header_examples/data_test.cc",
    "data/example_dataset.h": "tests/header_examples/data_test.cc",
    "data/idx.h": "tests/header_examples/data_test.cc",
    "data/idx_dataset.h": "tests/header_examples/data_test.cc",
    "data/normalize.h": "tests/header_examples/data_test.cc",
    "data/randperm.h": "tests/header_examples/data_test.cc",
    "data/sampler.h": "tests/header_examples/data_test.cc",
    "data/synthetic_dataset.h": "tests/header_examples/data_test.cc",
    "ddp/comm_hook.h": "tests/header_examples/ddp_test.cc",
    "ddp/distributed_data_parallel.h": "tests/header_examples/ddp_test.cc",
    "ddp/join.h": "tests/header_examples/ddp_test.cc",
    "ddp/local_sgd.h": "tests/header_examples/ddp_test.cc",
    "ddp/powersgd_hook.h": "tests/header_examples/ddp_test.cc",
    "ddp/zero_redundancy_optimizer.h": "tests/header_examples/ddp_test.cc",
    "ddp/sync_batch_norm.h": "tests/header_examples/ddp_test.cc",
    "fsdp/clip_grad.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/flat_shard.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/flat_unit.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/fully_shard.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/shard_view.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/sharded_checkpoint.h": "tests/header_examples/fsdp_test.cc",
    "fsdp/sharded_optimizer.h": "tests/header_examples/fsdp_test.cc",
    "dp/data_parallel.h": "tests/header_examples/dp_test.cc",
    "interop/torch/ddp/distributed_data_parallel.h": "tests/header_examples/interop_test.cc",
    "interop/torch/fsdp/fully_shard.h": "tests/header_examples/interop_test.cc",
    "interop/torch/fsdp/sharded_unit.h": "tests/header_examples/interop_test.cc",
    "interop/torch/bridge/tensor_bridge.h": "tests/header_examples/interop_test.cc",
    "interop/torch/models/char_transformer.h": "tests/header_examples/interop_test.cc",
    "interop/torch/models/resnet18.h": "tests/header_examples/interop_test.cc",
    "interop/torch/c10d/process_group_lockstep.h": ("tests/header_examples/interop_test.cc", 2),  # 1: Python
    "interop/torch/c10d/torch_store.h": "tests/header_examples/interop_test.cc",
    "interop/torch/c10d/torch_work.h": "tests/header_examples/interop_test.cc",
    "interop/torch/bridge/torch_module.h": "tests/header_examples/interop_test.cc",
    "interop/torch/trainers/torch_ddp_stepper.h": "tests/header_examples/interop_test.cc",
    "interop/torch/trainers/torch_fsdp_stepper.h": "tests/header_examples/interop_test.cc",
    "dp/parallel_apply.h": "tests/header_examples/dp_test.cc",
    "dp/replicate.h": "tests/header_examples/dp_test.cc",
    "dp/scatter_gather.h": "tests/header_examples/dp_test.cc",
    "nn/batch_norm.h": "tests/header_examples/nn_test.cc",
    "nn/blas_kernels.h": "tests/header_examples/nn_test.cc",
    "nn/checkpoint/checkpoint.h": "tests/header_examples/nn_test.cc",
    "nn/clip_grad.h": "tests/header_examples/nn_test.cc",
    "nn/conv2d.h": "tests/header_examples/nn_test.cc",
    "nn/cross_entropy.h": "tests/header_examples/nn_test.cc",
    "nn/dropout.h": "tests/header_examples/nn_test.cc",
    "nn/init.h": "tests/header_examples/nn_test.cc",
    "nn/linear.h": "tests/header_examples/nn_test.cc",
    "nn/math.h": "tests/header_examples/nn_test.cc",
    "nn/mlp.h": "tests/header_examples/nn_test.cc",
    "nn/module.h": "tests/header_examples/nn_test.cc",
    "nn/optimizer.h": "tests/header_examples/nn_test.cc",
    "nn/checkpoint/safetensors.h": "tests/header_examples/nn_test.cc",
    "nn/sequential.h": "tests/header_examples/nn_test.cc",
    "nn/checkpoint/state_dict_prefix.h": "tests/header_examples/nn_test.cc",
    "trainers/ddp_stepper.h": "tests/header_examples/trainers_test.cc",
    "trainers/fault_injection.h": "tests/header_examples/trainers_test.cc",
    "trainers/fault_tolerant_loop.h": "tests/header_examples/trainers_test.cc",
    "trainers/fault_tolerant_rank.h": "tests/header_examples/trainers_test.cc",
    "trainers/fsdp_stepper.h": "tests/header_examples/trainers_test.cc",
    "trainers/trace.h": "tests/header_examples/trainers_test.cc",
    "trainers/train_loop.h": "tests/header_examples/trainers_test.cc",
}

# header -> why its indented block is not compiled (it is not C++).
SKIPPED = {
    "collectives/algorithms/algorithm.h": "glossary",
    "collectives/backend.h": "prose",
    "core/half.h": "prose",
    "ddp/reducer.h": "outline",
    "nn/adam.h": "formulas",
    "nn/sgd.h": "formulas",
}

# Packages whose public targets are for tests, and vendored code.
EXCLUDED_PACKAGES = ("collectives/testing", "nn/testing", "third_party")

root = sys.argv[1]
problems = []


def read(path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def example(text, n=1):
    """The n-th run of "//   " lines in the file, without the "//   "."""
    runs, current = [], None
    for line in text.splitlines():
        if line.startswith("//   "):
            if current is None:
                current = []
                runs.append(current)
            current.append(line[5:])
        else:
            current = None
    return runs[n - 1] if len(runs) >= n else []


class Any:
    """Stands for whatever a BUILD file loads or calls: callable, addable."""

    def __init__(self, calls=None):
        self.calls = calls

    def __call__(self, *args, **kwargs):
        if self.calls is not None:
            self.calls.append(kwargs)
        return Any()

    def __add__(self, other):
        return other

    __radd__ = __add__

    def __getattr__(self, name):
        return Any()

    def __iter__(self):
        return iter(())


def public_headers(package):
    """Headers in `hdrs` of the package's targets with visibility public."""
    source = read(package + "/BUILD")
    tree = ast.parse(source, package + "/BUILD")
    calls = []
    package_visibility = []

    def package_fn(**kwargs):
        package_visibility.extend(kwargs.get("default_visibility", []))

    def select(choices, **kwargs):
        out = []
        for value in choices.values():
            if isinstance(value, list):
                out += value
        return out

    env = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            env[node.id] = Any(calls)
    env.update({
        "load": lambda *args, **kwargs: None,
        "package": package_fn,
        "glob": lambda *args, **kwargs: [],
        "select": select,
        "len": len, "str": str, "int": int, "list": list, "dict": dict,
        "range": range, "enumerate": enumerate, "zip": zip, "sorted": sorted,
        "True": True, "False": False, "None": None,
    })
    exec(compile(tree, package + "/BUILD", "exec"), dict(env, __builtins__={}))
    headers = []
    for kwargs in calls:
        if "name" not in kwargs:
            continue
        visibility = kwargs.get("visibility", package_visibility)
        if not isinstance(visibility, list) or "//visibility:public" not in visibility:
            continue
        hdrs = kwargs.get("hdrs", [])
        for hdr in hdrs if isinstance(hdrs, list) else []:
            if not isinstance(hdr, str) or hdr.startswith(("//", "@")):
                continue
            headers.append(package + "/" + hdr.lstrip(":"))
    return headers


def pattern(line):
    """An example line as a regular expression: "..." matches anything."""
    return re.compile(".*".join(re.escape(part) for part in line.strip().split("...")))


# The packages: every BUILD file this test was given.
packages = []
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    if "BUILD" in filenames:
        package = os.path.relpath(dirpath, root)
        if not package.startswith(EXCLUDED_PACKAGES):
            packages.append(package)
public = set()
for package in packages:
    try:
        public.update(public_headers(package))
    except Exception as e:  # A BUILD file this evaluation cannot follow.
        problems.append("%s/BUILD: cannot read its targets (%s: %s); fix the check" %
                        (package, type(e).__name__, e))
if not packages:
    problems.append("no BUILD files in this test's data")

# Every public header is in the CMake package too (tools/install/BUILD
# lists the public targets it installs; a new one must be added there).
manifest_path = os.path.join(root, "tools/install/lockstep/share/lockstep/MANIFEST")
if not os.path.exists(manifest_path):
    problems.append("%s is missing: //tools/install:lockstep belongs in this test's data" % manifest_path)
else:
    installed = {line.strip()[len("include/lockstep/"):] for line in open(manifest_path)
                 if line.startswith("include/lockstep/")}
    for header in sorted(public - installed):
        problems.append("%s: public header that tools/install.sh does not install: add its target to the lists "
                        "in tools/install/BUILD" % header)

for header in sorted(set(CHECKED) & set(SKIPPED)):
    problems.append("%s: both checked and skipped" % header)

for header in sorted(public | set(CHECKED) | set(SKIPPED)):
    path = os.path.join(root, header)
    if not os.path.exists(path):
        if header in public:
            problems.append("%s: public header missing from this test's data: add it to exports_files "
                            "in its package and to data of //tests:header_examples_check" % header)
        else:
            problems.append("%s: listed in this check but does not exist (or is not in its data)" % header)
        continue
    if header not in public:
        print("%s: note: listed here but not in hdrs of a public target" % header)
    lines = example(read(header))
    if header in SKIPPED:
        if not lines:
            problems.append("%s: skipped (%s) but has no indented block any more: remove it from SKIPPED" %
                            (header, SKIPPED[header]))
        else:
            print("%s: skipped (%s)" % (header, SKIPPED[header]))
        continue
    if header not in CHECKED:
        if lines:
            problems.append("%s: public header with an example that no test compiles: add it to a test under "
                            "tests/header_examples/ and to CHECKED (or, if it is not C++, to SKIPPED with a reason)"
                            % header)
        continue
    test, block = CHECKED[header] if isinstance(CHECKED[header], tuple) else (CHECKED[header], 1)
    lines = example(read(header), block)
    if not lines:
        problems.append("%s: no example found (block %d)" % (header, block))
        continue
    if not os.path.exists(os.path.join(root, test)):
        problems.append("%s: test file %s not in this test's data" % (header, test))
        continue
    compiled = [l.strip() for l in read(test).splitlines()]
    at = 0
    for line in lines:
        regex = pattern(line)
        found = next((i for i in range(at, len(compiled)) if regex.fullmatch(compiled[i])), None)
        if found is None:
            problems.append("%s: example line not in %s (after line %d): %s" % (header, test, at, line.strip()))
            break
        at = found + 1
    else:
        print("%s: %d lines compiled in %s" % (header, len(lines), test))

for p in problems:
    print("FAIL " + p)
print("%d public headers, %d checked, %d skipped; %d problems" %
      (len(public), len(CHECKED), len(SKIPPED), len(problems)))
sys.exit(1 if problems else 0)
PY
