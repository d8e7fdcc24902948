"""lockstep_install_package: lockstep's libraries as an install tree for CMake and pkg-config users.

    lockstep_install_package(
        name = "lockstep",
        layers = ["core=core", "collectives=collectives", ...],  # low to high
        deps = ["//core:tensor", "//collectives:communicator", ...],  # the public targets
        forwarding_headers = ["//collectives:tcp_store_forwarding_header", ...],  # old include paths
        binaries = {"//tools/launch:lockstep-run": "lockstep-run"},
        config = "lockstepConfig.cmake",
    )

builds, under bazel-bin/<package>/<name>/, the tree that `tools/install.sh`
copies to a prefix:

    include/lockstep/...            every header of `deps`, and `forwarding_headers` (old paths)
    lib/liblockstep_<layer>.a       the layer's objects (position-independent)
    lib/liblockstep_<layer>.so      the same, linked against the layers below it ($ORIGIN)
    lib/cmake/lockstep/             lockstepConfig.cmake (`config`), lockstepTargets.cmake
                                    (one imported target per layer, generated here),
                                    lockstepConfigVersion.cmake
    lib/pkgconfig/lockstep-<layer>.pc, lockstep.pc
    lib/lockstep/manifest.json      layers, their dependencies and link flags (python/setup.py)
    bin/<name>                      `binaries`
    share/lockstep/MANIFEST         every path above, one a line (what install.sh copies)

Every object of every cc_library reachable from `deps` belongs to exactly one
layer: the one whose package prefix (`layers`: "name=prefix[,prefix]")
matches the library's package, longest first. So each object is in one
archive and all layers link together into one program; a library in none of
the layers fails the build, naming it. Because the build resolved every
optional library already (core/cuda's CUDA or stand-in implementation), only
the chosen one of each pair is there. Libraries of other repositories
(@lockstep_system, @local_cuda, @local_dnnl, @local_libtorch) are not
copied: their link flags become the layer's (libtorch's become CMake's `torch`
target from find_package(Torch)).
"""

load("@bazel_tools//tools/cpp:toolchain_utils.bzl", "find_cpp_toolchain")

_Node = provider(fields = ["nodes"])

def _graph_aspect_impl(target, ctx):
    transitive = [d[_Node].nodes for d in getattr(ctx.rule.attr, "deps", []) if _Node in d]
    if CcInfo not in target:
        return [_Node(nodes = depset(transitive = transitive))]
    cc = target[CcInfo]
    objects = []
    flags = []
    alwayslink = False
    for li in cc.linking_context.linker_inputs.to_list():
        if li.owner != target.label:
            continue
        flags += li.user_link_flags
        for lib in li.libraries:
            objects += lib.pic_objects or lib.objects or []
            alwayslink = alwayslink or lib.alwayslink
    deps = []
    for d in getattr(ctx.rule.attr, "deps", []):
        if CcInfo in d:
            deps.append(str(d.label))
    node = struct(
        label = str(target.label),
        workspace = target.label.workspace_name,
        package = target.label.package,
        deps = tuple(deps),
        objects = tuple(objects),
        headers = tuple(cc.compilation_context.direct_headers + cc.compilation_context.direct_textual_headers),
        flags = tuple(flags),
        alwayslink = alwayslink,
    )
    return [_Node(nodes = depset([node], transitive = transitive))]

_graph_aspect = aspect(
    implementation = _graph_aspect_impl,
    attr_aspects = ["deps"],
)

def _layer_of(package, layers):
    best = None
    for name, prefixes in layers:
        for p in prefixes:
            if package == p or package.startswith(p + "/"):
                if best == None or len(p) > len(best[1]):
                    best = (name, p)
    return best[0] if best else None

def _out(ctx, root, outputs, manifest, path):
    f = ctx.actions.declare_file(root + path)
    outputs.append(f)
    manifest.append(path)
    return f

def _cmake_list(items):
    return ";".join([i.replace(";", "\\;") for i in items])

