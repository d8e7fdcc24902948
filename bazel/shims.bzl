"""Tiny local stand-ins for repositories Bazel 4.2.3 fetches from the network.

Debian's bazel-rules-cc is too new for Bazel 4.2.3 (no use_cpp_toolchain), and
the build machines are offline, so these re-export the native rules.
"""

_CC_RULES = [
    "cc_binary",
    "cc_import",
    "cc_library",
    "cc_proto_library",
    "cc_test",
    "cc_toolchain",
    "cc_toolchain_suite",
    "fdo_prefetch_hints",
    "fdo_profile",
    "objc_import",
    "objc_library",
]

_JAVA_RULES = [
    "java_binary",
    "java_import",
    "java_library",
    "java_lite_proto_library",
    "java_plugin",
    "java_proto_library",
    "java_runtime",
    "java_test",
    "java_toolchain",
]

def _reexport(rules):
    return "".join(["%s = native.%s\n" % (r, r) for r in rules])

def _rules_cc_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"rules_cc\")\n")
    ctx.file("BUILD", "")
    ctx.file("cc/defs.bzl", _reexport(_CC_RULES))
    ctx.file("cc/BUILD", "\n".join([
        "package(default_visibility = [\"//visibility:public\"])",
        "alias(name = \"toolchain_type\", actual = \"@bazel_tools//tools/cpp:toolchain_type\")",
        "",
    ]))

def _rules_java_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"rules_java\")\n")
    ctx.file("BUILD", "")
    ctx.file("java/defs.bzl", _reexport(_JAVA_RULES))
    ctx.file("java/BUILD", "")

def _coverage_tools_impl(ctx):
    ctx.file("WORKSPACE", "workspace(name = \"remote_coverage_tools\")\n")
    ctx.file("BUILD", "\n".join([
        "package(default_visibility = [\"//visibility:public\"])",
        "filegroup(name = \"coverage_report_generator\", srcs = [])",
        "filegroup(name = \"lcov_merger\", srcs = [])",
        "",
    ]))

rules_cc_shim = repository_rule(implementation = _rules_cc_impl)
rules_java_shim = repository_rule(implementation = _rules_java_impl)
coverage_tools_shim = repository_rule(implementation = _coverage_tools_impl)
