"""Offline stand-in for bazelbuild/rules_python's python/defs.bzl.

Bazel 4 ships the Python rules natively; the real rules_python only wraps
them. This stand-in re-exports the same names so that BUILD files can load
them from `@rules_python//python:defs.bzl` exactly as they would with the real
repository, which cannot be downloaded in the project's offline CI.
"""

load(
    "@bazel_tools//tools/python:toolchain.bzl",
    _py_runtime_pair = "py_runtime_pair",
)

def py_library(**attrs):
    """Forwards to Bazel's native `py_library`."""
    native.py_library(**attrs)

def py_binary(**attrs):
    """Forwards to Bazel's native `py_binary`."""
    native.py_binary(**attrs)

def py_test(**attrs):
    """Forwards to Bazel's native `py_test`."""
    native.py_test(**attrs)

def py_runtime(**attrs):
    """Forwards to Bazel's native `py_runtime`."""
    native.py_runtime(**attrs)

py_runtime_pair = _py_runtime_pair
