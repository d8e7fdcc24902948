"""cuda_library: compiles .cu files with nvcc into a cc_library.

    cuda_library(
        name = "kernels_cuda",
        srcs = ["kernels.cu"],
        hdrs = ["kernels_cuda.h"],
        deps = [":half"],
    )

Each .cu file is one nvcc action (sm_80, sm_90 and compute_90 PTX, so newer
GPUs JIT the PTX). The objects are wrapped in a cc_library that also links the
CUDA runtime, so C++ code simply depends on it. Without a CUDA toolkit the
target is incompatible and skipped by `bazel build //...`.
"""

load("@local_cuda//:defs.bzl", "IF_CUDA_COMPATIBLE", "NVCC")
load("//bazel:copts.bzl", "LOCKSTEP_NVCC_GENCODE")

def _nvcc_objects_impl(ctx):
    cc_infos = [d[CcInfo] for d in ctx.attr.deps if CcInfo in d]
    headers = depset(ctx.files.hdrs, transitive = [c.compilation_context.headers for c in cc_infos])
    include_flags = []
    root = ctx.label.workspace_root
    for path in ["."] + ([root] if root else []) + [ctx.bin_dir.path + ("/" + root if root else "")]:
        include_flags += ["-I", path]
    for c in cc_infos:
        cc = c.compilation_context
        for path in cc.includes.to_list() + cc.quote_includes.to_list() + cc.system_includes.to_list():
            include_flags += ["-I", path]
        for d in cc.defines.to_list():
            include_flags.append("-D" + d)

    outs = []
    for src in ctx.files.srcs:
        out = ctx.actions.declare_file("_nvcc/%s/%s.pic.o" % (ctx.label.name, src.basename[:-len(".cu")]))
        args = ctx.actions.args()
        args.add_all(["-c", src.path, "-o", out.path, "-std=c++17", "-O3"])
        args.add_all(LOCKSTEP_NVCC_GENCODE)
        args.add_all(["-Xcompiler", "-fPIC", "--expt-relaxed-constexpr"])
        args.add_all(ctx.attr.copts)
        args.add_all(include_flags)
        ctx.actions.run(
            executable = NVCC,
            arguments = [args],
            inputs = depset([src], transitive = [headers]),
            outputs = [out],
            mnemonic = "Nvcc",
            progress_message = "nvcc %s" % src.short_path,
            use_default_shell_env = True,
        )
        outs.append(out)
    return [DefaultInfo(files = depset(outs))]

_nvcc_objects = rule(
    implementation = _nvcc_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(),
        "copts": attr.string_list(),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], copts = [], visibility = None, **kwargs):
    _nvcc_objects(
        name = name + "_nvcc",
        srcs = srcs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cuda_headers"],
        copts = copts,
        target_compatible_with = IF_CUDA_COMPATIBLE,
    )
    native.cc_library(
        name = name,
        srcs = [":" + name + "_nvcc"],
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = IF_CUDA_COMPATIBLE,
        visibility = visibility,
        **kwargs
    )
