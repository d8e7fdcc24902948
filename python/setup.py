"""Builds lockstep_torch, the torch.distributed backend "lockstep", with torch.utils.cpp_extension.

The extension's sources are interop/torch's (the ProcessGroup, its store and
work adapters, the tensor bridge and the Python module), compiled here
against the torch this Python imports. Under them, lockstep's core and
collectives come as static, position-independent archives with a manifest
of their system libraries (lib/lockstep/manifest.json), from:

  LOCKSTEP_PREFIX=DIR   an installed tree (bash tools/install.sh --prefix=DIR)
                        or the one Bazel builds (bazel-bin/tools/install/python_deps);
  otherwise             Bazel, run here on the checkout this directory is in:
                        bazel build --config=opt //tools/install:python_deps
                        (LOCKSTEP_BAZEL_ARGS replaces --config=opt).
"""

import json
import os
import shlex
import subprocess
import sys

from setuptools import setup

try:
    import torch
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError as e:
    sys.exit(f"lockstep-torch: the build cannot import torch ({e}). Build it against the torch it will be loaded "
             "into, with that Python: pip install --no-build-isolation ./python")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)  # the lockstep checkout

SOURCES = [
    "interop/torch/bridge/tensor_bridge.cc",
    "interop/torch/c10d/huge_pages.cc",
    "interop/torch/c10d/lockstep_torch_module.cc",
    "interop/torch/c10d/process_group_lockstep.cc",
    "interop/torch/c10d/torch_store.cc",
    "interop/torch/c10d/torch_work.cc",
]
LAYERS = ["collectives", "core"]  # high to low: the link order


def fail(message):
    sys.exit(f"lockstep-torch: {message}")


def lockstep_tree():
    prefix = os.environ.get("LOCKSTEP_PREFIX")
    if prefix:
        return os.path.abspath(prefix)
    if not os.path.exists(os.path.join(ROOT, "WORKSPACE")):
        fail(f"{ROOT} is not a lockstep checkout and LOCKSTEP_PREFIX is unset: set it to an installed lockstep "
             "(bash tools/install.sh --prefix=DIR)")
    setup_sh = os.path.join(ROOT, "tools", "setup.sh")
    if subprocess.call(["bash", setup_sh], cwd=ROOT) != 0:
        fail(f"{setup_sh} failed: install Bazel and lockstep's -dev packages, or set LOCKSTEP_PREFIX")
    args = shlex.split(os.environ.get("LOCKSTEP_BAZEL_ARGS", "--config=opt"))
    if subprocess.call(["bazel", "build"] + args + ["//tools/install:python_deps"], cwd=ROOT) != 0:
        fail("bazel build //tools/install:python_deps failed (its output is above)")
    bin_dir = subprocess.check_output(["bazel", "info"] + args + ["bazel-bin"], cwd=ROOT, text=True).strip()
    return os.path.join(bin_dir, "tools", "install", "python_deps")


def link_inputs(tree):
    manifest_path = os.path.join(tree, "lib", "lockstep", "manifest.json")
    try:
        with open(manifest_path) as f:
            manifest = json.load(f)
    except OSError as e:
        fail(f"cannot read {manifest_path} ({e.strerror}): is {tree} a lockstep install?")
    layers = {layer["name"]: layer for layer in manifest["layers"]}
    archives, flags = [], []
    for name in LAYERS:
        if name not in layers:
            fail(f"{tree} has no layer {name} (it has {', '.join(layers)})")
        archives.append(os.path.join(tree, "lib", f"liblockstep_{name}.a"))
        for flag in layers[name]["flags"]:
            if flag not in flags:
                flags.append(flag)
    return archives, flags


tree = lockstep_tree()
archives, flags = link_inputs(tree)

setup(
    ext_modules=[
        CppExtension(
            name="lockstep_torch",
            sources=[os.path.join(ROOT, s) for s in SOURCES],
            # The tree's headers first: they match its libraries.
            include_dirs=[os.path.join(tree, "include", "lockstep"), ROOT],
            # 1.13's cpp_extension defaults to C++14, which lockstep's
            # headers are not; 2.x chooses its own (C++17, C++20 from 2.12).
            extra_compile_args=(["-std=c++17"] if int(torch.__version__.split(".")[0]) < 2 else []) + ["-O2"],
            # After the extension's objects on the link line: the linker
            # takes from the archives what those objects use.
            extra_objects=archives,
            extra_link_args=flags,
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
