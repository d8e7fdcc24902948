"""Compiler flags and thin rule wrappers, defined once for every package."""

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

def lockstep_cc_test(name, copts = [], deps = [], size = "small", **kwargs):
    native.cc_test(
        name = name,
        copts = LOCKSTEP_COPTS + copts,
        deps = deps + ["@lockstep_system//:gtest_main"],
        size = size,
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
