# coding=utf-8
"""The replay memory's native code: C++ kernels and TensorFlow ops.

`replay_core.h` holds the loops; `replay_core.cc` is the TensorFlow-free
core library (the kernels for ctypes and the registry of memories shared
with the ops), `replay_ops.cc` the TensorFlow ops. `build` compiles both
against the installed TensorFlow on first use, cached; `core` loads the
core library. Nothing here imports TensorFlow except `build.ops_library`.
"""
