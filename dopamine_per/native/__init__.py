# coding=utf-8
"""The replay memory's native code: C++ kernels and TensorFlow ops.

`replay_core.h` holds the loops; `replay_core.cc` is the TensorFlow-free
core library (the registry of memories shared with the ops, with a C
interface for ctypes: `core`, `native_memory`),
`replay_ops.cc` the TensorFlow ops, `replay_python.cc` the kernels and the
memories' `Lock` type as a CPython extension module
(`replay_memory.kernels.native_kernels`).
`build` compiles them against the installed TensorFlow and Python on first
use, cached; `core` loads the core library, `extension` the extension
module; `native_memory` is a memory's entry in the core library's
registry. Nothing here imports TensorFlow except `build.ops_library`.
"""
