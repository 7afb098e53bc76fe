# coding=utf-8
"""The replay memory's native code: C++ kernels and TensorFlow ops.

`build` compiles them on first use, cached; `core` loads the core library
(the registry of memories shared with the ops), `extension` the kernels'
extension module; `native_memory` is a memory's entry in the registry.
Nothing here imports TensorFlow except `build.ops_library`. The design:
docs/architecture.md#native-ops.
"""
