"""Compiler flags and thin rule wrappers, defined once for every package."""

load("@local_cuda//:defs.bzl", "IF_CUDA_COMPATIBLE")

LOCKSTEP_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
    "-Werror=return-type",
]

# Vectorizable loops in kernels: let the compiler use the host's SIMD width
# only where asked (kernels), never globally, so binaries stay portable.
LOCKSTEP_KERNEL_COPTS = ["-O3", "-ftree-vectorize"]

LOCKSTEP_NVCC_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def lockstep_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = LOCKSTEP_COPTS + copts, **kwargs)

def lockstep_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = LOCKSTEP_COPTS + copts, **kwargs)

def lockstep_cc_test(name, copts = [], deps = [], size = "small", gpu_copy = None, **kwargs):
    """A gtest binary.

    gpu_copy: a second name for the same test, tagged `gpu` (CUDA builds
    only), for a test whose CPU cases run everywhere and whose GPU cases
    skip without a device: tools/gpu_check.sh bundles the copy, so they run
    on the GPU machine.
    """
    native.cc_test(
        name = name,
        copts = LOCKSTEP_COPTS + copts,
        deps = deps + ["@lockstep_system//:gtest_main"],
        size = size,
        **kwargs
    )
    if gpu_copy:
        native.cc_test(
            name = gpu_copy,
            copts = LOCKSTEP_COPTS + copts,
            deps = deps + ["@lockstep_system//:gtest_main"],
            size = size,
            tags = kwargs.pop("tags", []) + ["gpu"],
            target_compatible_with = IF_CUDA_COMPATIBLE,
            **kwargs
        )

def lockstep_cc_benchmark(name, copts = [], deps = [], tags = [], main = True, **kwargs):
    """A Google Benchmark binary: testonly, tagged `benchmark`.

    main = False when the binary has its own main() (e.g. to skip without a GPU).
    """
    native.cc_binary(
        name = name,
        copts = LOCKSTEP_COPTS + copts,
        deps = deps + ["@lockstep_system//:benchmark_main" if main else "@lockstep_system//:benchmark"],
        testonly = True,
        tags = tags + ["benchmark"],
        **kwargs
    )

def lockstep_optional_cc_library(
        name,
        interface,
        enabled,
        srcs,
        none_srcs,
        deps = [],
        real_name = None,
        none_name = None,
        target_compatible_with = [],
        visibility = None,
        **kwargs):
    """An implementation chosen in the build, not by #ifdef (XLA's cuda_only_cc_library).

        lockstep_optional_cc_library(
            name = "conv_kernels",              # what users depend on
            interface = ":conv_kernels_hdrs",   # the headers both implement
            enabled = DNNL_ENABLED,             # from a configure repository
            srcs = ["conv_kernels_dnnl.cc"],    # the real one
            deps = ["@local_dnnl//:dnnl"],
            none_srcs = ["conv_kernels_none.cc"],  # the stand-in: says what is missing
        )

    declares `real_name` (default name + "_real": srcs, deps and
    target_compatible_with, so a build without the library skips it),
    `none_name` (default name + "_none") and `name`, which depends on the
    interface and on the real implementation where `enabled`, else the
    stand-in. kwargs (copts, linkopts, ...) go to the real one.
    """
    real_name = real_name or name + "_real"
    none_name = none_name or name + "_none"
    lockstep_cc_library(
        name = real_name,
        srcs = srcs,
        target_compatible_with = target_compatible_with,
        deps = [interface] + deps,
        **kwargs
    )
    lockstep_cc_library(
        name = none_name,
        srcs = none_srcs,
        deps = [interface],
    )
    lockstep_cc_library(
        name = name,
        visibility = visibility,
        deps = [
            interface,
            ":" + real_name if enabled else ":" + none_name,
        ],
    )
