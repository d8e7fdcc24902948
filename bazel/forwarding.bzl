"""Old labels and include paths of targets that moved, kept for old users.

    lockstep_forwarding_targets({
        # old name -> (new label, the header it forwards to; "" where the path did not change)
        "tensor_bridge": ("//interop/torch/bridge:tensor_bridge", "interop/torch/bridge/tensor_bridge.h"),
    })

declares, in the calling package, a target at each old label whose header at
the old path (`<package>/<old name>.h`, generated) includes the new one, or a
plain alias where no header moved. Repositories built against the old names
keep building; a deprecation message names the new label.
"""

def lockstep_forwarding_targets(targets, **kwargs):
    for name, (actual, header) in targets.items():
        message = "old name: use %s" % actual
        if not header:
            native.alias(name = name, actual = actual, visibility = ["//visibility:public"])
            continue
        native.genrule(
            name = name + "_forwarding_header",
            outs = [name + ".h"],
            cmd = "printf '%%s\\n' '// Old include path, kept for old users: include \"%s\".' '#include \"%s\"' > $@" % (header, header),
            # //tools/install installs the old paths too.
            visibility = ["//tools/install:__pkg__"],
            **kwargs
        )
        native.cc_library(
            name = name,
            hdrs = [":" + name + ".h"],
            deprecation = message,
            visibility = ["//visibility:public"],
            deps = [actual],
            **kwargs
        )
