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
