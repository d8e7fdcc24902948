"""lockstep_deps(): everything a workspace needs to build lockstep targets.

Call it from WORKSPACE (lockstep's own, or a consumer's):

    local_repository(name = "lockstep", path = "/path/to/lockstep")
    load("@lockstep//bazel:deps.bzl", "lockstep_deps")
    lockstep_deps()

It sets up, each only if the workspace does not define it already:
  * offline shims for rules_cc, rules_java and remote_coverage_tools, which
    Bazel 4.2.3 would otherwise try to download;
  * @lockstep_system: Debian's Abseil, GoogleTest/GoogleMock, Google
    Benchmark, OpenBLAS and zlib wrapped as cc_library targets;
  * @local_cuda: the CUDA toolkit (CUDA_PATH, else /usr/local/cuda), or
    placeholders that make CUDA-only targets incompatible when it is absent;
  * @local_libtorch: libtorch's C++ API (LIBTORCH_PATH, else Debian's
    libtorch-dev under /usr), likewise;
  * @local_dnnl: oneDNN (DNNL_PATH, else Debian's libdnnl-dev under /usr),
    for nn's convolutions; without it they run as im2col + BLAS.
"""

load("//bazel:cuda_configure.bzl", "cuda_configure")
load("//bazel:dnnl_configure.bzl", "dnnl_configure")
load("//bazel:libtorch_configure.bzl", "libtorch_configure")
load("//bazel:shims.bzl", "coverage_tools_shim", "rules_cc_shim", "rules_java_shim")
load("//bazel:system_libs.bzl", "system_libs")

def lockstep_deps():
    existing = native.existing_rules()
    if "rules_cc" not in existing:
        rules_cc_shim(name = "rules_cc")
    if "rules_java" not in existing:
        rules_java_shim(name = "rules_java")
    if "remote_coverage_tools" not in existing:
        coverage_tools_shim(name = "remote_coverage_tools")
    if "lockstep_system" not in existing:
        system_libs(name = "lockstep_system")
    if "local_cuda" not in existing:
        cuda_configure(name = "local_cuda")
    if "local_libtorch" not in existing:
        libtorch_configure(name = "local_libtorch")
    if "local_dnnl" not in existing:
        dnnl_configure(name = "local_dnnl")