def _impl(ctx):
    root = ctx.label.name + "/"
    layers = []
    for spec in ctx.attr.layers:
        name, _, prefixes = spec.partition("=")
        layers.append((name, prefixes.split(",")))
    layer_names = [n for n, _ in layers]

    nodes = {}
    for d in ctx.attr.deps:
        for n in d[_Node].nodes.to_list():
            nodes[n.label] = n

    layer_of = {}
    for label, n in nodes.items():
        if n.workspace:
            continue
        layer = _layer_of(n.package, layers)
        if layer == None and n.objects:
            fail("%s has code but no layer of %s claims its package; add it to `layers`" % (label, ctx.label))
        if n.alwayslink:
            fail("%s is alwayslink: an archive would drop it; such a library is no public library" % label)
        layer_of[label] = layer

    # Per layer: its objects, the layers it uses, and the flags of the
    # libraries of other repositories it reaches (not through another layer).
    info = {name: struct(objects = [], deps = {}, flags = [], torch_flags = [], other_flags = [], torch = [False]) for name in layer_names}
    for label, n in nodes.items():
        layer = layer_of.get(label)
        if layer == None:
            continue
        info[layer].objects.extend(n.objects)
        info[layer].other_flags.extend(n.flags)
        for f in n.flags:
            if f not in info[layer].flags:
                info[layer].flags.append(f)
        todo = list(n.deps)
        seen = {}
        for _ in range(1 << 20):  # Starlark has no while.
            if not todo:
                break
            dep = todo.pop(0)
            if dep in seen or dep not in nodes:
                continue
            seen[dep] = True
            d = nodes[dep]
            if not d.workspace:
                if layer_of.get(dep) and layer_of[dep] != layer:
                    info[layer].deps[layer_of[dep]] = True
                continue
            if d.workspace == "local_libtorch":
                info[layer].torch[0] = True
                info[layer].torch_flags.extend(d.flags)
            else:
                info[layer].other_flags.extend(d.flags)
            for f in d.flags:
                if f not in info[layer].flags:
                    info[layer].flags.append(f)
            todo += list(d.deps)
    for name in layer_names:
        for dep in info[name].deps:
            if layer_names.index(dep) > layer_names.index(name):
                fail("layer %s uses %s, which `layers` lists after it: list layers low to high" % (name, dep))
    present = [n for n in layer_names if info[n].objects]

    # A layer's objects may call a system library directly that they reach
    # only through a lower layer's targets (libtorch's headers, inline):
    # each layer links what the layers under it link too.
    # The same for the layers themselves: a layer links every layer under
    # the ones it uses (inline code of their headers calls into those).
    for name in layer_names:
        for dep in layer_names:
            if dep in info[name].deps:
                for lower in info[dep].deps:
                    info[name].deps[lower] = True
        for dep in layer_names:
            if dep not in info[name].deps:
                continue
            if info[dep].torch[0]:
                info[name].torch[0] = True
                info[name].torch_flags.extend(info[dep].torch_flags)
            info[name].other_flags.extend(info[dep].other_flags)
            for f in info[dep].flags:
                if f not in info[name].flags:
                    info[name].flags.append(f)

    cc_toolchain = find_cpp_toolchain(ctx)
    outputs = []
    manifest = []

    # Headers, at their include path below include/lockstep/.
    done = {}
    for n in nodes.values():
        if n.workspace:
            continue
        for h in n.headers:
            if h.short_path.startswith("../") or h.short_path in done:
                continue
            done[h.short_path] = True
            ctx.actions.symlink(output = _out(ctx, root, outputs, manifest, "include/lockstep/" + h.short_path), target_file = h)
    for h in ctx.files.forwarding_headers:
        if h.short_path not in done:
            done[h.short_path] = True
            ctx.actions.symlink(output = _out(ctx, root, outputs, manifest, "include/lockstep/" + h.short_path), target_file = h)

    linkopts = ctx.fragments.cpp.linkopts
    libs = {}
    for name in present:
        objects = info[name].objects
        archive = _out(ctx, root, outputs, manifest, "lib/liblockstep_%s.a" % name)
        args = ctx.actions.args()
        args.add("qcsD", archive)
        args.add_all(objects)
        ctx.actions.run(
            executable = cc_toolchain.ar_executable,
            arguments = [args],
            inputs = objects,
            outputs = [archive],
            mnemonic = "LockstepArchive",
            progress_message = "Archiving lockstep layer %s" % name,
        )
        shared = _out(ctx, root, outputs, manifest, "lib/liblockstep_%s.so" % name)
        lower = [d for d in present if d in info[name].deps]
        flags = info[name].flags
        args = ctx.actions.args()
        args.add_all(["-shared", "-o", shared, "-Wl,-soname,liblockstep_%s.so" % name, "-Wl,--no-undefined"])
        args.add_all(objects)
        args.add("-L" + shared.dirname)
        args.add_all(["-llockstep_" + d for d in lower])
        args.add("-Wl,-rpath,$ORIGIN")
        args.add_all(flags)
        args.add_all(linkopts)
        args.add_all(["-lstdc++", "-lm"])
        ctx.actions.run(
            executable = cc_toolchain.compiler_executable,
            arguments = [args],
            inputs = objects + [libs[d] for d in lower],
            outputs = [shared],
            mnemonic = "LockstepSharedLibrary",
            progress_message = "Linking lockstep layer %s" % name,
            use_default_shell_env = True,
        )
        libs[name] = shared

    for label, name in ctx.attr.binaries.items():
        ctx.actions.symlink(output = _out(ctx, root, outputs, manifest, "bin/" + name), target_file = label[DefaultInfo].files_to_run.executable, is_executable = True)

    # CMake: one imported target per layer.
    torch_layers = [n for n in present if info[n].torch[0]]
    ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/cmake/lockstep/lockstepLayers.cmake"), "\n".join([
        "# Generated by //bazel:install_package.bzl.",
        "set(lockstep_VERSION \"%s\")" % ctx.attr.version,
        "set(lockstep_LAYERS %s)" % " ".join(present),
        "set(lockstep_TORCH_LAYERS %s)" % " ".join(torch_layers),
        "set(lockstep_TORCH_VERSION \"%s\")" % ctx.attr.torch_version,
        "",
    ]))
    lines = [
        "# Generated by //bazel:install_package.bzl: lockstep's layers as imported targets.",
        "# Included by lockstepConfig.cmake, which sets _lockstep_prefix, _lockstep_kind (SHARED or",
        "# STATIC), _lockstep_suffix and _lockstep_have_torch.",
        "",
    ]
    for name in present:
        deps = ["lockstep::" + d for d in present if d in info[name].deps]
        link = deps + (["torch"] if info[name].torch[0] else []) + [
            f
            for f in info[name].flags
            if f not in info[name].torch_flags or f in info[name].other_flags
        ]
        indent = "  " if info[name].torch[0] else ""
        if indent:
            lines.append("if(_lockstep_have_torch)")
        lines += [indent + line for line in [
            "if(NOT TARGET lockstep::%s)" % name,
            "  add_library(lockstep::%s ${_lockstep_kind} IMPORTED)" % name,
            "  set_target_properties(lockstep::%s PROPERTIES" % name,
            "    IMPORTED_LOCATION \"${_lockstep_prefix}/lib/liblockstep_%s${_lockstep_suffix}\"" % name,
            "    IMPORTED_SONAME \"liblockstep_%s.so\"" % name,
            "    INTERFACE_INCLUDE_DIRECTORIES \"${_lockstep_prefix}/include/lockstep\"",
            "    INTERFACE_COMPILE_FEATURES cxx_std_17",
            "    INTERFACE_LINK_LIBRARIES \"%s\")" % _cmake_list(link),
            "endif()",
            "list(APPEND lockstep_TARGETS lockstep::%s)" % name,
        ]]
        if indent:
            lines.append("endif()")
        lines.append("")
    ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/cmake/lockstep/lockstepTargets.cmake"), "\n".join(lines))
    config = _out(ctx, root, outputs, manifest, "lib/cmake/lockstep/lockstepConfig.cmake")
    ctx.actions.symlink(output = config, target_file = ctx.file.config)
    ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/cmake/lockstep/lockstepConfigVersion.cmake"), "\n".join([
        "# Generated by //bazel:install_package.bzl.",
        "set(PACKAGE_VERSION \"%s\")" % ctx.attr.version,
        "if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)",
        "  set(PACKAGE_VERSION_COMPATIBLE FALSE)",
        "else()",
        "  set(PACKAGE_VERSION_COMPATIBLE TRUE)",
        "  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)",
        "    set(PACKAGE_VERSION_EXACT TRUE)",
        "  endif()",
        "endif()",
        "",
    ]))

    # pkg-config: one file per layer, `lockstep` for every layer without libtorch.
    torch_cflags = " ".join(["-I" + d for d in ctx.attr.torch_includes])
    for name in present:
        requires = ["lockstep-" + d for d in present if d in info[name].deps]
        cflags = "-I${includedir}/lockstep" + (" " + torch_cflags if info[name].torch[0] else "")
        ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/pkgconfig/lockstep-%s.pc" % name), "\n".join([
            "prefix=${pcfiledir}/../..",
            "libdir=${prefix}/lib",
            "includedir=${prefix}/include",
            "",
            "Name: lockstep-%s" % name,
            "Description: lockstep's %s layer (data-parallel training)" % name,
            "Version: %s" % ctx.attr.version,
            "Requires: %s" % ", ".join(requires),
            "Cflags: -std=c++17 %s" % cflags,
            # The system libraries in Libs, not Libs.private: lockstep's
            # headers call absl's inline code, so programs link absl too.
            "Libs: -L${libdir} -llockstep_%s %s" % (name, " ".join(info[name].flags)),
            "",
        ]))
    plain = [n for n in present if not info[n].torch[0]]
    ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/pkgconfig/lockstep.pc"), "\n".join([
        "prefix=${pcfiledir}/../..",
        "",
        "Name: lockstep",
        "Description: lockstep's libraries without libtorch (%s)" % ", ".join(plain),
        "Version: %s" % ctx.attr.version,
        "Requires: %s" % ", ".join(["lockstep-" + n for n in plain]),
        "",
    ]))

    # For python/setup.py: what to link for a layer, without CMake.
    ctx.actions.write(_out(ctx, root, outputs, manifest, "lib/lockstep/manifest.json"), json.encode(struct(
        version = ctx.attr.version,
        torch_version = ctx.attr.torch_version,
        layers = [
            struct(
                name = n,
                deps = [d for d in present if d in info[n].deps],
                flags = info[n].flags,
                torch = info[n].torch[0],
            )
            for n in present
        ],
    )) + "\n")
    listing = ctx.actions.declare_file(root + "share/lockstep/MANIFEST")
    manifest.append("share/lockstep/MANIFEST")
    ctx.actions.write(listing, "\n".join(sorted(manifest)) + "\n")
    outputs.append(listing)
    return [DefaultInfo(files = depset(outputs), runfiles = ctx.runfiles(files = outputs))]

lockstep_install_package = rule(
    implementation = _impl,
    attrs = {
        "layers": attr.string_list(mandatory = True),
        "deps": attr.label_list(aspects = [_graph_aspect], providers = [CcInfo]),
        "forwarding_headers": attr.label_list(allow_files = [".h"]),
        "binaries": attr.label_keyed_string_dict(cfg = "target"),
        "config": attr.label(allow_single_file = True, mandatory = True),
        "version": attr.string(mandatory = True),
        "torch_version": attr.string(),
        "torch_includes": attr.string_list(),
        "_cc_toolchain": attr.label(default = Label("@bazel_tools//tools/cpp:current_cc_toolchain")),
    },
    fragments = ["cpp"],
    toolchains = ["@bazel_tools//tools/cpp:toolchain_type"],
)
